"""NumPyro models as targets: the log joint density of the latent sites on the unconstrained space.

A `.py` target file that defines neither `log_density` nor `make_target` but a NumPyro model
function (`model`, or the name given as `model=`) is a target. Its data are the values bound to the
model's keyword arguments, by name: module-level values of the file, overridden by the arrays of a
data file (`data=`, see `datafile.read_data`). Sites with `obs=` are the data; every other sample
site is a latent, and must be continuous.

The latents are mapped to the unconstrained space by NumPyro's own transforms (`biject_to` of each
site's support, as NUTS uses them, through `numpyro.infer.util.unconstrain_fn` and
`potential_energy`) and flattened into one vector `x ∈ R^d` with
`jax.flatten_util.ravel_pytree`. The log density is `−potential_energy`, which includes the
log-Jacobians of the transforms, so that

    log Z = log ∫ p(data, latents) d latents = log p(data),

the model's log marginal likelihood (evidence). The prior, drawn and transformed to the same space,
is available as an initial distribution through `prior_initial`; it is not the target's declared
initial distribution (that stays the file's `initial`, or N(0, I)).

NumPyro is an optional extra (`pip install 'mcd-cli[numpyro]'`), imported only when a model file is
loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import numbers
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.fields import BoundModel
from mcd_cli.targets.validate import one_line, user_error, where

DEFAULT_MODEL = "model"
INSTALL_HINT = "pip install 'mcd-cli[numpyro]'"
FILE_KEYS = ("log_z", "initial", "name", "description")


def missing_numpyro(display: str) -> TargetError:
    """The one-line error for a NumPyro model file when NumPyro is not installed."""
    return TargetError(f"{display} is a NumPyro model, but NumPyro is not installed; install the extra: {INSTALL_HINT}")


def import_numpyro(display: str) -> ModuleType:
    """Imports NumPyro, or raises the one-line error naming the extra to install."""
    try:
        import numpyro
        import numpyro.infer.util  # noqa: F401  (the submodule holding the machinery used here)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] == "numpyro":
            raise missing_numpyro(display) from None
        raise TargetError(
            f"{display}: NumPyro cannot be imported ({one_line(err)}); reinstall the extra: {INSTALL_HINT}"
        ) from None
    except ImportError as err:
        raise TargetError(
            f"{display}: NumPyro cannot be imported ({one_line(err)}); reinstall the extra: {INSTALL_HINT}"
        ) from None
    return numpyro


@dataclasses.dataclass(frozen=True, eq=False)
class ModelDensity:
    """The log density of a NumPyro model's latents on R^d; a function of one point `x` of shape `(d,)`.

    It is the `log_density` of the `Target` built from a model, so that the model and its data stay
    reachable from the target (`prior_initial` uses them).

    Attributes:
        model: the NumPyro model function.
        model_kwargs: the values bound to its keyword arguments (the data).
        model_name: the function's name in its file.
        latent_shapes: `{site: shape}` of each latent on the unconstrained space, in the order of `x`.
        unravel: maps `x` to the `{site: value}` dict of unconstrained latents.
        potential: NumPyro's potential energy of that dict (minus the log joint, Jacobians included).
    """

    model: Callable
    model_kwargs: Mapping[str, Any]
    model_name: str
    latent_shapes: Mapping[str, tuple]
    unravel: Callable
    potential: Callable

    def __call__(self, x):
        return -self.potential(self.unravel(x))

    def constrained(self, x) -> dict:
        """The point `x` as the model's sites on their own (constrained) spaces, `{site: value}`,
        deterministic sites included: NumPyro's `constrain_fn`, as NUTS's postprocessing maps its
        samples. The target's `to_user` (posterior draws)."""
        from numpyro.infer.util import constrain_fn

        return constrain_fn(self.model, (), dict(self.model_kwargs), self.unravel(x), return_deterministic=True)

    @property
    def dim(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.latent_shapes.values()))


def _is_value(v: Any) -> bool:
    """A module-level value that may be a model's data (not a function, class or module)."""
    return not (callable(v) or isinstance(v, ModuleType))


def find_model(module: ModuleType, model: Optional[str], display: str) -> Optional[Callable]:
    """The model function a file defines, or None when it defines none (and `model` was not named).

    Raises:
        TargetError: `model` was named but the file has no such function, or it is not callable.
    """
    name = model or DEFAULT_MODEL
    if not hasattr(module, name):
        if model is None:
            return None
        functions = sorted(
            k
            for k, v in vars(module).items()
            if inspect.isfunction(v) and v.__module__ == module.__name__ and not k.startswith("_")
        )
        found = f"; its functions: {', '.join(functions)}" if functions else ""
        raise TargetError(f"{display} defines no model function {name!r}{found}")
    fn = getattr(module, name)
    if not callable(fn):
        raise TargetError(f"{display}: {name} must be a NumPyro model function, got {type(fn).__name__}")
    return fn


