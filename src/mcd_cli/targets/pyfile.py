"""Loading a target from a Python file.

The file is imported from its path as a module under a unique name (never `eval` of strings), with
its folder on `sys.path` while it runs, so that it can import helper modules next to it. It defines
either

* module-level `dim` and `log_density(x)`, and optionally `log_z`, `initial`, `name`,
  `description` (default: the first line of the module docstring); or
* `make_target(**params)`, whose keyword defaults declare parameters settable as `key=value`, and
  which returns a dict with the same keys (or a `Target`); or
* a NumPyro model function `model` (or another name, given as `model=`), whose keyword arguments
  take the data (see `numpyro_model.py`); or
* a PyMC model, a `pymc.Model` object named `model` (or `model=`), whose `pm.Data` containers
  take the data (see `pymc_model.py`); or
* a conditional target: `dim`, `log_density(z, x)` (two arguments: latents and one datum) and a
  data set `data` (or a `--data` file), with optional functions of the datum `initial(x)`,
  `log_z(x)`, `features(x)` and the flag `amortise` (see `conditional.py`).

Every failure is a `TargetError` with a one-line message naming the file (and line).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Mapping, Optional

from mcd_cli.targets import numpyro_model, pymc_model
from mcd_cli.targets.conditional import ConditionalTarget
from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.fields import build_from_file
from mcd_cli.targets.numpyro_model import missing_numpyro
from mcd_cli.targets.pymc_model import missing_pymc
from mcd_cli.targets.params import bind_params, declared_params
from mcd_cli.targets.validate import one_line, user_error, where

RESULT_KEYS = ("log_density", "dim", "log_z", "initial", "name", "description")

_counter = itertools.count()


@contextlib.contextmanager
def _folder_on_path(folder: Path) -> Iterator[None]:
    """Puts `folder` first on `sys.path`, and sends the user's prints to stderr (stdout is for results)."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def _import(path: Path, display: str) -> ModuleType:
    try:
        source = path.read_bytes()
    except OSError as err:
        raise TargetError(f"cannot read {display}: {err.strerror or err}") from None
    if b"\0" in source:
        raise TargetError(f"{display} is not a Python file (it holds binary data)")
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as err:
        raise TargetError(f"{display} line {err.lineno}: syntax error: {err.msg}") from None
    except ValueError as err:
        raise TargetError(f"{display} is not a Python file ({err})") from None
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"_mcd_target_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"{display} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as err:
        sys.modules.pop(module_name, None)
        if (err.name or "").split(".")[0] == "numpyro":
            raise missing_numpyro(display) from None
        if (err.name or "").split(".")[0] in ("pymc", "pytensor"):
            raise missing_pymc(display) from None
        raise TargetError(
            f"{where(display, err, [path])}: cannot import module {err.name!r}; install it, or put "
            f"{err.name}.py next to the target file"
        ) from None
    except SyntaxError as err:
        sys.modules.pop(module_name, None)
        raise TargetError(
            f"{err.filename} line {err.lineno}: syntax error: {err.msg} (imported by {display})"
        ) from None
    except (Exception, SystemExit) as err:  # the user's module may raise anything while importing
        named = user_error(err, (display, path))  # (while the module is still registered as the user's)
        sys.modules.pop(module_name, None)
        raise TargetError(
            named or f"{where(display, err, [path])}: error while importing the file: {one_line(err)}"
        ) from None
    return module


def _from_make_target(
    module: ModuleType, params: Mapping[str, Any], display: str, path: Path
) -> tuple[dict, dict]:
    make_target = module.make_target
    bound = bind_params(declared(module, display), params, display)
    try:
        result = make_target(**bound)
    except TargetError as err:
        raise TargetError(f"{display}: {err}") from None
    except Exception as err:  # the user's function may raise anything
        named = user_error(err, (display, path))
        raise TargetError(named or f"{where(display, err, [path])}: make_target raised {one_line(err)}") from None
    if isinstance(result, Target):
        fields = {k: getattr(result, k) for k in ("log_density", "dim", "log_z", "name", "description")}
        if result.initial_declared:
            fields["initial"] = {"mean": result.initial_mean.tolist(), "scale": result.initial_scale.tolist()}
        return fields, bound
    if not isinstance(result, Mapping):
        raise TargetError(
            f"{display}: make_target must return a dict with keys {', '.join(RESULT_KEYS)} (or a Target), "
            f"got {type(result).__name__}"
        )
    for key in result:
        if key not in RESULT_KEYS:
            raise TargetError(
                f"{display}: unknown key {key!r} returned by make_target; "
                f"allowed keys: {', '.join(RESULT_KEYS)}"
            )
    return dict(result), bound


