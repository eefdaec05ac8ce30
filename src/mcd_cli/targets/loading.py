"""`load_target`: from a command-line spec (a file path, a bundled name, or "-") to a `Target`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.bundled import bundled_files, find_bundled
from mcd_cli.targets.pyfile import from_module, import_file
from mcd_cli.targets.validate import require_readable
from mcd_cli.targets.yamlfile import load_yaml_text

PYTHON_SUFFIXES = (".py",)
YAML_SUFFIXES = (".yaml", ".yml")


def _read_text(path: Path, display: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TargetError(f"{display} is not a YAML text file (it is not UTF-8 text)") from None
    except OSError as err:
        raise TargetError(f"cannot read {display}: {err.strerror or err}") from None


def _no_model_inputs(display: str, model: Optional[str], data: Optional[Mapping[str, Any]]) -> None:
    """Model names and data files bind to a NumPyro model's arguments; a YAML target has none."""
    if model is not None or data:
        given = "model name" if model is not None else "data"
        raise TargetError(
            f"{display} is a YAML target and takes no {given}; model names and data files apply to "
            "NumPyro model files (.py)"
        )


def load_target(
    spec: str,
    params: Optional[Mapping[str, str]] = None,
    *,
    stdin_text: Optional[str] = None,
    model: Optional[str] = None,
    data: Optional[Mapping[str, Any]] = None,
) -> Target:
    """Loads a target from a file, a bundled name, or YAML on standard input.

    Args:
        spec: a `.py` or `.yaml`/`.yml` path; the name of a bundled target (`gmm8`, see
            `bundled_targets()`); or "-" for YAML text given as `stdin_text`.
        params: `key=value` parameters from the command line, as strings (converted by the type
            of the parameter's default) or typed values. Unknown keys are errors.
        stdin_text: the YAML text when `spec` is "-" (relative paths in it are relative to the
            working directory).
        model: the name of the NumPyro model function in a `.py` file (default `model`).
        data: named arrays (see `datafile.read_data`) bound to the NumPyro model's keyword
            arguments by name, over the file's module-level values.

    Returns:
        The `Target`, whose log density has been traced once to check its output.

    Raises:
        TargetError: for every bad input, with a one-line message.

    Example:
        >>> t = load_target("gmm8", {"dim": "200"})
        >>> t.dim, t.log_z
        (200, 0.0)
    """
    if not isinstance(spec, str) or not spec:
        raise TargetError("no target given: pass a .py or .yaml file, a bundled target name, or - for stdin")
    if spec == "-":
        if stdin_text is None or not stdin_text.strip():
            raise TargetError("no YAML text on standard input (target '-')")
        _no_model_inputs("<stdin>", model, data)
        return load_yaml_text(
            stdin_text, "<stdin>", Path.cwd(), params, default_name="stdin", source="<stdin>"
        )
    path, display = Path(spec).expanduser(), spec
    bundled = find_bundled(spec)
    if not (path.suffix or "/" in spec or "\\" in spec or (bundled is None and path.exists())):
        if bundled is None:
            names = ", ".join(bundled_files()) or "none installed"
            raise TargetError(
                f"no target file or bundled target named {spec!r}; give a .py or .yaml path, or one of: {names}"
            )
        path, display = bundled, bundled.name
    require_readable(path, display, "target", ".py, .yaml or .yml")
    if path.suffix in PYTHON_SUFFIXES:
        return from_module(import_file(path, display), params, display, model=model, data=data)
    if path.suffix in YAML_SUFFIXES:
        _no_model_inputs(display, model, data)
        text = _read_text(path, display)
        return load_yaml_text(
            text, display, path.resolve().parent, params, default_name=path.stem, source=str(path.resolve())
        )
    raise TargetError(
        f"{display}: a target file must be Python (.py) or YAML (.yaml, .yml), "
        f"got {path.suffix or 'no extension'!r}"
    )


def bundled_targets() -> list[dict]:
    """Describes every bundled target, loaded with its default parameters.

    Returns:
        One dict per target with keys `name`, `dim`, `log_z` (None when unknown or, for a
        conditional target, one per datum), `description`, `path`, sorted by name.

    Example:
        >>> names = [t["name"] for t in bundled_targets()]
        >>> "gmm8" in names
        True
    """
    out = []
    for name, path in bundled_files().items():
        target = load_target(str(path))
        out.append(
            {
                "name": name,
                "dim": target.dim,
                "log_z": None if callable(target.log_z) else target.log_z,
                "description": target.description,
                "path": str(path),
            }
        )
    return out
