"""The `mcd` command line: parse options, call the run layer, render the record.

Nothing numerical and no file format lives here. One module per command (`estimate`, `compare`,
`check`, `targets`); `options` declares every option once, in help panels, its choices and stated
defaults read from the library, and each command takes its options from there by name; `settings`
turns them into the library's settings; `output` writes tables, JSON and warnings; `app` holds the
Typer application and maps errors to exit codes.
"""

from mcd_cli.cli import check, compare, estimate, targets  # noqa: F401  (registers the commands)
from mcd_cli.cli.app import app, exit_code, message


def main() -> None:
    """Console-script entry point (`mcd`)."""
    app()


__all__ = ["app", "main", "exit_code", "message"]
