"""The optional fields a target file may set besides its density: initial, log_z, name, description.

Python files and YAML files accept the same fields with the same meaning, so both loaders check
them here and build the `Target` the same way.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Mapping, Optional

from mcd_cli.targets.base import LogDensity, Target, TargetError
from mcd_cli.targets.validate import probe

INITIAL_KEYS = ("mean", "scale")


@dataclasses.dataclass(frozen=True)
class BoundModel:
    """A NumPyro or PyMC model file's density with its data bound, and what the file loader needs to
    make its `Target` (`pyfile.model_target`).

    Attributes:
        density: the model's log density on R^d (`numpyro_model.ModelDensity`, `pymc_model.PyMCDensity`).
        values: the names a file's `log_z(...)` may take, with their bound values.
        recorded: the data the record names (`describe_value` of each).
        bound: what those names are, in words, for the message when `log_z` takes another.
        kind: "NumPyro model" or "PyMC model"; `latents`: what its coordinates are called.
    """

    density: Any
    values: Mapping[str, Any]
    recorded: Mapping[str, Any]
    bound: str
    kind: str
    latents: str


def _number_or_list(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        return True
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value
    )


def parse_initial(value: Any, display: str) -> tuple[Any, Any]:
    """`initial: {mean: ..., scale: ...}` (each a number or a list of dim numbers) -> (mean, scale).

    Missing keys default to mean 0 and scale 1 (the standard normal).
    """
    if value is None:
        return 0.0, 1.0
    if not isinstance(value, Mapping):
        raise TargetError(
            f"{display}: initial must be a mapping with keys mean and scale, e.g. {{mean: 0, scale: 3}}"
        )
    for key in value:
        if key not in INITIAL_KEYS:
            raise TargetError(f"{display}: unknown key {key!r} in initial; allowed keys: mean, scale")
    mean, scale = value.get("mean", 0.0), value.get("scale", 1.0)
    for key, v in (("mean", mean), ("scale", scale)):
        if not _number_or_list(v):
            raise TargetError(f"{display}: initial {key} must be a number or a list of numbers, got {v!r}")
    return mean, scale


def parse_log_z(value: Any, display: str) -> Optional[float]:
    """A known log Z must be a finite number, or a 0-d numpy/jax array holding one (or absent)."""
    if value is None:
        return None
    if getattr(value, "shape", None) == () and getattr(value, "dtype", None) is not None:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TargetError(f"{display}: log_z must be a finite number, got {value!r}")
    return float(value)


def parse_text(value: Any, key: str, display: str) -> Optional[str]:
    """`name` and `description` are strings (or absent)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TargetError(f"{display}: {key} must be a string, got {value!r}")
    return value


def build(
    log_density: LogDensity,
    dim: Any,
    display: str,
    *,
    initial: Any = None,
    log_z: Any = None,
    name: Any = None,
    description: Any = None,
    default_name: str = "target",
    params: Optional[Mapping[str, Any]] = None,
    source: str = "",
    to_user: Optional[Callable] = None,
) -> Target:
    """Checks the fields and builds the `Target`; every error message starts with `display`.
    `to_user` maps a point to the user's named values (`Target.to_user`; a NumPyro model's sites)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim <= 0:
        raise TargetError(f"{display}: dim must be a positive integer, got {dim!r}")
    mean, scale = parse_initial(initial, display)
    try:
        return Target.create(
            log_density,
            int(dim),
            initial_mean=mean,
            initial_scale=scale,
            initial_declared=initial is not None,
            log_z=parse_log_z(log_z, display),
            name=parse_text(name, "name", display) or default_name,
            description=(parse_text(description, "description", display) or "").strip(),
            params=dict(params or {}),
            source=source,
            to_user=to_user,
        )
    except TargetError as err:
        raise TargetError(f"{display}: {err}") from None


def build_from_file(
    log_density: LogDensity, dim: Any, display: str, path: Any, fields: Mapping[str, Any], **kwargs: Any
) -> Target:
    """`build` for a target a file defines: `initial`, `log_z` and `name` come from the file's
    `fields`, the file's stem is the default name, and the density is probed at a few points so
    that a broken file fails here, naming itself."""
    target = build(
        log_density,
        dim,
        display,
        initial=fields.get("initial"),
        log_z=fields.get("log_z"),
        name=fields.get("name"),
        default_name=path.stem,
        source=str(path),
        **kwargs,
    )
    probe(target.log_density, target.dim, display, [str(path)])
    return target