def _keyword_arguments(fn: Callable, what: str) -> tuple[dict[str, inspect.Parameter], bool]:
    """The model's arguments that can be bound by name, and whether it takes **kwargs."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as err:
        raise TargetError(f"{what}: cannot read the model's arguments ({err})") from None
    named, var_keyword = {}, False
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_keyword = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            named[p.name] = p
        elif p.kind is p.POSITIONAL_ONLY and p.default is p.empty:
            raise TargetError(f"{what}: argument {p.name!r} is positional-only; make it a keyword argument")
    return named, var_keyword


def bind_data(
    fn: Callable,
    module_values: Mapping[str, Any],
    data: Optional[Mapping[str, Any]],
    what: str,
) -> dict[str, Any]:
    """The values of a model's keyword arguments: `data` first, then module-level values, by name.

    Arguments found in neither keep their defaults (and are not in the result).

    Raises:
        TargetError: a `data` name that is not a keyword argument of the model, or an argument with
            no default that gets no value.

    Example:
        >>> def model(x, y=None, scale=1.0): ...
        >>> sorted(bind_data(model, {"x": [1.0, 2.0]}, {"y": [0, 1]}, "model in m.py"))
        ['x', 'y']
    """
    named, var_keyword = _keyword_arguments(fn, what)
    data = dict(data or {})
    unknown = [k for k in data if k not in named]
    if unknown and not var_keyword:
        takes = ", ".join(named) or "no keyword arguments"
        raise TargetError(
            f"{what}: data name {unknown[0]!r} is not a keyword argument of the model "
            f"(it takes: {takes}); rename the array in the data file"
        )
    bound = {}
    for name, p in named.items():
        if name in data:
            bound[name] = data.pop(name)
        elif name in module_values and _is_value(module_values[name]):
            bound[name] = module_values[name]
        elif p.default is p.empty:
            raise TargetError(
                f"{what}: argument {name!r} has no value; define {name} in the file, give it a "
                "default, or put an array named so in the data file"
            )
    bound.update(data)
    return bound


def describe_value(value: Any) -> Any:
    """A short, JSON-ready record of one bound value: scalars as they are, arrays by dtype, shape and hash.

    Example:
        >>> describe_value(np.zeros((2, 3)))
        'float64[2, 3] sha256:17b0761f87b0'
    """
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Number) and not isinstance(value, np.ndarray):
        return value.item() if hasattr(value, "item") else value
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return type(value).__name__
    if array.dtype == object:
        return type(value).__name__
    if array.shape == ():
        return array.item()
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:12]
    return f"{array.dtype.name}[{', '.join(map(str, array.shape))}] sha256:{digest}"


def _check_sites(model_trace: Mapping[str, dict], what: str) -> tuple[list[str], int]:
    """Refuses what the target cannot represent; returns the latent site names and the observed count."""
    latents, observed = [], 0
    for name, site in model_trace.items():
        if site["type"] == "param":
            raise TargetError(
                f"{what}: numpyro.param site {name!r} is a parameter to optimise, not a random variable; "
                "give it a prior with numpyro.sample or make it a constant"
            )
        if site["type"] == "plate":
            size, subsample = site["args"][:2]
            if subsample is not None and subsample != size:
                raise TargetError(
                    f"{what}: plate {name!r} subsamples {subsample} of {size}, which makes the density "
                    "random; remove subsample_size"
                )
        if site["type"] != "sample":
            continue
        if site["is_observed"]:
            observed += 1
            continue
        fn = site["fn"]
        if site.get("infer", {}).get("enumerate") or getattr(fn.support, "is_discrete", False):
            raise TargetError(
                f"{what}: latent site {name!r} ({type(fn).__name__}) is discrete; mcd needs continuous "
                "latents, so sum it out in the model (e.g. with dist.MixtureSameFamily) or observe it"
            )
        latents.append(name)
    return latents, observed


def model_density(
    fn: Callable,
    model_kwargs: Mapping[str, Any],
    what: str,
    *,
    model_name: str = DEFAULT_MODEL,
    files: Sequence[str] = (),
) -> ModelDensity:
    """Builds the log density on R^d of a NumPyro model with its data bound.

    Args:
        fn: the model function.
        model_kwargs: the values of its keyword arguments (the data).
        what: how to name the model in messages.
        model_name: the function's name, for records.
        files: the user's source files, to point messages at the failing line.

    Raises:
        TargetError: NumPyro is missing; the model fails when run; it has a discrete latent site,
            a `numpyro.param` site, a subsampled plate, no latent site, or no observed site.

    Example:
        >>> import numpyro, numpyro.distributions as dist
        >>> def model(y):
        ...     mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        ...     numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
        >>> density = model_density(model, {"y": np.array([0.5])}, "model")
        >>> density.dim, round(float(density(jnp.zeros(1))), 4)  # log N(0; 0, 1) + log N(0.5; 0, 1)
        (1, -1.9629)
    """
    import_numpyro(what)
    from numpyro.handlers import seed, trace
    from numpyro.infer.util import potential_energy, unconstrain_fn

    kwargs = dict(model_kwargs)
    files = tuple(files)
    found: dict[str, Any] = {}

    def unconstrained_latents(key):
        model_trace = trace(seed(fn, key)).get_trace(**kwargs)
        if not any(site["type"] == "sample" for site in model_trace.values()):
            raise TargetError(f"{what}: the model has no numpyro.sample site; is it a NumPyro model?")
        found["latents"], found["observed"] = _check_sites(model_trace, what)
        latents = {name: model_trace[name]["value"] for name in found["latents"]}
        return unconstrain_fn(fn, (), kwargs, latents)

    # Run abstractly: the sites' names, shapes and supports are all that is needed, and nothing
    # gets compiled or evaluated.
    try:
        shapes = jax.eval_shape(unconstrained_latents, jax.random.key(0))
    except TargetError:
        raise
    except Exception as err:  # the user's model may raise anything
        named = user_error(err, (what, files[0]) if files else None)
        raise TargetError(named or f"{where(what, err, files)}: the model raised {one_line(err)}") from None
    if not found["latents"]:
        raise TargetError(
            f"{what}: the model has no latent sample site (every site is observed), so there is "
            "nothing to integrate"
        )
    if found["observed"] == 0:
        raise TargetError(
            f"{what}: no sample site is observed (none has obs=...), so log p(data) = 0; bind the data "
            "to the model's arguments (module-level values or a data file)"
        )
    z = {name: jnp.zeros(s.shape, s.dtype) for name, s in shapes.items()}
    _, unravel = ravel_pytree(z)
    return ModelDensity(
        model=fn,
        model_kwargs=kwargs,
        model_name=model_name,
        latent_shapes={k: tuple(v.shape) for k, v in sorted(z.items())},
        unravel=unravel,
        potential=functools.partial(potential_energy, fn, (), kwargs),
    )


def call_log_z(log_z: Callable, values: Mapping[str, Any], display: str, path: Path, bound: str) -> Any:
    """Calls the file's `log_z(...)` with the `values` of the names it takes (`bound`: what they are)."""
    named, var_keyword = _keyword_arguments(log_z, f"{display}: log_z")
    missing = [k for k, p in named.items() if k not in values and p.default is p.empty]
    if missing:
        raise TargetError(
            f"{display}: log_z takes {missing[0]!r}, which is not {bound} "
            f"(bound: {', '.join(values) or 'none'})"
        )
    given = values if var_keyword else {k: v for k, v in values.items() if k in named}
    try:
        return log_z(**given)
    except Exception as err:  # the user's function may raise anything
        named = user_error(err, (display, path))
        raise TargetError(named or f"{where(display, err, [str(path)])}: log_z raised {one_line(err)}") from None


