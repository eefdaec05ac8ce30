"""Files: nothing the user had is lost.

Modules: `files` (atomic writes, all-or-nothing locked appends, writability checks), `checkpoint`
(parameter and training-state archives), `safeyaml` (YAML that refuses repeated keys).
"""
