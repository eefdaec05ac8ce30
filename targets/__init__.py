"""Bundled target files of mcd-cli.

This folder is installed as the package `mcd_cli._bundled` (see pyproject.toml) so that
`mcd run gmm8` finds `gmm8.yaml` after a regular install; the files are meant to be read and
copied, not imported.
"""