def file_fields(module: ModuleType, values: Mapping, data: Optional[Mapping], display: str, path: Path, bound: str):
    """A model file's `FILE_KEYS`, with a `log_z` function called on `values` by name (so it follows
    a data file), and a `log_z` number dropped when a data file is given (it holds for the file's data)."""
    fields = {k: getattr(module, k) for k in FILE_KEYS if hasattr(module, k)}
    if callable(fields.get("log_z")):
        fields["log_z"] = call_log_z(fields["log_z"], values, display, path, bound)
    elif data:
        fields.pop("log_z", None)
    return fields


def bound_model(module: ModuleType, fn: Callable, display: str, model_name: str, data: Optional[Mapping[str, Any]]) -> BoundModel:
    """A NumPyro model file's density, its model function `fn` (see `find_model`) called with the
    module's values and `data` bound to its keyword arguments by name (`bind_data`); the file's
    `log_z` function, if any, takes the same bound values (`pyfile.model_target`)."""
    path = Path(module.__file__).resolve()
    kwargs = bind_data(fn, vars(module), data, display)
    density = model_density(fn, kwargs, display, model_name=model_name, files=[str(path)])
    return BoundModel(density, kwargs, kwargs, "a bound argument of the model", "NumPyro model", "latents")


def is_model_target(target: Union[Target, ModelDensity]) -> bool:
    """Whether `target` was built from a NumPyro or a PyMC model (so that `prior_initial` applies): a
    `ModelDensity`, or a density that draws its own prior (`pymc_model.PyMCDensity.prior_draws`; named
    by what it does, so that this module does not import the PyMC one, which imports this)."""
    density = target.log_density if isinstance(target, Target) else target
    return isinstance(density, ModelDensity) or callable(getattr(density, "prior_draws", None))


