"""Target -> Target transforms: whitening by an affine map, and a fitted initial distribution.

- `whiten(target, mean, chol)`: the target in `u` with `x = μ + L u`; its log density is
  `log γ(μ + L u) + log|det L|`, so log Z is unchanged, and its initial distribution is N(0, I);
  `unwhiten` maps samples back.
- `heavy_tailed(target, h)`: the target in `u` with `x = μ0 + σ0 ⊙ u exp(h u²/2)`.
- `transported(target, transform)`: the target in `z` with `x = T(z)`, for any bijection `T` given
  with its log-Jacobian (a fitted flow, `mcd_cli.init.flow`).

Each transform composes the map back to the user's values (`Target.to_user`): the new target's
`user_values(u)` is the old one's at `x(u)`, so draws made in any chain of transforms come back
as the user wrote the target (plain `x`, or a NumPyro model's constrained sites).
- `apply_initial(target, fit)`: the same density with a fitted Gaussian (`mcd_cli.init`) as its
  declared initial distribution (a full-covariance fit is applied by `whiten`, so that the
  samplers keep a diagonal `π0`).

Example:
    >>> from mcd_cli.init import Gaussian
    >>> from mcd_cli.targets import Target
    >>> t = Target.create(lambda x: -0.5 * jnp.sum(((x - 1.0) / 0.1) ** 2), dim=3)
    >>> fitted = Gaussian(np.ones(3), np.full(3, 0.1))  # what laplace(t).gaussian finds
    >>> apply_initial(t, fitted).initial_scale  # same density, π0 = N(1, 0.1² I)
    array([0.1, 0.1, 0.1])
    >>> white = apply_initial(t, fitted, precondition=True)  # x = 1 + 0.1 u: N(0, I) times Z
    >>> round(float(white.log_density(jnp.zeros(3)) - t.log_density(jnp.ones(3))), 4)  # log|det L|
    -6.9078
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.targets.base import Target, lifted

Array = Any


def whiten(target: Target, mean: Array, chol: Array) -> Target:
    """The target in whitened coordinates `u`, with `x = mean + chol @ u`.

    Its log density is `log γ(mean + L u) + log|det L|`, so its normalising constant, and hence
    `log_z`, is the target's. Its initial distribution is N(0, I): a Gaussian `N(mean, L Lᵀ)` in x.

    Args:
        target: the target.
        mean: `μ`, shape `(d,)`.
        chol: `L`, shape `(d, d)` and non-singular (usually lower triangular), or `(d,)` for a
            diagonal `L = diag(chol)`.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(((x - 1.0) / 0.1) ** 2), dim=2)
        >>> w = whiten(t, jnp.ones(2), 0.1 * jnp.eye(2))
        >>> round(float(w.log_density(jnp.zeros(2))), 4)  # log|det L| = 2 log 0.1
        -4.6052
        >>> [round(v, 4) for v in w.user_values(jnp.ones(2))["x"].tolist()]  # x = μ + L u: the user's point
        [1.1, 1.1]
    """
    mean = np.asarray(mean, dtype=np.float64)
    chol = np.asarray(chol, dtype=np.float64)
    if chol.ndim == 1:
        chol = np.diag(chol)
    if mean.shape != (target.dim,) or chol.shape != (target.dim, target.dim):
        raise ValueError(
            f"whiten needs mean of shape ({target.dim},) and chol of shape ({target.dim}, {target.dim}) "
            f"or ({target.dim},), got {mean.shape} and {chol.shape}"
        )
    sign, log_det = np.linalg.slogdet(chol)
    if sign == 0 or not np.isfinite(log_det):
        raise ValueError("whiten needs a non-singular matrix chol")
    # Constants are numpy arrays, so they take the working precision of the caller; they are the
    # target's `constants` (a compiled program's arguments), with `target`'s own.

    def build(constants):
        inner, mu, lower, log_det = constants
        return _reparameterised(
            target.rebuilt(inner), lambda u: mu + lower @ u, lambda u: log_det, "whitened: x = μ + L u"
        )

    return lifted(build, (target.constants, mean, chol, float(log_det)))


def _reparameterised(target: Target, to_x: Any, log_jacobian: Any, note: str) -> Target:
    """`target` in `u` with `x = to_x(u)`: log density `log γ(to_x(u)) + log_jacobian(u)` (so log Z
    is unchanged), initial distribution N(0, I), samples mapped back to the user's values by `to_x`:
    `transported` of the map given as two functions."""
    return transported(target, lambda u: (to_x(u), log_jacobian(u)), note)


def transported(target: Target, transform: Any, note: str = "transported: x = T(z)") -> Target:
    """The target in `z` with `x = T(z)`, where `transform(z)` returns `(T(z), log|det ∂T/∂z|)` for
    one point and `T` is a bijection of R^d: log density `log γ(T(z)) + log|det ∂T/∂z|`, so log Z
    is unchanged, whatever `T`; initial distribution N(0, I); draws mapped back by `T`.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
        >>> double = lambda z: (2.0 * z, 2 * jnp.log(2.0))  # x = 2 z
        >>> round(float(transported(t, double).log_density(jnp.ones(2))), 4)  # -0.5 * 8 + log 4
        -2.6137
    """

    def log_density(z):
        x, log_det = transform(z)
        return target.log_density(x) + log_det

    return Target.create(
        log_density,
        target.dim,
        initial_mean=0.0,
        initial_scale=1.0,
        log_z=target.log_z,
        name=target.name,
        description=f"{target.description} ({note})",
        params=target.params,
        source=target.source,
        to_user=lambda z: target.user_values(transform(z)[0]),
    )


def tukey_h(u: Array, h: float) -> jax.Array:
    """Tukey's h transform `g(u) = u exp(h u²/2)`, elementwise: increasing, with `g'(u) =
    exp(h u²/2)(1 + h u²)`. For u ~ N(0, 1), g(u) has moments below order 1/h only: a tail as heavy
    as a Student-t with 1/h degrees of freedom, and the standard normal at h = 0."""
    return u * jnp.exp(0.5 * h * u * u)


def tukey_log_jacobian(u: Array, h: float) -> jax.Array:
    """`Σ log g'(u) = Σ (h u²/2 + log(1 + h u²))` of `tukey_h` over the coordinates of `u`."""
    return jnp.sum(0.5 * h * u * u + jnp.log1p(h * u * u), axis=-1)


