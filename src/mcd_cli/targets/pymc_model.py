"""PyMC models as targets: the model's log density on its unconstrained (value-transformed) space.

A `.py` target file that defines neither `log_density` nor `make_target` but a `pymc.Model` object
(`model`, or the name given as `model=`) is a target. Its observed data are bound in the file;
a data file (`data=`, see `datafile.read_data`) replaces the values of the model's `pm.Data`
containers, by name. Every free random variable must be continuous.

The density is PyMC's own: `model.logp(jacobian=True)` over `model.value_vars`, the free variables
mapped to the real line by their default transforms (`log` for a positive scale, `logodds` for a
probability, ...) with the log-Jacobians of the transforms included, so that

    log Z = log ∫ p(data, free variables) d free variables = log p(data),

the model's log marginal likelihood (evidence). The PyTensor graph is rewritten and compiled to JAX
by PyTensor's JAX backend, as `pymc.sampling.jax.get_jaxified_graph` does (shared variables become
constants, parameter checks become `-inf`), and the value variables are flattened into one vector
`x ∈ R^d` in `model.value_vars` order, each in row-major order. The graph keeps PyMC's dtypes
(float64 by default); JAX computes it in its own precision, float32 unless `--x64`.

`pymc.sampling.jax` is not imported: importing it turns on `jax_enable_x64` for the whole process.
For the same reason the switch that importing PyTensor's JAX backend flips is put back.

PyMC is an optional extra (`pip install 'mcd-cli[pymc]'`); it is imported by the model file itself,
and this module only looks for it in `sys.modules`, so that no other file pays for importing it.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import sys
import warnings
from types import ModuleType
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.targets.base import TargetError
from mcd_cli.targets.fields import BoundModel
from mcd_cli.targets.validate import one_line

DEFAULT_MODEL = "model"
INSTALL_HINT = "pip install 'mcd-cli[pymc]'"
# PyMC's rewrite that turns a failed parameter check (`CheckParameterValue`) into a -inf log
# density, as PyMC's own compiled functions do; JAX cannot raise inside a traced function.
CHECKS_TO_NINF = "local_check_parameter_to_ninf_switch"
# The graph's float64/int64 dtypes, which JAX truncates (to float32/int32) without --x64.
_TRUNCATION = r"Explicitly requested dtype (float64|int64|uint64|complex128)"


def missing_pymc(display: str) -> TargetError:
    """The one-line error for a PyMC model file when PyMC is not installed."""
    return TargetError(f"{display} is a PyMC model, but PyMC is not installed; install the extra: {INSTALL_HINT}")


def _pymc_model_class() -> Optional[type]:
    """`pymc.Model` when the file being loaded imported PyMC, else None (PyMC is never imported here)."""
    pm = sys.modules.get("pymc")
    return getattr(pm, "Model", None) if pm is not None else None


def find_model(module: ModuleType, model: Optional[str], display: str) -> Optional[Any]:
    """The `pymc.Model` a file defines under the name `model` (default `model`), or None when the
    file defines no PyMC model at all, or a function of that name (a NumPyro model).

    Raises:
        TargetError: the file defines PyMC models, but none under that name.
    """
    cls = _pymc_model_class()
    if cls is None:
        return None
    models = sorted(k for k, v in vars(module).items() if isinstance(v, cls) and not k.startswith("_"))
    if not models:
        return None
    name = model or DEFAULT_MODEL
    value = getattr(module, name, None)
    if isinstance(value, cls):
        return value
    if callable(value):
        return None
    got = "defines no PyMC model" if value is None else f"has {type(value).__name__}, not a PyMC model, as"
    raise TargetError(f"{display} {got} {name!r}; its PyMC models: {', '.join(models)} (pick one with --model NAME)")


def _jax_backend(display: str) -> tuple[Any, Any]:
    """`(jax_funcify, JAX mode)` of PyTensor, imported with the process's `jax_enable_x64` left as it was."""
    was = jax.config.jax_enable_x64
    try:
        from pytensor.compile.mode import JAX
        from pytensor.link.jax.dispatch import jax_funcify
    except ImportError as err:
        raise TargetError(
            f"{display}: PyTensor's JAX backend cannot be imported ({one_line(err)}); "
            f"reinstall the extra: {INSTALL_HINT}"
        ) from None
    finally:
        jax.config.update("jax_enable_x64", was)  # the import sets it from pytensor's floatX
    return jax_funcify, JAX