def import_file(path: Path, display: Optional[str] = None) -> ModuleType:
    """Imports a Python target file as a module (its folder on `sys.path` while it runs)."""
    path = Path(path).resolve()
    with _folder_on_path(path.parent):
        return _import(path, display or str(path))


def declared(module: ModuleType, display: str) -> dict[str, Any]:
    """The parameters the file's `make_target` declares (`{}` for a module-level target)."""
    make_target = getattr(module, "make_target", None)
    if make_target is None:
        return {}
    if not callable(make_target):
        raise TargetError(f"{display}: make_target must be a function")
    return declared_params(make_target, f"make_target in {display}")


CONDITIONAL_KEYS = ("log_density", "dim", "data", "initial", "log_z", "features", "amortise", "name", "description")


def takes_datum(fn: Any) -> bool:
    """Whether `log_density` takes `(z, x)` (two required positional parameters): a conditional target."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) == 2


def _data_array(data: Mapping[str, Any], display: str) -> Any:
    """The data set from a --data file's named arrays: the one named `data`, or the only one."""
    if "data" in data:
        return data["data"]
    if len(data) == 1:
        return next(iter(data.values()))
    raise TargetError(
        f"{display} takes one data set, but the --data file holds {', '.join(sorted(data))}; name the "
        "array `data` (e.g. numpy.savez('test.npz', data=x))"
    )


def _conditional(
    module: ModuleType, params: Optional[Mapping[str, Any]], display: str, path: Path,
    data: Optional[Mapping[str, Any]],
) -> ConditionalTarget:
    if params:
        raise TargetError(f"{display} takes no parameters, got {', '.join(params)}")
    if not hasattr(module, "dim"):
        raise TargetError(f"{display} defines log_density(z, x) but not dim; add `dim = <number of latents>`")
    if data:
        array = _data_array(data, display)
    elif hasattr(module, "data"):
        array = module.data
    else:
        raise TargetError(
            f"{display} defines log_density(z, x) but no data set; define `data` (one datum per row) "
            "or pass --data FILE"
        )
    initial = getattr(module, "initial", None)
    mean, scale = 0.0, 1.0
    if initial is not None and not callable(initial):
        from mcd_cli.targets.fields import parse_initial

        (mean, scale), initial = parse_initial(initial, display), None
    log_z = getattr(module, "log_z", None)
    if log_z is not None and not callable(log_z):
        raise TargetError(
            f"{display}: log_z must be a function log_z(x) of the datum when log_density takes (z, x), "
            f"got {type(log_z).__name__}"
        )
    doc = (module.__doc__ or "").strip().splitlines()
    try:
        target = ConditionalTarget.create(
            module.log_density,
            module.dim,
            array,
            initial=initial,
            initial_mean=mean,
            initial_scale=scale,
            log_z=log_z,
            features=getattr(module, "features", None),
            amortise=bool(getattr(module, "amortise", False)),
            name=getattr(module, "name", path.stem),
            description=getattr(module, "description", doc[0] if doc else ""),
            source=str(path),
        )
    except TargetError as err:
        raise TargetError(f"{display}: {err}") from None
    _probe_conditional(target, display, path)
    return target


def _probe_conditional(target: ConditionalTarget, display: str, path: Path) -> None:
    """Traces the functions of the first datum once: a scalar log density, initial and features of the right shapes."""
    import jax
    import jax.numpy as jnp

    from mcd_cli.targets.conditional import context, datum_target

    x = jnp.asarray(target.data[0])
    try:
        one = jax.eval_shape(lambda z: target.log_density(z, x), jax.ShapeDtypeStruct((target.dim,), x.dtype))
        if one.shape != ():
            raise TargetError(f"{display}: log_density(z, x) must return a scalar, got shape {one.shape}")
        jax.eval_shape(lambda x: datum_target(target, x).initial_mean, x)
        jax.eval_shape(lambda x: context(target, x), x)
    except TargetError:
        raise
    except Exception as err:  # the user's functions may raise anything
        raise TargetError(
            f"{where(display, err, [path])}: evaluating the first datum failed: {one_line(err)}"
        ) from None


# How a model file binds values instead of taking --param ones, by framework.
_BIND_INSTEAD = {
    "PyMC model": "put the values in pm.Data containers and give a data file instead",
    "NumPyro model": "bind values to its keyword arguments in a data file instead",
}