def heavy_tailed(target: Target, h: Any, h_lower: Any = None) -> Target:
    """The target in `u` with `x = μ0 + σ0 ⊙ g(u)` (`tukey_h`; μ0, σ0 its declared initial mean and
    scale): its initial distribution N(0, I) is, in x, a Tukey-h distribution of the same centre and
    scale whose tails are as heavy as a Student-t with 1/h degrees of freedom. Its log density is
    `log γ(x) + Σ log σ0 + Σ (h u²/2 + log(1 + h u²))`, so log Z is unchanged.

    `h` is one number or one per coordinate (0: that coordinate keeps its Gaussian tail); `h_lower`,
    the same, is the h of u < 0 where it differs from the upper side's (a heavier tail on one side
    only; `g` stays increasing and continuously differentiable, g'(0) = 1 on both sides).

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2, initial_scale=2.0)
        >>> import math
        >>> x = 2 * math.exp(1 / 8)  # each coordinate of x at u = (1, 1)
        >>> round(float(heavy_tailed(t, 0.25).log_density(jnp.ones(2))), 4) == round(-x * x + 2 * (math.log(2) + 1 / 8 + math.log(1.25)), 4)
        True
    """
    d = target.dim
    upper = np.broadcast_to(np.asarray(h, dtype=np.float64), (d,))
    lower = upper if h_lower is None else np.broadcast_to(np.asarray(h_lower, dtype=np.float64), (d,))
    both = np.concatenate([upper, lower])
    if not (np.all((both >= 0.0) & (both < 1.0)) and np.any(both > 0.0)):
        raise ValueError(f"the tail parameter h must be in (0, 1) (0 for a Gaussian tail), got {h}, {h_lower}")
    mu = np.asarray(target.initial_mean, dtype=np.float64)
    sigma = np.asarray(target.initial_scale, dtype=np.float64)
    log_det = float(np.sum(np.log(sigma)))
    one_h = bool(np.ptp(both) == 0)  # one h everywhere: a number, the program as before sides existed
    what = f"{float(both[0]):g}" if one_h else "h±"

    def build(constants):
        inner, mu, sigma, log_det, hs = constants
        if one_h:
            h_of = lambda u: hs  # noqa: E731
        else:
            h_of = lambda u: jnp.where(u > 0, hs[0], hs[1])  # noqa: E731
        return _reparameterised(
            target.rebuilt(inner), lambda u: mu + sigma * tukey_h(u, h_of(u)),
            lambda u: log_det + tukey_log_jacobian(u, h_of(u)), f"heavy-tailed start: x = μ + σ u exp({what} u²/2)",
        )

    hs = float(both[0]) if one_h else (upper, lower)
    return lifted(build, (target.constants, mu, sigma, log_det, hs))


def unwhiten(mean: Array, chol: Array, u: Array) -> jax.Array:
    """Maps whitened points `u` (shape `(..., d)`) back to `x = mean + L u`."""
    chol = jnp.asarray(chol)
    chol = jnp.diag(chol) if chol.ndim == 1 else chol
    return jnp.asarray(mean) + jnp.asarray(u) @ chol.T


def apply_initial(target: Target, fit: Any, *, precondition: bool = False) -> Target:
    """The target with the fitted Gaussian as its initial distribution.

    A diagonal fit becomes the declared `N(mean, diag scale²)` of the same density; with
    `precondition`, the target is instead whitened by it (`x = mean + scale ⊙ u`), so that the
    samplers' isotropic steps see unit conditional scales. A full-covariance fit is always applied
    by `whiten` (the samplers' initial distributions are diagonal). log Z is unchanged either way.

    Args:
        target: the target.
        fit: an `mcd_cli.init.InitFit`, or its `Gaussian` (anything with `mean`, `scale` and
            `chol`, the last None for a diagonal Gaussian).
        precondition: whiten by a diagonal fit too.

    Example:
        >>> from mcd_cli.init import Gaussian
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
        >>> apply_initial(t, Gaussian(np.ones(2), np.full(2, 0.5))).initial_scale
        array([0.5, 0.5])
    """
    # Duck-typed, so that targets/ need not import the fits (mcd_cli.init imports targets).
    gaussian = getattr(fit, "gaussian", fit)
    if gaussian.chol is not None:
        return whiten(target, gaussian.mean, gaussian.chol)
    if precondition:
        return whiten(target, gaussian.mean, gaussian.scale)
    return target.with_initial(mean=np.asarray(gaussian.mean), scale=np.asarray(gaussian.scale))