def jaxify(inputs: list, outputs: list, what: str) -> Callable:
    """Compiles a PyTensor graph to a JAX function of `inputs`, returning the tuple of `outputs`:
    `pymc.sampling.jax.get_jaxified_graph`, with PyMC's parameter checks as -inf.

    Raises:
        TargetError: the graph draws random numbers, or holds an op with no JAX implementation.
    """
    jax_funcify, mode = _jax_backend(what)
    from pytensor.compile import SharedVariable
    from pytensor.compile.mode import Mode
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.replace import clone_replace
    try:
        from pytensor.graph.traversal import graph_inputs
    except ImportError:  # PyTensor before 2.31 kept it in graph.basic
        from pytensor.graph.basic import graph_inputs
    from pytensor.tensor import constant
    from pytensor.tensor.random.type import RandomType

    shared = [v for v in graph_inputs(outputs) if isinstance(v, SharedVariable)]
    if any(isinstance(v.type, RandomType) for v in shared):
        raise TargetError(f"{what}: the model's log density draws random numbers, so it is not a density")
    outputs = clone_replace(outputs, replace={v: constant(v.get_value(borrow=True)) for v in shared})
    fgraph = FunctionGraph(inputs=inputs, outputs=outputs, clone=True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TRUNCATION)
            # A rewrite reads PyTensor's BLAS flags, which warns where no BLAS library is linked;
            # the C backend that would use it is not involved.
            warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
            rewrites = mode.provided_optimizer.including(CHECKS_TO_NINF)
            Mode(linker=mode.linker, optimizer=rewrites).optimizer.rewrite(fgraph)
            return jax_funcify(fgraph)
    except NotImplementedError as err:
        raise TargetError(
            f"{what}: the model uses an op that PyTensor cannot compile to JAX ({one_line(err, 200)}); "
            "write it (a pm.Potential, a custom Op) with pytensor.tensor functions"
        ) from None


def _quiet(fn: Callable, *args: Any) -> tuple:
    """Calls (traces) a jaxified graph without JAX's warnings that it truncates the graph's dtypes."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TRUNCATION)
        return fn(*args)


@dataclasses.dataclass(frozen=True, eq=False)
class PyMCDensity:
    """The log density of a PyMC model's free variables on R^d; a function of one point `x` of shape `(d,)`.

    It is the `log_density` of the `Target` built from a model, so that the model stays reachable
    from the target (`prior_draws` uses it).

    Attributes:
        model: the `pymc.Model`, with its `pm.Data` set.
        model_name: the model's name in its file.
        latent_shapes: `{value variable: shape}` on the unconstrained space, in the order of `x`.
        logp: the compiled `model.logp(jacobian=True)`, a function of the value variables.
        user: the compiled free variables on their own spaces and the deterministics (`user_names`).
        user_names: the names of `user`'s outputs.
    """

    model: Any
    model_name: str
    latent_shapes: Mapping[str, tuple]
    logp: Callable
    user: Callable
    user_names: tuple

    def unravel(self, x) -> list:
        """`x` as the model's value variables, in order."""
        sizes = [int(np.prod(s)) for s in self.latent_shapes.values()]
        parts = jnp.split(x, np.cumsum(sizes)[:-1]) if len(sizes) > 1 else [x]
        return [p.reshape(s) for p, s in zip(parts, self.latent_shapes.values())]

    def __call__(self, x):
        return jnp.asarray(_quiet(self.logp, *self.unravel(x))[0], dtype=x.dtype)

    def constrained(self, x) -> dict:
        """The point `x` as the model's free variables on their own (constrained) spaces, by name,
        deterministics included: PyMC's backward transforms (`model.unobserved_value_vars`), as its
        samplers' draws are reported. The target's `to_user` (posterior draws)."""
        values = [jnp.asarray(v) for v in _quiet(self.user, *self.unravel(x))]
        return {
            name: v.astype(x.dtype) if jnp.issubdtype(v.dtype, jnp.floating) else v
            for name, v in zip(self.user_names, values)
        }

    @property
    def dim(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.latent_shapes.values()))

    def prior_draws(self, key: jax.Array, num: int) -> np.ndarray:
        """`num` draws of the prior on the unconstrained space, `(num, d)`: PyMC's initial point
        drawn from the prior (`make_initial_point_fn(default_strategy="prior")`), one seed each."""
        seeds = np.asarray(jax.random.randint(key, (int(num),), 0, np.iinfo(np.int32).max))
        draw = _prior_point(self)
        return np.stack([np.concatenate([np.ravel(draw(int(s))[k]) for k in self.latent_shapes]) for s in seeds])


@functools.lru_cache(maxsize=8)
def _prior_point(density: PyMCDensity) -> Callable[[int], dict]:
    from pymc.initial_point import make_initial_point_fn

    return make_initial_point_fn(model=density.model, default_strategy="prior", return_transformed=True)


