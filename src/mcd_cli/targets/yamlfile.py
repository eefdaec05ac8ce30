"""Loading a target from YAML text (a file, or standard input).

Schema (PyYAML `safe_load` only: plain data, no tags, nothing executed; a repeated key is an
error)::

    family: gaussian_mixture     # one of families.FAMILIES, or instead:
    python: my_target.py         # a Python target file, relative to the YAML file
    params: {dim: 20, seed: 0}   # the family's / make_target's parameters
    initial: {mean: 0, scale: 3} # optional, default N(0, I)
    log_z: 0.0                   # optional known log Z
    name: gmm8                   # optional
    description: one line        # optional

Parameters given on the command line override `params:`. A `log_z:` written in the file holds for
the parameters written in the file: when the command line changes them, it is dropped (a family or
`make_target` that computes log Z itself still sets it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from mcd_cli.io import safeyaml
from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.families import FAMILIES, PATH_PARAMETERS
from mcd_cli.targets.fields import build, parse_log_z
from mcd_cli.targets.params import bind_params, declared_params
from mcd_cli.targets.pyfile import declared, from_module, import_file
from mcd_cli.targets.validate import one_line, require_mapping

KEYS = ("family", "python", "params", "initial", "log_z", "name", "description")


def parse_yaml(text: str, display: str) -> dict:
    """Safe-loads the text (`safeyaml.load`) and checks it is a mapping of known keys; errors name the line."""
    try:
        data = safeyaml.load(text)
    except safeyaml.DuplicateKeyError as err:
        raise TargetError(
            f"{display} line {err.problem_mark.line + 1}: {err.problem}; keep one of the two"
        ) from None
    except yaml.constructor.ConstructorError as err:
        match = re.search(r"tag '([^']*)'", str(err.problem))
        tag = match.group(1).replace("tag:yaml.org,2002:", "!!") if match else "?"
        line = err.problem_mark.line + 1 if err.problem_mark else "?"
        raise TargetError(
            f"{display} line {line}: YAML tag {tag} is not plain data; only plain YAML is accepted "
            "(nothing was executed)"
        ) from None
    except yaml.MarkedYAMLError as err:
        line = err.problem_mark.line + 1 if err.problem_mark else "?"
        raise TargetError(f"{display} line {line}: malformed YAML: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise TargetError(f"{display} is not a YAML text file: {str(err).splitlines()[0]}") from None
    require_mapping(
        data, display, f"be a YAML mapping with keys {', '.join(KEYS)} (got {type(data).__name__}); see docs/targets.md"
    )
    for key in data:
        if key not in KEYS:
            raise TargetError(f"{display}: unknown key {key!r}; allowed keys: {', '.join(KEYS)}")
    if ("family" in data) == ("python" in data):
        raise TargetError(
            f"{display} needs exactly one of the keys family (a built-in family) or python (a .py file)"
        )
    params = data.get("params")
    if params is None:
        data["params"] = {}
    elif not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise TargetError(
            f"{display}: params must be a mapping of parameter names to values, e.g. {{dim: 20}}"
        )
    return data


def _resolve_paths(params: Mapping[str, Any], base_dir: Path) -> dict:
    out = dict(params)
    for key in PATH_PARAMETERS:
        value = out.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            out[key] = str((base_dir / value).resolve())
    return out


def load_yaml_text(
    text: str,
    display: str,
    base_dir: Path,
    params: Optional[Mapping[str, str]] = None,
    default_name: str = "target",
    source: str = "",
) -> Target:
    """Builds the target a YAML text describes.

    Args:
        text: the YAML text.
        display: how to name it in messages (a file name, or "<stdin>").
        base_dir: the folder that relative paths in the text (python:, data:) are relative to.
        params: command-line `key=value` parameters, overriding `params:` in the text.
        default_name: the name when the text sets none.
        source: recorded as `Target.source`.

    Raises:
        TargetError: with a one-line message, for every way the text can be unusable.
    """
    data = parse_yaml(text, display)
    file_params, cli_params = data["params"], dict(params or {})
    if "family" in data:
        family = data["family"]
        if not isinstance(family, str) or family not in FAMILIES:
            raise TargetError(
                f"{display}: unknown family {family!r}; allowed families: {', '.join(sorted(FAMILIES))}"
            )
        func = FAMILIES[family]
        what = f"family {family} in {display}"
        defaults = declared_params(func, what)
        from_file = bind_params(defaults, _resolve_paths(file_params, base_dir), what)
        bound = bind_params(from_file, cli_params, what)
        try:
            made = func(**bound)
        except TargetError as err:
            raise TargetError(f"{display}: {err}") from None
        except (ValueError, TypeError) as err:
            raise TargetError(
                f"{display}: family {family} cannot be built from these params: {one_line(err)}"
            ) from None
    else:
        python = data["python"]
        if not isinstance(python, str) or not python.endswith(".py"):
            raise TargetError(f"{display}: python must be the path of a .py file, got {python!r}")
        path = (base_dir / python).resolve()
        if not path.is_file():
            raise TargetError(f"{display}: python file not found: {path}")
        module = import_file(path, python)
        made = from_module(module, {**file_params, **cli_params}, python)
        bound = made.params
        from_file = bind_params(declared(module, python), file_params, python)
    log_z = parse_log_z(data.get("log_z"), display)
    if made.log_z is not None:
        if log_z is not None and abs(log_z - made.log_z) > 1e-6 * max(1.0, abs(made.log_z)):
            raise TargetError(
                f"{display}: log_z is {log_z} but the target computes its exact log Z = {made.log_z}; "
                "remove log_z from the file"
            )
        log_z = made.log_z
    elif bound != from_file:
        log_z = None
    return build(
        made.log_density,
        made.dim,
        display,
        initial=data.get("initial"),
        log_z=log_z,
        name=data.get("name") or default_name,
        description=data.get("description") or made.description,
        params=bound,
        source=source,
    )
