"""The `Target`: an unnormalised log density on R^d and the Gaussian the sampler starts from."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax.numpy as jnp
import numpy as np

from mcd_cli.errors import UsageError

Array = Any
LogDensity = Callable[[Array], Array]


class TargetError(UsageError):
    """A target that cannot be used as given. The message is one line: what is wrong and how to fix it."""


@dataclasses.dataclass(frozen=True, eq=False)
class Target:
    """An unnormalised log density `log γ(x)` of one point `x ∈ R^d`, and what surrounds it.

    Attributes:
        log_density: pure function of one point `x` of shape `(dim,)` returning a scalar, written
            with `jax.numpy`. May return `-inf` (zero density); never NaN or `+inf`.
        dim: the dimension `d`.
        initial_mean: mean of the initial distribution `π0 = N(μ0, diag(σ0²))`, shape `(dim,)`.
        initial_scale: standard deviations `σ0` of `π0`, shape `(dim,)`.
        log_z: the true log normalising constant when known, else None.
        name: short name used in tables and JSON.
        description: one line saying what the target is.
        params: the parameters the target was built with (for records).
        source: where it came from (a path, or "builtin").
        to_user: maps one point of this target's space to the user's named values, `{name:
            array}` (None: the point itself, named `x`; see `user_values`). Transforms compose it
            (`targets.transforms`), a NumPyro model maps to its constrained sites.
        constants: the arrays (a pytree) of a run's own that the density closes over: a fitted
            start's mean, Cholesky factor and tails (`targets.transforms`); None: none.
        rebuild: `constants -> Target`, this target built from other values of its `constants` (traced
            ones, under `jax.jit`); None: nothing to rebuild. A compiled program takes the constants
            as arguments and runs on `rebuilt(constants)`, so it is the same program whatever the
            seed, and the persistent compilation cache holds it (`run.smc_kernels.compiled`).

    Example:
        >>> import jax.numpy as jnp
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=3, log_z=1.5 * jnp.log(2 * jnp.pi))
        >>> t.initial_scale.shape
        (3,)
    """

    log_density: LogDensity
    dim: int
    initial_mean: np.ndarray
    initial_scale: np.ndarray
    log_z: Optional[float] = None
    name: str = "target"
    description: str = ""
    params: dict = dataclasses.field(default_factory=dict)
    source: str = ""
    initial_declared: bool = True
    to_user: Optional[Callable[[Array], dict]] = None
    constants: Any = None
    rebuild: Optional[Callable[[Any], "Target"]] = None

    @classmethod
    def create(
        cls,
        log_density: LogDensity,
        dim: int,
        initial_mean: Any = None,
        initial_scale: Any = None,
        log_z: Optional[float] = None,
        name: str = "target",
        description: str = "",
        params: Optional[dict] = None,
        source: str = "",
        initial_declared: Optional[bool] = None,
        to_user: Optional[Callable[[Array], dict]] = None,
    ) -> "Target":
        """Builds a target, broadcasting scalar initial mean/scale to `(dim,)` and checking them.

        Without an initial mean and scale, π0 is the fallback N(0, I), and `initial_declared` is
        False (unless given): `--init auto` then fits one instead of trusting the fallback.
        """
        if initial_declared is None:
            initial_declared = initial_mean is not None or initial_scale is not None
        initial_mean = 0.0 if initial_mean is None else initial_mean
        initial_scale = 1.0 if initial_scale is None else initial_scale
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise TargetError(f"dim must be a positive integer, got {dim!r}")
        dim = int(dim)
        try:
            mean = np.broadcast_to(np.asarray(initial_mean, dtype=np.float64), (dim,)).copy()
            scale = np.broadcast_to(np.asarray(initial_scale, dtype=np.float64), (dim,)).copy()
        except (ValueError, TypeError) as err:
            raise TargetError(
                f"initial mean/scale must be a number or a list of {dim} numbers ({err})"
            ) from None
        if not np.all(np.isfinite(mean)):
            raise TargetError("initial mean must be finite")
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise TargetError("initial scale must be finite and positive")
        if log_z is not None:
            try:
                log_z = float(log_z)
            except (TypeError, ValueError):
                raise TargetError(f"log_z must be a number, got {log_z!r}") from None
        return cls(
            log_density=log_density,
            dim=dim,
            initial_mean=mean,
            initial_scale=scale,
            log_z=log_z,
            name=str(name),
            description=str(description),
            params=dict(params or {}),
            source=str(source),
            initial_declared=bool(initial_declared),
            to_user=to_user,
        )

    def with_initial(self, mean: Any = None, scale: Any = None) -> "Target":
        """Returns a copy with a different initial distribution (its `rebuild` keeps it)."""
        moved = Target.create(
            self.log_density,
            self.dim,
            self.initial_mean if mean is None else mean,
            self.initial_scale if scale is None else scale,
            self.log_z,
            self.name,
            self.description,
            self.params,
            self.source,
            initial_declared=True,
            to_user=self.to_user,
        )
        if self.rebuild is None:
            return moved
        mean, scale, rebuild = moved.initial_mean, moved.initial_scale, self.rebuild
        return lifted(lambda constants: rebuild(constants).with_initial(mean, scale), self.constants)

    def rebuilt(self, constants: Any) -> "Target":
        """This target with its `constants` replaced by `constants` (traced values under `jax.jit`):
        `rebuild(constants)`, or the target itself when it has nothing to rebuild.

        Example:
            >>> import jax
            >>> from mcd_cli.targets.transforms import whiten
            >>> t = whiten(Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2), np.ones(2), np.ones(2))
            >>> f = jax.jit(lambda c, u: t.rebuilt(c).log_density(u))
            >>> bool(f(t.constants, jnp.zeros(2)) == t.log_density(jnp.zeros(2)))
            True
        """
        return self if self.rebuild is None else self.rebuild(constants)

    def user_values(self, x: Array) -> dict:
        """The point `x` of this target's space as the user's named values: `to_user(x)`, or
        `{"x": x}` for a target that is its own user space. A pure function of one point, to be
        vmapped over draws (`run.draws`).

        Example:
            >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
            >>> {k: v.tolist() for k, v in t.user_values(jnp.ones(2)).items()}
            {'x': [1.0, 1.0]}
        """
        return {"x": x} if self.to_user is None else self.to_user(x)

    def initial_log_density(self, x: Array) -> Array:
        """`log π0(x)` for one point."""
        from jax.scipy.stats import norm

        return jnp.sum(norm.logpdf(x, self.initial_mean, self.initial_scale))


def lifted(build: Callable[[Any], Target], constants: Any) -> Target:
    """`build(constants)`, a target whose density closes over `constants`, able to be rebuilt from
    other values of them (`Target.rebuilt`)."""
    return dataclasses.replace(build(constants), constants=constants, rebuild=build)
