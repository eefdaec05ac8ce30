"""Conditional targets: a log density `log γ(z | x)` over latents z for each datum x of a data set.

A latent-variable model `p(x, z)` has one evidence per datum, `log p(x) = log ∫ p(x, z) dz`: the
conditional target's `log_density(z, x)` is `log p(x, z)`, and `log Z(x)` is `log p(x)`. Each
datum gives an ordinary `Target` (`datum_target`), built inside `jax.jit` with `x` traced, so one
compilation serves every datum. Optional parts, all functions of the datum:

* `initial(x) -> (mean, scale)`: the amortised initial distribution `N(mean, diag scale²)` (a VAE's
  encoder); without it, every datum starts from the same `initial_mean`, `initial_scale`;
* `log_z(x)`: the known `log p(x)` (for tests and checks);
* `features(x)`: the vector an amortised score network is conditioned on (default: `x` flattened).

Example:
    >>> import jax.numpy as jnp, numpy as np
    >>> from jax.scipy.stats import norm
    >>> t = ConditionalTarget.create(
    ...     lambda z, x: jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, z, 1.0)), dim=2,
    ...     data=np.zeros((5, 2)))
    >>> t.num_data, t.context_dim, datum_target(t, t.data[0]).dim
    (5, 2, 2)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.targets.base import Target, TargetError


@dataclasses.dataclass(frozen=True, eq=False)
class ConditionalTarget:
    """A log density over latents `z ∈ R^dim` for each datum of `data` (see the module docstring).

    Attributes:
        log_density: `(z, x) -> log p(x, z)`, pure `jax.numpy`, `z` of shape `(dim,)`, `x` one datum.
        dim: the latent dimension.
        data: the data set, an array whose first axis indexes the data.
        initial: `x -> (mean, scale)`, or None (then `initial_mean`, `initial_scale` for every datum).
        initial_mean, initial_scale: the shared initial distribution, shape `(dim,)`.
        log_z: `x -> log p(x)` when known, else None.
        features: `x -> (context_dim,)`, what an amortised score network sees (None: `x` flattened).
        amortise: the file's declaration: train one sampler over all the data by default.
        name, description, params, source: as for `Target`.
        indices: each datum's index in the full data set (after `--data-index`).
    """

    log_density: Callable
    dim: int
    data: np.ndarray
    initial: Optional[Callable] = None
    initial_mean: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(1))
    initial_scale: np.ndarray = dataclasses.field(default_factory=lambda: np.ones(1))
    log_z: Optional[Callable] = None
    features: Optional[Callable] = None
    amortise: bool = False
    name: str = "target"
    description: str = ""
    params: dict = dataclasses.field(default_factory=dict)
    source: str = ""
    indices: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def create(
        cls,
        log_density: Callable,
        dim: int,
        data: Any,
        initial: Optional[Callable] = None,
        initial_mean: Any = 0.0,
        initial_scale: Any = 1.0,
        log_z: Optional[Callable] = None,
        features: Optional[Callable] = None,
        amortise: bool = False,
        name: str = "target",
        description: str = "",
        params: Optional[dict] = None,
        source: str = "",
    ) -> "ConditionalTarget":
        """Builds a conditional target, checking the data and broadcasting the initial mean/scale."""
        shared = Target.create(lambda z: jnp.zeros(()), dim, initial_mean, initial_scale)
        try:
            array = np.asarray(data, dtype=np.float32 if not jax.config.read("jax_enable_x64") else np.float64)
        except (TypeError, ValueError) as err:
            raise TargetError(f"data must be an array of numbers, one datum per row ({err})") from None
        if array.ndim == 0 or array.shape[0] == 0:
            raise TargetError(f"data must hold at least one datum (one per row), got shape {array.shape}")
        if array.ndim == 1:
            array = array[:, None]
        if not np.all(np.isfinite(array)):
            raise TargetError("data must be finite (it holds NaN or infinite values)")
        for label, fn in (("initial", initial), ("log_z", log_z), ("features", features)):
            if fn is not None and not callable(fn):
                raise TargetError(
                    f"{label} must be a function of the datum x when log_density takes (z, x), got "
                    f"{type(fn).__name__}"
                )
        return cls(
            log_density=log_density,
            dim=shared.dim,
            data=array,
            initial=initial,
            initial_mean=shared.initial_mean,
            initial_scale=shared.initial_scale,
            log_z=log_z,
            features=features,
            amortise=bool(amortise),
            name=str(name),
            description=str(description),
            params=dict(params or {}),
            source=str(source),
            indices=np.arange(array.shape[0]),
        )

    def _model(self) -> tuple:
        return (
            self.log_density, self.initial, self.features, self.dim,
            self.initial_mean.tobytes(), self.initial_scale.tobytes(),
        )

    def __eq__(self, other: object) -> bool:
        """Equal when the model is the same, whatever the data: compiled functions take the data as
        an argument, so a selection of the data (`select`) reuses the compilations of the whole."""
        return isinstance(other, ConditionalTarget) and self._model() == other._model()

    def __hash__(self) -> int:
        return hash(self._model())

    @property
    def num_data(self) -> int:
        return int(self.data.shape[0])

    @property
    def context_dim(self) -> int:
        """Size of `context(x)`, from one trace of `features` (no computation)."""
        shape = jax.eval_shape(lambda x: context(self, x), jax.ShapeDtypeStruct(self.data.shape[1:], self.data.dtype))
        return int(np.prod(shape.shape))

    def select(self, start: int, stop: int) -> "ConditionalTarget":
        """The same target on the data `start … stop − 1` (indices kept for the records)."""
        return dataclasses.replace(self, data=self.data[start:stop], indices=self.indices[start:stop])

    def known_log_z(self, x: Any) -> Optional[float]:
        """`log p(x)` from the file's `log_z(x)`, or None."""
        return None if self.log_z is None else float(self.log_z(jnp.asarray(x)))


def context(target: ConditionalTarget, x: jax.Array) -> jax.Array:
    """The datum's features an amortised score network is conditioned on, a flat vector."""
    value = target.features(x) if target.features is not None else x
    return jnp.ravel(jnp.asarray(value))


def datum_target(target: ConditionalTarget, x: jax.Array) -> Target:
    """The ordinary `Target` of one datum: `z -> log_density(z, x)`, started from `initial(x)`.

    `x` may be traced (inside `jit`/`vmap`): the `Target` is built without the host-side checks of
    `Target.create`, which a traced initial distribution could not pass.
    """
    if target.initial is not None:
        mean, scale = target.initial(x)
        mean = jnp.broadcast_to(jnp.asarray(mean), (target.dim,))
        scale = jnp.broadcast_to(jnp.asarray(scale), (target.dim,))
    else:
        mean, scale = target.initial_mean, target.initial_scale
    return Target(
        log_density=lambda z: target.log_density(z, x),
        dim=target.dim,
        initial_mean=mean,
        initial_scale=scale,
        name=target.name,
        source=target.source,
    )


def first_datum(target: ConditionalTarget) -> Target:
    """The first datum's `Target`, with host values (what `mcd check` examines of a conditional target)."""
    one = datum_target(target, jnp.asarray(target.data[0]))
    log_z = target.known_log_z(target.data[0])
    return Target.create(
        one.log_density, target.dim, np.asarray(one.initial_mean), np.asarray(one.initial_scale),
        log_z, f"{target.name}[datum {int(target.indices[0])}]", target.description, target.params,
        target.source,
    )