def _check_variables(model: Any, what: str) -> None:
    """Refuses what the target cannot represent: discrete or no free variables, no data."""
    discrete = [rv for rv in model.free_RVs if not rv.type.dtype.startswith("float")]
    if discrete:
        rv = discrete[0]
        raise TargetError(
            f"{what}: free variable {rv.name!r} ({type(rv.owner.op).__name__}) is discrete; mcd needs "
            "continuous free variables, so sum it out in the model (e.g. with pm.Mixture) or observe it"
        )
    if not model.free_RVs:
        raise TargetError(
            f"{what}: the model has no free variable (every variable is observed), so there is nothing to integrate"
        )
    if not model.observed_RVs and not model.potentials:
        raise TargetError(
            f"{what}: no variable is observed (none has observed=...), so log p(data) = 0; "
            "pass the data as observed values"
        )


def bind_data(model: Any, data: Optional[Mapping[str, Any]], what: str) -> dict[str, np.ndarray]:
    """Sets the model's `pm.Data` containers from `data`, by name; returns every container's value.

    Raises:
        TargetError: `data` names something that is not a `pm.Data` of the model, the model has none,
            or PyMC refuses a value (its shape or dimensions).
    """
    import pymc as pm

    containers = {v.name: v for v in model.data_vars}
    for name, value in (data or {}).items():
        if not containers:
            raise TargetError(
                f"{what} has no pm.Data container, so a data file has nothing to replace; "
                "wrap the observed values in pm.Data(name, values)"
            )
        if name not in containers:
            raise TargetError(
                f"{what}: data name {name!r} is not a pm.Data container of the model "
                f"(it has: {', '.join(containers)}); rename the array in the data file"
            )
        try:
            pm.set_data({name: value}, model=model)
        except Exception as err:  # PyMC's checks of shapes and dims
            raise TargetError(
                f"{what}: the data file's {name!r} cannot replace the model's pm.Data {name!r}: {one_line(err)}"
            ) from None
    return {name: np.asarray(v.get_value()) for name, v in containers.items()}


def model_density(model: Any, what: str, *, model_name: str = DEFAULT_MODEL) -> PyMCDensity:
    """Builds the log density on R^d of a PyMC model, its data as they are set now.

    Raises:
        TargetError: a discrete free variable, no free or observed variable, an op with no JAX
            implementation, or PyMC fails to build the log density.
    """
    _check_variables(model, what)
    from pymc.util import get_default_varnames

    try:
        logp = model.logp(jacobian=True)
        shapes = model.eval_rv_shapes()
        user_vars = list(get_default_varnames(model.unobserved_value_vars, include_transformed=False))
    except Exception as err:  # PyMC may refuse the model in many ways
        raise TargetError(f"{what}: PyMC cannot build the model's log density: {one_line(err)}") from None
    inputs = list(model.value_vars)
    return PyMCDensity(
        model=model,
        model_name=model_name,
        latent_shapes={v.name: tuple(int(n) for n in shapes[v.name]) for v in inputs},
        logp=jaxify(inputs, [logp], what),
        user=jaxify(inputs, user_vars, what),
        user_names=tuple(v.name for v in user_vars),
    )


def _observed_data(model: Any, containers: Mapping[str, Any]) -> dict[str, Any]:
    """The observed values that are constants of the graph (not pm.Data), by observed variable."""
    from pytensor.graph.basic import Constant

    found = {}
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        while value.owner is not None and len(value.owner.inputs) == 1:  # a cast of the data
            value = value.owner.inputs[0]
        if isinstance(value, Constant) and rv.name not in containers:
            found[rv.name] = np.asarray(value.data)
    return found


def bound_model(module: ModuleType, model: Any, display: str, model_name: str, data: Optional[Mapping[str, Any]]) -> BoundModel:
    """A PyMC model file's density, its `pymc.Model` (see `find_model`) with `data` replacing the
    values of its `pm.Data` containers by name (`bind_data`); the file's `log_z` function, if any,
    takes the containers' values and the module-level values by name (`pyfile.model_target`)."""
    containers = bind_data(model, data, display)
    density = model_density(model, display, model_name=model_name)
    values = {
        k: v for k, v in vars(module).items()
        if not k.startswith("_") and isinstance(v, (numbers.Number, np.ndarray, np.generic, list, tuple))
    }
    bound = "a pm.Data container of the model or a module-level value"
    recorded = {**_observed_data(model, containers), **containers}
    return BoundModel(density, {**values, **containers}, recorded, bound, "PyMC model", "free variables")
