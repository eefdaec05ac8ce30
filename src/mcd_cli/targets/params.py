"""Target parameters: declared by a function's keyword defaults, set from YAML or `key=value` text.

A family (see `families.py`) or a target file's `make_target(**params)` declares its parameters by
its keyword defaults; the type of each default is the type of the parameter. Values from the
command line arrive as strings and are converted with that type; values from YAML arrive typed and
are checked against it. Unknown keys are errors that list the allowed ones.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import yaml

from mcd_cli.io import safeyaml
from mcd_cli.targets.base import TargetError

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def declared_params(func: Callable, what: str) -> dict[str, Any]:
    """The parameters `func` declares, as `{name: default}`.

    Args:
        func: a function whose parameters all have defaults (a family or a `make_target`).
        what: how to name `func` in error messages, e.g. "make_target in flow.py".

    Raises:
        TargetError: a parameter has no default (so it has no type), or is `*args`.
    """
    declared = {}
    for p in inspect.signature(func).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            raise TargetError(f"{what}: *{p.name} is not allowed; declare each parameter as key=default")
        if p.default is p.empty:
            raise TargetError(
                f"{what}: parameter {p.name!r} needs a default value (its type comes from the default)"
            )
        declared[p.name] = p.default
    return declared


def type_name(default: Any) -> str:
    """The name of the type a parameter with this default takes, for messages."""
    if default is None:
        return "any plain value"
    if isinstance(default, bool):
        return "true/false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, (list, tuple)):
        return "a list"
    return type(default).__name__


def from_text(text: str, default: Any) -> Any:
    """Converts a `key=value` string to the type of `default`.

    Raises:
        ValueError: the text is not of that type.
    """
    if isinstance(default, bool):
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(text)
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, str):
        return text
    try:
        value = safeyaml.load(text)
    except yaml.YAMLError:
        raise ValueError(text) from None
    return check_type(value, default)


def check_type(value: Any, default: Any) -> Any:
    """Returns `value` if it has the type of `default` (an int counts as a float), else raises ValueError."""
    if default is None:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, (list, tuple)):
        ok = isinstance(value, (list, tuple))
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ValueError(value)
    return value


def bind_params(
    declared: Mapping[str, Any],
    given: Mapping[str, Any] | None,
    what: str,
) -> dict[str, Any]:
    """Fills in `declared` defaults with `given` values, converting strings and checking types.

    Args:
        declared: `{name: default}` from `declared_params`.
        given: values to set; a `str` value for a non-string parameter is parsed as `key=value` text.
        what: how to name the owner of the parameters in error messages.

    Returns:
        `{name: value}` for every declared parameter.

    Raises:
        TargetError: an unknown key, or a value of the wrong type.

    Example:
        >>> bind_params({"dim": 2, "scale": 1.0}, {"dim": "20"}, "family normal")
        {'dim': 20, 'scale': 1.0}
    """
    bound = dict(declared)
    for key, value in (given or {}).items():
        if key not in declared:
            allowed = ", ".join(sorted(declared)) or "none"
            raise TargetError(f"unknown parameter {key!r} for {what}; allowed parameters: {allowed}")
        default = declared[key]
        try:
            if isinstance(value, str) and not isinstance(default, str):
                bound[key] = from_text(value, default)
            else:
                bound[key] = check_type(value, default)
        except (ValueError, TypeError):
            raise TargetError(
                f"parameter {key!r} of {what} must be {type_name(default)}, got {value!r}"
            ) from None
    return bound