def prior_draws(target: Union[Target, ModelDensity], key: jax.Array, num: int = 4096) -> jax.Array:
    """`num` draws of the model's prior over the latents, on the unconstrained space, shape `(num, d)`.

    Observed sites keep their data; each latent is drawn from its prior (given the latents it
    depends on) and mapped to R^d by the same transforms as the target's density.
    """
    density = target.log_density if isinstance(target, Target) else target
    if not is_model_target(density):
        name = target.name if isinstance(target, Target) else type(target).__name__
        raise TargetError(f"target {name!r} is not a NumPyro model, nor a PyMC model, so it has no prior to start from")
    if isinstance(num, bool) or not isinstance(num, numbers.Integral) or num < 2:
        raise TargetError(f"the number of prior draws must be an integer of at least 2, got {num!r}")
    if not isinstance(density, ModelDensity):
        return jnp.asarray(density.prior_draws(key, int(num)))  # a PyMC model: PyMC draws its prior
    return _prior_sampler(density)(jax.random.split(key, int(num)))


@functools.lru_cache(maxsize=8)
def _prior_sampler(density: ModelDensity) -> Callable[[jax.Array], jax.Array]:
    """The compiled `keys (n,) -> unconstrained prior draws (n, d)` of a model.

    Cached per model density, so repeated calls for one target compile once per number of draws.
    """
    import_numpyro(density.model_name)
    from numpyro.handlers import seed, trace
    from numpyro.infer.util import unconstrain_fn

    kwargs = dict(density.model_kwargs)

    def one(k):
        model_trace = trace(seed(density.model, k)).get_trace(**kwargs)
        latents = {name: model_trace[name]["value"] for name in density.latent_shapes}
        unconstrained = unconstrain_fn(density.model, (), kwargs, latents)
        return ravel_pytree({name: unconstrained[name] for name in density.latent_shapes})[0]

    return jax.jit(jax.vmap(one))


def prior_initial(
    target: Union[Target, ModelDensity], key: jax.Array, num: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """A diagonal Gaussian fitted to the model's prior on the unconstrained space: `(mean, scale)`.

    The fit matches each coordinate's median and interquartile range (for a Gaussian these are its
    mean and standard deviation; unlike them they stay stable when a prior has heavy tails, such
    as a Cauchy). Use it as the initial distribution with `target.with_initial(mean, scale)`.

    Args:
        target: a `Target` built from a NumPyro model (or its `ModelDensity`).
        key: the PRNG key of the prior draws.
        num: the number of prior draws.

    Returns:
        `(mean, scale)`, float64 arrays of shape `(d,)`.

    Raises:
        TargetError: the target is not a NumPyro model, or its prior draws are mostly not finite.

    Example:
        >>> import numpyro, numpyro.distributions as dist
        >>> def model(y):
        ...     s = numpyro.sample("s", dist.LogNormal(1.0, 0.5))
        ...     numpyro.sample("y", dist.Normal(0.0, s), obs=y)
        >>> mean, scale = prior_initial(model_density(model, {"y": np.ones(3)}, "m"), jax.random.key(0))
        >>> bool(abs(mean[0] - 1.0) < 0.05 and abs(scale[0] - 0.5) < 0.05)  # log s ~ N(1, 0.5²)
        True
    """
    draws = np.asarray(prior_draws(target, key, num), dtype=np.float64)
    finite = np.all(np.isfinite(draws), axis=1)
    if finite.sum() < max(2, draws.shape[0] // 2):
        raise TargetError(
            f"only {int(finite.sum())} of {draws.shape[0]} prior draws are finite on the unconstrained space; "
            "the prior cannot serve as the initial distribution"
        )
    draws = draws[finite]
    q25, median, q75 = np.percentile(draws, [25.0, 50.0, 75.0], axis=0)
    scale = (q75 - q25) / (2 * 0.6744897501960817)  # the interquartile range of N(0, 1) is 2 × 0.6745
    return median, np.where(scale > 0, scale, 1.0)

