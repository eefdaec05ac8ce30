"""Laplace fits: the Gaussian at the mode of `log γ` with the curvature there.

The mode is found by L-BFGS (optax) from the declared initial mean and from `restarts` draws of the
declared initial distribution, to notice several modes; the precision is `−∇² log γ` at the mode:
its diagonal (`cov="diag"`, one Hessian-vector product per coordinate) or the full matrix
(`cov="full"`, `jax.hessian`, for d up to a few hundred). Converged means the Newton decrement
`gᵀ H⁻¹ g` at the end is below `NEWTON_DECREMENT_TOL`.

`_cluster` (shared with the VI fits) tells the end points of several searches apart.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mcd_cli.init.gaussian import (
    _LOG_2PI, Gaussian, InitFit, _batched_log_density, _check_warning, check_proposal, starting_points,
)
from mcd_cli.targets.base import Target

NEWTON_DECREMENT_TOL = 1e-2  # `gᵀ H⁻¹ g`: twice the log-density gain a further Newton step promises
MODE_SEPARATION = 3.0  # end points further apart than this many fitted standard deviations differ
BARRIER_NATS = 1.0  # ... unless log γ dips by at most this much on the segment between them
COVARIANCES = ("diag", "full")


@functools.lru_cache(maxsize=32)
def _mode_finder(target: Target, max_steps: int, gtol: float):
    """Jitted, vmapped `starts (R, d) -> (end points, log γ, ∇log γ, steps)` by optax L-BFGS on −log γ."""

    def loss(x):
        return -target.log_density(x)

    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    def run(start):
        def step(carry):
            x, state = carry
            value, grad = value_and_grad(x, state=state)
            updates, state = solver.update(grad, state, x, value=value, grad=grad, value_fn=loss)
            return optax.apply_updates(x, updates), state

        def keep_going(carry):
            _, state = carry
            count = optax.tree_utils.tree_get(state, "count")
            grad = optax.tree_utils.tree_get(state, "grad")
            value = optax.tree_utils.tree_get(state, "value")
            small = optax.tree_utils.tree_norm(grad) < gtol * (1.0 + jnp.abs(value))
            return (count == 0) | ((count < max_steps) & ~small & jnp.isfinite(value))

        x, state = jax.lax.while_loop(keep_going, step, (start, solver.init(start)))
        value, grad = jax.value_and_grad(target.log_density)(x)
        return x, value, grad, optax.tree_utils.tree_get(state, "count")

    return jax.jit(jax.vmap(run))


@functools.lru_cache(maxsize=32)
def _derivatives(target: Target):
    """Jitted `∇ log γ`, `∇² log γ` and the Hessian's diagonal at one point: compiled once per target
    (run op by op, the full Hessian of a 32-d time-series model took 5.5 s; jitted, 0.6 s)."""
    grad = jax.grad(target.log_density)

    def hessian_diag(x):  # one Hessian-vector product per coordinate
        def one(e):
            return jnp.vdot(e, jax.jvp(grad, (x,), (e,))[1])

        return jax.lax.map(one, jnp.eye(x.shape[0], dtype=x.dtype), batch_size=64)

    return jax.jit(grad), jax.jit(jax.hessian(target.log_density)), jax.jit(hessian_diag)


def _hessian_diag(target: Target, x: jax.Array) -> jax.Array:
    """Diagonal of `∇² log γ(x)`, one Hessian-vector product per coordinate."""
    return _derivatives(target)[2](x)


def laplace(
    target: Target,
    *,
    cov: str = "diag",
    max_steps: int = 500,
    restarts: int = 4,
    key: Optional[jax.Array] = None,
    check_samples: int = 2048,
    gtol: float = 1e-6,
) -> InitFit:
    """Laplace approximation: the Gaussian at the mode of `log γ` with the curvature there.

    Args:
        target: the target.
        cov: "diag" (precision = the Hessian's diagonal, so the scales are conditional standard
            deviations) or "full" (the full Hessian, `jax.hessian`; d up to a few hundred).
        max_steps: L-BFGS iterations per start.
        restarts: extra starts drawn from the declared initial distribution besides its mean;
            end points that differ by more than 3 fitted standard deviations count as separate
            modes (the best one is used, with a warning).
        key: for the restarts' starting points and the importance-sampling check (default key 0).
        check_samples: draws of the importance-sampling check.
        gtol: L-BFGS stops when `|∇ log γ| < gtol · (1 + |log γ|)`.

    Returns:
        The `InitFit`; its `log_z` is the Laplace evidence.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum((x - 2.0) ** 2 / 0.25), dim=2)
        >>> fit = laplace(t, cov="full", restarts=0)
        >>> [round(float(v), 3) for v in fit.gaussian.mean], abs(fit.log_z - float(np.log(2 * np.pi * 0.25))) < 1e-4
        ([2.0, 2.0], True)
    """
    _check_arguments(cov, max_steps, restarts)
    key = jax.random.key(0) if key is None else key
    k_starts, k_check = jax.random.split(key)
    starts = starting_points(target, k_starts, restarts)
    ends, values, end_grads, counts = _mode_finder(target, int(max_steps), float(gtol))(starts)
    values = np.asarray(values, dtype=np.float64)
    best = _best_end(values)
    mode = ends[best]
    value = float(values[best])
    grad = np.asarray(_derivatives(target)[0](mode), dtype=np.float64)
    fit = _curvature_fit(target, cov, mode, grad)
    warnings = list(fit.warnings)
    converged = fit.definite and fit.decrement < NEWTON_DECREMENT_TOL
    steps = int(np.max(np.asarray(counts)))
    if not converged:
        warnings.append(_convergence_warning(steps, fit.decrement, grad))
    modes = _count_modes(ends, values, end_grads, fit.gaussian.scale)
    if modes > 1:
        warnings.append(_multimodal_warning(values, modes))
    log_z = value + 0.5 * target.dim * _LOG_2PI + fit.gaussian.log_det_factor()
    check = check_proposal(target, fit.gaussian, k_check, check_samples)
    message = _check_warning("laplace", check, log_z, "the Laplace log Z")
    if message:
        warnings.append(message)
    return InitFit(f"laplace-{cov}", fit.gaussian, converged, steps, value, log_z, check, tuple(warnings), modes)


def _check_arguments(cov: str, max_steps: int, restarts: int) -> None:
    """Raises ValueError for an unknown `cov`, fewer than one step or negative restarts."""
    if cov not in COVARIANCES:
        raise ValueError(f"cov must be one of {', '.join(COVARIANCES)}, got {cov!r}")
    if max_steps < 1 or restarts < 0:
        raise ValueError(f"max_steps must be >= 1 and restarts >= 0, got {max_steps} and {restarts}")


def _best_end(values: np.ndarray) -> int:
    """The index of the mode search that ended highest (finite `log γ` only).

    Raises:
        ValueError: no search ended where `log γ` is finite.
    """
    if not np.any(np.isfinite(values)):
        raise ValueError(
            "laplace: log γ is not finite at the end of any mode search; check the target with `mcd check`"
        )
    return int(np.nanargmax(np.where(np.isfinite(values), values, -np.inf)))


class _Curvature(NamedTuple):
    """A Gaussian fitted to the curvature at the end point: `decrement` is the Newton decrement
    `gᵀ H⁻¹ g` there, `definite` whether the precision used is positive definite, `warnings` what
    the fit found wrong. A failed full fit has `gaussian` None and a NaN decrement."""

    gaussian: Optional[Gaussian]
    decrement: float
    definite: bool
    warnings: tuple[str, ...]


def _full_curvature(mode: jax.Array, grad: np.ndarray, hessian: np.ndarray) -> _Curvature:
    """The Gaussian whose precision is the full `−∇² log γ` at `mode`, if that is positive definite;
    otherwise no Gaussian and a warning (the caller falls back to the diagonal)."""
    precision = -0.5 * (hessian + hessian.T)
    eig = np.linalg.eigvalsh(precision) if np.all(np.isfinite(precision)) else np.array([np.nan])
    if not bool(np.all(eig > 0)):
        warning = (
            "laplace: the Hessian at the end point is not negative definite (smallest curvature "
            f"{np.nanmin(eig):.3g}): not a mode; using the diagonal fit instead"
        )
        return _Curvature(None, math.nan, False, (warning,))
    cov_chol = np.linalg.cholesky(np.linalg.inv(precision))
    gaussian = Gaussian(np.asarray(mode, np.float64), np.sqrt(np.sum(cov_chol**2, axis=1)), cov_chol)
    return _Curvature(gaussian, float(grad @ np.linalg.solve(precision, grad)), True, ())


def _diag_curvature(target: Target, mode: jax.Array, grad: np.ndarray) -> _Curvature:
    """The Gaussian whose precision is the diagonal of `−∇² log γ` at `mode`; coordinates where
    that is not positive keep the declared initial scale (with a warning)."""
    h = -np.asarray(_hessian_diag(target, mode), dtype=np.float64)
    ok = np.isfinite(h) & (h > 0)
    definite = bool(np.all(ok))
    warnings: tuple[str, ...] = ()
    if not definite:
        warnings = (
            f"laplace: the curvature is not positive in {int(np.sum(~ok))} of {target.dim} "
            "coordinates at the end point (not a mode there); those keep the declared initial scale",
        )
    scale = np.where(ok, 1.0 / np.sqrt(np.where(ok, h, 1.0)), np.asarray(target.initial_scale))
    gaussian = Gaussian(np.asarray(mode, np.float64), scale)
    return _Curvature(gaussian, float(np.sum(grad**2 * scale**2)), definite, warnings)


def _curvature_fit(target: Target, cov: str, mode: jax.Array, grad: np.ndarray) -> _Curvature:
    """The fit `cov` asks for at `mode`: the full one, or the diagonal one for `cov="diag"` or when
    the full Hessian is not negative definite (the full fit's warning then comes first)."""
    if cov != "full":
        return _diag_curvature(target, mode, grad)
    full = _full_curvature(mode, grad, np.asarray(_derivatives(target)[1](mode), dtype=np.float64))
    if full.definite:
        return full
    diag = _diag_curvature(target, mode, grad)
    return diag._replace(warnings=full.warnings + diag.warnings)


def _convergence_warning(steps: int, decrement: float, grad: np.ndarray) -> str:
    """The warning for a mode search that did not converge."""
    return (
        f"laplace: the mode search did not converge ({steps} L-BFGS steps, Newton decrement "
        f"{decrement:.3g}, |∇ log γ| = {float(np.linalg.norm(grad)):.3g}); the fit may be "
        "poor: prefer --init vi, or raise the step limit"
    )


def _count_modes(ends: jax.Array, values: np.ndarray, end_grads: jax.Array, scale: np.ndarray) -> int:
    """How many separate modes the searches' end points show (`_cluster` in the fitted `scale`; 1
    when none is at a mode)."""
    # Only end points where the search converged (Newton decrement, in the best fit's scales) are
    # modes; the others stalled on the way and say nothing about the number of modes.
    end_decrements = np.sum((np.asarray(end_grads, np.float64) * scale) ** 2, axis=1)
    at_mode = np.isfinite(values) & (end_decrements < NEWTON_DECREMENT_TOL)
    return len(set(_cluster(np.asarray(ends, np.float64)[at_mode], scale))) if at_mode.any() else 1


def _multimodal_warning(values: np.ndarray, modes: int) -> str:
    """The warning for searches that ended at `modes` > 1 separate points."""
    finite = values[np.isfinite(values)]
    return (
        f"laplace: the mode searches from {len(values)} starting points ended at {modes} separate "
        f"points (log γ from {finite.min():.2f} to {finite.max():.2f}); the target looks "
        "multimodal and a Gaussian at one mode ignores the others: prefer --init vi or target"
    )


def _barrier(target: Target, a: np.ndarray, b: np.ndarray, points: int = 17) -> float:
    """How far `log γ` dips below the lower of its two end values on the segment from a to b."""
    t = np.linspace(0.0, 1.0, points)[:, None]
    line = jnp.asarray((1.0 - t) * a + t * b, dtype=jnp.result_type(float))
    values = np.asarray(_batched_log_density(target)(line), dtype=np.float64)
    if not np.all(np.isfinite(values)):
        return math.inf
    return float(min(values[0], values[-1]) - values.min())


def _cluster(points: np.ndarray, scale: np.ndarray, target: Optional[Target] = None) -> list[int]:
    """A cluster label per point: a point joins the first cluster whose first point is within
    `MODE_SEPARATION` scales (every coordinate), or, given the target, from which the segment
    shows no barrier of log γ deeper than `BARRIER_NATS` (the same basin: a slow, ill-conditioned
    VI fit ends at scattered points of one mode; separate modes have a dip between them). Not for
    Laplace end points: a search stopped at a saddle has no dip towards either mode."""
    centres: list[np.ndarray] = []
    labels = []
    for p in points:
        for i, c in enumerate(centres):
            near = np.max(np.abs(p - c) / scale) <= MODE_SEPARATION
            if near or (target is not None and _barrier(target, c, p) <= BARRIER_NATS):
                labels.append(i)
                break
        else:
            centres.append(p)
            labels.append(len(centres) - 1)
    return labels

