"""The library of ready-to-run targets shipped with mcd-cli (the repository's top-level `targets/`).

In a wheel, `targets/` is installed as the package `mcd_cli._bundled` and found with
`importlib.resources`; in a source checkout that was not installed, it is found next to `src/`.
A bundled target is named by its file name without the extension (`gmm8` for `gmm8.yaml`).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Optional

SUFFIXES = (".yaml", ".yml", ".py")


def bundled_dir() -> Optional[Path]:
    """The folder holding the bundled target files, or None when it is missing."""
    try:
        folder = Path(str(importlib.resources.files("mcd_cli._bundled")))
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parents[3] / "targets"
    return folder if folder.is_dir() else None


def bundled_files() -> dict[str, Path]:
    """`{name: path}` of every bundled target file, sorted by name."""
    folder = bundled_dir()
    if folder is None:
        return {}
    files = {}
    for path in sorted(folder.iterdir()):
        if path.suffix in SUFFIXES and not path.name.startswith("_") and path.is_file():
            files.setdefault(path.stem, path)
    return files


def find_bundled(name: str) -> Optional[Path]:
    """The path of the bundled target called `name`, or None."""
    return bundled_files().get(name)