def model_target(
    module: ModuleType, framework: ModuleType, model: Any, display: str, model_name: Optional[str],
    data: Optional[Mapping[str, Any]], params: Optional[Mapping[str, Any]],
) -> Target:
    """The `Target` of a PyMC or NumPyro model file: `framework` (`pymc_model` or `numpyro_model`)
    binds `data` and builds the density (`bound_model`); the file may also set `initial`, `name`,
    `description` (default: the first line of the module docstring) and the exact log p(data) as
    `log_z`: a function of the bound values, called with them by name (so it follows a data file),
    or a number, which holds for the file's own values only and is dropped when a data file is given.
    A model file takes its values as data: `params` must be empty."""
    path = Path(module.__file__).resolve()
    model_name = model_name or framework.DEFAULT_MODEL
    kind = "PyMC model" if framework is pymc_model else "NumPyro model"
    if params:
        raise TargetError(f"{display} is a {kind} and takes no parameters (got {', '.join(params)}); {_BIND_INSTEAD[kind]}")
    made = framework.bound_model(module, model, display, model_name, data)
    fields = numpyro_model.file_fields(module, made.values, data, display, path, made.bound)
    description = fields.get("description")
    if description is None:
        doc = (module.__doc__ or "").strip().splitlines()
        names = ", ".join(made.density.latent_shapes)
        description = doc[0] if doc else f"{made.kind} {model_name}, {made.latents} {names} (d = {made.density.dim})"
    recorded = {k: numpyro_model.describe_value(v) for k, v in made.recorded.items()}
    return build_from_file(
        made.density, made.density.dim, display, path, fields, description=description,
        params={"model": model_name, "data": recorded}, to_user=made.density.constrained,
    )


def from_module(
    module: ModuleType,
    params: Optional[Mapping[str, Any]] = None,
    display: Optional[str] = None,
    *,
    model: Optional[str] = None,
    data: Optional[Mapping[str, Any]] = None,
) -> Target:
    """Builds the `Target` an imported target file defines, calling `make_target(**params)` if any.

    A file with neither `log_density` nor `make_target` may define a NumPyro model (`model`, or the
    function named by `model`); `data` binds arrays to its keyword arguments by name. A `pymc.Model`
    object of that name is a PyMC model instead (`data` replaces its `pm.Data` values by name).
    """
    path = Path(module.__file__).resolve()
    display = display or str(path)
    if callable(getattr(module, "log_density", None)) and takes_datum(module.log_density):
        if model is not None:
            raise TargetError(f"{display} is a conditional target, not a NumPyro model; it takes no model name")
        with _folder_on_path(path.parent):
            return _conditional(module, params, display, path, data)
    plain = [k for k in ("make_target", "log_density") if hasattr(module, k)]
    if plain and (model is not None or data):
        given = "model name" if model is not None else "data"
        raise TargetError(
            f"{display} defines {plain[0]}, not a NumPyro model, so it takes no {given}; "
            "model names and data files apply to NumPyro and PyMC model files"
        )
    if not plain:
        pymc = pymc_model.find_model(module, model, display)
        model_fn = None if pymc is not None else numpyro_model.find_model(module, model, display)
        if pymc is not None or model_fn is not None:
            framework = pymc_model if pymc is not None else numpyro_model
            with _folder_on_path(path.parent):
                return model_target(module, framework, pymc or model_fn, display, model, data, params)
    with _folder_on_path(path.parent):
        if hasattr(module, "make_target"):
            fields, bound = _from_make_target(module, params or {}, display, path)
        elif hasattr(module, "log_density"):
            if params:
                raise TargetError(
                    f"{display} takes no parameters (it has no make_target), got {', '.join(params)}"
                )
            if not hasattr(module, "dim"):
                raise TargetError(
                    f"{display} defines log_density but not dim; add `dim = <number of coordinates>`"
                )
            fields = {k: getattr(module, k) for k in RESULT_KEYS if hasattr(module, k)}
            bound = {}
        else:
            raise TargetError(
                f"{display} defines neither log_density(x) (with dim) nor make_target(**params), nor a "
                "NumPyro model function or PyMC model `model`; see docs/targets.md"
            )
        if "log_density" not in fields or "dim" not in fields:
            raise TargetError(f"{display}: make_target must return at least log_density and dim")
        doc = (module.__doc__ or "").strip().splitlines()
        description = fields.get("description")
        if description is None and doc:
            description = doc[0]
        target = build_from_file(
            fields["log_density"], fields["dim"], display, path, fields, description=description, params=bound
        )
    return target
