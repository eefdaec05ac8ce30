"""Initial distributions fitted from the target, affine whitening, and step sizes from curvature.

A sampler starts from a diagonal Gaussian `π0` and anneals along `γ_k = γ^β_k π0^(1−β_k)`. When
`π0` is far wider than the target (a posterior 30 times narrower than its prior) or when the fixed
step size exceeds the Langevin stability limit `δ < 2 / λ_max(−∇² log γ_k)`, the estimate diverges.
This module fits `π0` from the target and derives per-step step sizes from the path's curvature.

Fits (each returns an `InitFit`: the `Gaussian`, whether the fit converged, its own log Z
approximation, an importance-sampling check of the Gaussian as a proposal, and warnings):

- `laplace(target, cov="diag"|"full")`: the mode of `log γ` by L-BFGS (optax) from the declared
  initial mean (and from `restarts` draws of the declared initial distribution, to notice several
  modes), and the Gaussian with the precision `−∇² log γ` at the mode: its diagonal (`cov="diag"`,
  one Hessian-vector product per coordinate) or the full matrix (`cov="full"`, `jax.hessian`, for d
  up to a few hundred). Converged means the Newton decrement `gᵀ H⁻¹ g` at the end is below 1e-2.
- `vi(target, key)`: a mean-field Gaussian maximising the ELBO `E_q[log γ] + H(q)` with
  reparameterised draws and Adam (2000 steps of 16 draws, rate 0.1 decaying to 0.001: fewer
  steps stop well short of the optimum on stiff posteriors), from `restarts` starting means at
  once (vmapped). A few seconds at d = 32 on a CPU.
- `fit_initial(target, key, method)`: `"target"` (the declared distribution), `"laplace"`, `"vi"`,
  or `"auto"`: the declared distribution when the target sets one explicitly, otherwise VI from
  several starts, and when these land on different modes, one Gaussian matching the mixture of the
  fits' first two moments (so that no mode found is left out).

Every fit is checked by importance sampling with its Gaussian as the proposal (`ProposalCheck`:
log Ẑ, ESS, Pareto k̂). A k̂ above 0.7 means the Gaussian misses part of the target's mass (several
modes, a funnel, heavy tails); the fit then warns, as it does when the mode search did not converge
or restarts found different modes. Warnings are one-line strings in `InitFit.warnings`.

Using a fit:

- `apply_initial(target, fit)`: the same density with the fit as its declared initial distribution
  (a full-covariance fit is applied by `whiten`, so that the samplers keep a diagonal `π0`);
- `whiten(target, mean, chol)`: the target in `u` with `x = μ + L u`; its log density is
  `log γ(μ + L u) + log|det L|`, so log Z is unchanged, and its initial distribution is N(0, I);
  `unwhiten` maps samples back.

Step sizes:

- `pilot_step_sizes(target, betas, key=...)`: a pilot population of particles runs through the
  annealing path; at step k, power iteration on Hessian–vector products estimates the largest
  curvature `λ_k = max |eig(∇² log γ_k)|` over the particles, the step size is
  `δ_k = min(max_step_size, safety / λ_k)` (ULA is stable for `δ λ < 2`; `safety = 0.5` leaves a
  margin for the power iteration's underestimate and keeps the ULA kernel close to invariant), and
  the particles take one ULA step of `δ_k` to follow the path.
Training starts from the pilot's sizes with one step-size parameter per step
(`schedules.per_step_sizes`).

Example:
    >>> import jax, jax.numpy as jnp
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

import functools
import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import logsumexp

from mcd_cli.targets.base import Target

Array = Any

K_HAT_WARN = 0.7  # PSIS: above this, the proposal misses part of the target's mass
NEWTON_DECREMENT_TOL = 1e-2  # `gᵀ H⁻¹ g`: twice the log-density gain a further Newton step promises
MODE_SEPARATION = 3.0  # end points further apart than this many fitted standard deviations differ
BARRIER_NATS = 1.0  # ... unless log γ dips by at most this much on the segment between them
METHODS = ("auto", "target", "laplace", "vi")
AUTO_FULL_MAX_DIM = 256  # "auto" also tries the full-covariance Laplace fit up to this dimension
COVARIANCES = ("diag", "full")
_LOG_2PI = math.log(2 * math.pi)


class Gaussian(NamedTuple):
    """A Gaussian `N(mean, Σ)` on R^d: diagonal (`chol` None, `Σ = diag(scale²)`) or full (`Σ = L Lᵀ`).

    Attributes:
        mean: shape `(d,)`.
        scale: marginal standard deviations, shape `(d,)` (`sqrt(diag Σ)` for a full Gaussian).
        chol: lower-triangular `L` with `Σ = L Lᵀ`, shape `(d, d)`, or None for a diagonal Gaussian.

    Example:
        >>> g = Gaussian(np.zeros(2), np.array([1.0, 2.0]))
        >>> round(float(g.log_density(jnp.zeros(2))), 3)  # −log 2π − log 2
        -2.531
    """

    mean: np.ndarray
    scale: np.ndarray
    chol: Optional[np.ndarray] = None

    @property
    def dim(self) -> int:
        return int(np.shape(self.mean)[0])

    def factor(self) -> np.ndarray:
        """A matrix `L` with `Σ = L Lᵀ` (`diag(scale)` for a diagonal Gaussian)."""
        return np.diag(self.scale) if self.chol is None else np.asarray(self.chol)

    def sample(self, key: jax.Array, num: int) -> jax.Array:
        """`num` draws, shape `(num, d)`."""
        eps = jax.random.normal(key, (num, self.dim))
        if self.chol is None:
            return jnp.asarray(self.mean) + eps * jnp.asarray(self.scale)
        return jnp.asarray(self.mean) + eps @ jnp.asarray(self.chol).T

    def log_density(self, x: Array) -> jax.Array:
        """`log N(x; mean, Σ)` for one point."""
        if self.chol is None:
            return jnp.sum(jax.scipy.stats.norm.logpdf(x, self.mean, self.scale))
        chol = jnp.asarray(self.chol)
        z = jax.scipy.linalg.solve_triangular(chol, x - jnp.asarray(self.mean), lower=True)
        return -0.5 * (self.dim * _LOG_2PI + z @ z) - jnp.sum(jnp.log(jnp.abs(jnp.diag(chol))))

    def log_det_factor(self) -> float:
        """`log|det L| = ½ log det Σ`, in float64."""
        if self.chol is None:
            return float(np.sum(np.log(np.asarray(self.scale, dtype=np.float64))))
        return float(np.linalg.slogdet(np.asarray(self.chol, dtype=np.float64))[1])


class ProposalCheck(NamedTuple):
    """Importance sampling of the target with a fitted Gaussian as the proposal.

    Attributes:
        log_z: `logsumexp(log w) − log N` with `log w = log γ(x) − log q(x)`, `x ~ q`.
        elbo: `mean(log w)`, a lower bound of log Z in expectation.
        ess: effective sample size `(Σ w)² / Σ w²`.
        pareto_k: PSIS k̂ of the weights; above 0.7 the proposal misses part of the target's mass
            (0 when ESS > 0.99 N: the weights are then nearly equal and have no tail to fit).
        num_samples: N.
    """

    log_z: float
    elbo: float
    ess: float
    pareto_k: float
    num_samples: int


class InitFit(NamedTuple):
    """A fitted initial distribution and what is known about its quality.

    Attributes:
        method: "target", "laplace", "vi" or "auto:<what auto chose>".
        gaussian: the fitted `Gaussian`.
        converged: Laplace: the Newton decrement at the mode is below 1e-2 and the Hessian is
            negative definite; VI: the ELBO stopped rising (mean of the last tenth of the steps
            within noise, or 0.05 nats, of the tenth before); "target": True.
        steps: optimiser steps taken (the most over restarts).
        objective: Laplace: `log γ` at the mode; VI: the final ELBO (from the check's draws).
        log_z: the fit's own approximation of log Z: the Laplace evidence
            `log γ(μ) + d/2 log 2π + log|det L|` (with the diagonal fit, the diagonal's
            conditional variances), or VI's ELBO (a lower bound).
        check: `ProposalCheck` of the Gaussian as an importance-sampling proposal.
        warnings: one-line warnings (non-convergence, several modes, a poor fit).
        modes: separate end points found by the restarts (1 when all agreed).
    """

    method: str
    gaussian: Gaussian
    converged: bool
    steps: int
    objective: float
    log_z: float
    check: ProposalCheck
    warnings: tuple[str, ...]
    modes: int = 1


def _pareto_k(log_w: np.ndarray) -> float:
    try:
        from mcd_cli.stats import pareto_k
    except ImportError:
        from mcd_cli.stats import pareto_k
    return float(pareto_k(log_w))


@functools.lru_cache(maxsize=32)
def _batched_log_density(target: Target):
    return jax.jit(jax.vmap(target.log_density))


def check_proposal(target: Target, gaussian: Gaussian, key: jax.Array, num_samples: int = 2048) -> ProposalCheck:
    """Importance sampling of `target` with `gaussian` as the proposal (see `ProposalCheck`).

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
        >>> c = check_proposal(t, Gaussian(np.zeros(2), np.ones(2)), jax.random.key(0), 256)
        >>> round(c.log_z, 4), round(c.ess)  # exact proposal: log Z = log 2π, every weight equal
        (1.8379, 256)
    """
    x = gaussian.sample(key, num_samples)
    log_q = jax.vmap(gaussian.log_density)(x)
    log_w = np.asarray(_batched_log_density(target)(x) - log_q, dtype=np.float64)
    log_w = np.where(np.isnan(log_w), -np.inf, log_w)
    if not np.any(np.isfinite(log_w)):
        return ProposalCheck(float("-inf"), float("-inf"), 0.0, float("inf"), num_samples)
    lse = float(logsumexp(log_w))
    ess = float(np.exp(2 * lse - logsumexp(2 * log_w)))
    finite = log_w[np.isfinite(log_w)]
    return ProposalCheck(
        log_z=lse - math.log(num_samples),
        elbo=float(np.mean(log_w)) if finite.size == log_w.size else float("-inf"),
        ess=ess,
        # Nearly equal weights (an exact proposal, up to rounding) have no tail to fit.
        pareto_k=0.0 if ess > 0.99 * num_samples else _pareto_k(finite),
        num_samples=num_samples,
    )


def _check_warning(method: str, check: ProposalCheck, own_log_z: float, own_label: str) -> Optional[str]:
    if check.pareto_k <= K_HAT_WARN and np.isfinite(check.log_z):
        return None
    return (
        f"{method}: the fitted Gaussian covers the target poorly (importance sampling with it: "
        f"k̂ = {check.pareto_k:.2f}, ESS {check.ess:.0f} of {check.num_samples}, log Ẑ = "
        f"{check.log_z:.2f} against {own_label} {own_log_z:.2f}); the target may be multimodal, "
        "skewed or funnel-shaped: prefer --init vi or target, and more annealing steps"
    )


# ----------------------------------------------------------------------------------------------
# Laplace


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


def _hessian_diag(target: Target, x: jax.Array) -> jax.Array:
    """Diagonal of `∇² log γ(x)`, one Hessian-vector product per coordinate."""
    grad = jax.grad(target.log_density)

    def one(e):
        return jnp.vdot(e, jax.jvp(grad, (x,), (e,))[1])

    return jax.lax.map(one, jnp.eye(x.shape[0], dtype=x.dtype), batch_size=64)


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
    if cov not in COVARIANCES:
        raise ValueError(f"cov must be one of {', '.join(COVARIANCES)}, got {cov!r}")
    if max_steps < 1 or restarts < 0:
        raise ValueError(f"max_steps must be >= 1 and restarts >= 0, got {max_steps} and {restarts}")
    key = jax.random.key(0) if key is None else key
    k_starts, k_check = jax.random.split(key)
    dtype = jnp.result_type(float)
    mean0 = jnp.asarray(target.initial_mean, dtype=dtype)
    scale0 = jnp.asarray(target.initial_scale, dtype=dtype)
    starts = jnp.concatenate(
        [mean0[None], mean0 + scale0 * jax.random.normal(k_starts, (restarts, target.dim), dtype)]
    )
    ends, values, end_grads, counts = _mode_finder(target, int(max_steps), float(gtol))(starts)
    values = np.asarray(values, dtype=np.float64)
    warnings: list[str] = []
    if not np.any(np.isfinite(values)):
        raise ValueError(
            "laplace: log γ is not finite at the end of any mode search; check the target with `mcd check`"
        )
    best = int(np.nanargmax(np.where(np.isfinite(values), values, -np.inf)))
    mode = ends[best]
    value = float(values[best])
    grad = np.asarray(jax.grad(target.log_density)(mode), dtype=np.float64)

    if cov == "full":
        hessian = np.asarray(jax.hessian(target.log_density)(mode), dtype=np.float64)
        precision = -0.5 * (hessian + hessian.T)
        eig = np.linalg.eigvalsh(precision) if np.all(np.isfinite(precision)) else np.array([np.nan])
        definite = bool(np.all(eig > 0))
        if definite:
            cov_chol = np.linalg.cholesky(np.linalg.inv(precision))
            gaussian = Gaussian(np.asarray(mode, np.float64), np.sqrt(np.sum(cov_chol**2, axis=1)), cov_chol)
            decrement = float(grad @ np.linalg.solve(precision, grad))
        else:
            warnings.append(
                "laplace: the Hessian at the end point is not negative definite (smallest curvature "
                f"{np.nanmin(eig):.3g}): not a mode; using the diagonal fit instead"
            )
    if cov == "diag" or not definite:
        h = -np.asarray(_hessian_diag(target, mode), dtype=np.float64)
        ok = np.isfinite(h) & (h > 0)
        definite = bool(np.all(ok))
        if not definite:
            warnings.append(
                f"laplace: the curvature is not positive in {int(np.sum(~ok))} of {target.dim} "
                "coordinates at the end point (not a mode there); those keep the declared initial scale"
            )
        scale = np.where(ok, 1.0 / np.sqrt(np.where(ok, h, 1.0)), np.asarray(target.initial_scale))
        gaussian = Gaussian(np.asarray(mode, np.float64), scale)
        decrement = float(np.sum(grad**2 * scale**2))
    converged = definite and decrement < NEWTON_DECREMENT_TOL
    steps = int(np.max(np.asarray(counts)))
    if not converged:
        warnings.append(
            f"laplace: the mode search did not converge ({steps} L-BFGS steps, Newton decrement "
            f"{decrement:.3g}, |∇ log γ| = {float(np.linalg.norm(grad)):.3g}); the fit may be "
            "poor: prefer --init vi, or raise the step limit"
        )

    # Only end points where the search converged (Newton decrement, in the best fit's scales) are
    # modes; the others stalled on the way and say nothing about the number of modes.
    end_decrements = np.sum((np.asarray(end_grads, np.float64) * gaussian.scale) ** 2, axis=1)
    at_mode = np.isfinite(values) & (end_decrements < NEWTON_DECREMENT_TOL)
    modes = len(set(_cluster(np.asarray(ends, np.float64)[at_mode], gaussian.scale))) if at_mode.any() else 1
    if modes > 1:
        finite = values[np.isfinite(values)]
        warnings.append(
            f"laplace: the mode searches from {len(values)} starting points ended at {modes} separate "
            f"points (log γ from {finite.min():.2f} to {finite.max():.2f}); the target looks "
            "multimodal and a Gaussian at one mode ignores the others: prefer --init vi or target"
        )
    log_z = value + 0.5 * target.dim * _LOG_2PI + gaussian.log_det_factor()
    check = check_proposal(target, gaussian, k_check, check_samples)
    message = _check_warning("laplace", check, log_z, "the Laplace log Z")
    if message:
        warnings.append(message)
    return InitFit(f"laplace-{cov}", gaussian, converged, steps, value, log_z, check, tuple(warnings), modes)


def _barrier(target: Target, a: np.ndarray, b: np.ndarray, points: int = 17) -> float:
    """How far `log γ` dips below the lower of its two end values on the segment from a to b."""
    t = np.linspace(0.0, 1.0, points)[:, None]
    line = jnp.asarray((1.0 - t) * a + t * b, dtype=jnp.result_type(float))
    values = np.asarray(jax.vmap(target.log_density)(line), dtype=np.float64)
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


# ----------------------------------------------------------------------------------------------
# Variational inference


class _VIState(NamedTuple):
    mean: jax.Array
    log_scale: jax.Array


@functools.lru_cache(maxsize=32)
def _vi_runner(target: Target, steps: int, num_samples: int, learning_rate: float):
    """Jitted, vmapped `(keys (R,), means (R, d), log_scales (R, d)) -> (params, ELBO trace)`."""
    dim = target.dim
    # The rate decays (cosine, to 1 %) so that the final fit is not blurred by Adam's step noise.
    schedule = optax.cosine_decay_schedule(learning_rate, steps, alpha=0.01)
    optimiser = optax.apply_if_finite(optax.adam(schedule), max_consecutive_errors=50)

    def elbo(params: _VIState, key: jax.Array) -> jax.Array:
        eps = jax.random.normal(key, (num_samples, dim), params.mean.dtype)
        x = params.mean + jnp.exp(params.log_scale) * eps
        entropy = jnp.sum(params.log_scale) + 0.5 * dim * (1.0 + _LOG_2PI)
        return jnp.mean(jax.vmap(target.log_density)(x)) + entropy

    def run(key, mean, log_scale):
        params = _VIState(mean, log_scale)

        def step(carry, k):
            params, opt_state = carry
            value, grad = jax.value_and_grad(lambda p: -elbo(p, k))(params)
            updates, opt_state = optimiser.update(grad, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), -value

        (params, _), trace = jax.lax.scan(step, (params, optimiser.init(params)), jax.random.split(key, steps))
        return params, trace

    return jax.jit(jax.vmap(run))


def _vi_converged(trace: np.ndarray) -> bool:
    """The ELBO's mean over the last tenth of the steps is within noise (or 0.05) of the tenth before."""
    n = max(len(trace) // 10, 2)
    last, before = trace[-n:], trace[-2 * n : -n]
    if not (np.all(np.isfinite(last)) and np.all(np.isfinite(before))):
        return False
    noise = math.sqrt(np.var(last) / n + np.var(before) / n)
    return float(np.mean(last) - np.mean(before)) <= max(3.0 * noise, 0.05)


class _VIRuns(NamedTuple):
    means: np.ndarray  # (R, d)
    scales: np.ndarray  # (R, d)
    traces: np.ndarray  # (R, steps) ELBO estimates along the optimisation
    final: np.ndarray  # (R,) mean ELBO over the last tenth of the steps (-inf if not finite)


def _vi_runs(
    target: Target, key: jax.Array, steps: int, num_samples: int, learning_rate: float, restarts: int
) -> _VIRuns:
    if steps < 20 or num_samples < 1 or restarts < 0:
        raise ValueError(
            f"vi needs steps >= 20, num_samples >= 1 and restarts >= 0; got {steps}, {num_samples}, {restarts}"
        )
    k_starts, k_runs = jax.random.split(key)
    dtype = jnp.result_type(float)
    mean0 = jnp.asarray(target.initial_mean, dtype=dtype)
    scale0 = jnp.asarray(target.initial_scale, dtype=dtype)
    means = jnp.concatenate(
        [mean0[None], mean0 + scale0 * jax.random.normal(k_starts, (restarts, target.dim), dtype)]
    )
    log_scales = jnp.broadcast_to(jnp.log(scale0), means.shape)
    runner = _vi_runner(target, int(steps), int(num_samples), float(learning_rate))
    params, traces = runner(jax.random.split(k_runs, restarts + 1), means, log_scales)
    traces = np.asarray(traces, dtype=np.float64)
    tail = max(steps // 10, 2)
    final = np.array([np.mean(t[-tail:]) if np.all(np.isfinite(t[-tail:])) else -np.inf for t in traces])
    if not np.any(np.isfinite(final)):
        raise ValueError(
            "vi: the ELBO is not finite; check the target with `mcd check`, or lower the learning rate"
        )
    return _VIRuns(
        np.asarray(params.mean, np.float64), np.exp(np.asarray(params.log_scale, np.float64)), traces, final
    )


def _vi_fit(target: Target, runs: _VIRuns, key: jax.Array, check_samples: int) -> InitFit:
    """The best run's fit, with its convergence, mode count, check and warnings."""
    steps = runs.traces.shape[1]
    tail = max(steps // 10, 2)
    best = int(np.argmax(runs.final))
    gaussian = Gaussian(runs.means[best], runs.scales[best])
    trace = runs.traces[best]
    warnings: list[str] = []
    converged = _vi_converged(trace)
    if not converged:
        warnings.append(
            f"vi: the ELBO was still rising after {steps} steps (last tenth {np.mean(trace[-tail:]):.2f}, "
            f"the tenth before {np.mean(trace[-2 * tail : -tail]):.2f}); raise the number of steps"
        )
    finite = np.isfinite(runs.final)
    modes = len(set(_cluster(runs.means[finite], gaussian.scale, target)))
    if modes > 1:
        good = runs.final[np.isfinite(runs.final)]
        warnings.append(
            f"vi: the fits from {len(runs.final)} starting points ended at {modes} separate places (ELBO "
            f"from {good.min():.2f} to {good.max():.2f}); the target looks multimodal"
        )
    check = check_proposal(target, gaussian, key, check_samples)
    message = _check_warning("vi", check, check.elbo, "the ELBO")
    if message:
        warnings.append(message)
    return InitFit("vi", gaussian, converged, steps, check.elbo, check.elbo, check, tuple(warnings), modes)


def vi(
    target: Target,
    key: jax.Array,
    *,
    steps: int = 2000,
    num_samples: int = 16,
    learning_rate: float = 0.1,
    restarts: int = 0,
    check_samples: int = 2048,
) -> InitFit:
    """Mean-field Gaussian variational fit: maximises `E_q[log γ(x)] + H(q)` over `q = N(m, diag s²)`.

    Reparameterised draws `x = m + s ε`, `num_samples` per step, Adam on `(m, log s)` with a
    cosine-decaying rate (non-finite updates skipped by `optax.apply_if_finite`), starting from
    the declared initial distribution.
    With `restarts > 0`, as many further runs start at means drawn from the declared initial
    distribution (all runs vmapped together); the fit with the best final ELBO is returned, and
    fits more than 3 fitted standard deviations apart count as separate modes (with a warning).

    Args:
        target: the target.
        key: PRNG key (split into the optimisation's and the check's).
        steps: Adam steps.
        num_samples: draws per ELBO gradient.
        learning_rate: Adam's learning rate (on the mean and the log scale).
        restarts: further runs from random starting means.
        check_samples: draws of the importance-sampling check; its mean log weight is the final ELBO.

    Returns:
        The `InitFit`; `objective` and `log_z` are the final ELBO.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: jnp.sum(jax.scipy.stats.norm.logpdf(x, 1.0, 0.5)), dim=2)
        >>> fit = vi(t, jax.random.key(0), steps=300)
        >>> np.allclose(fit.gaussian.mean, 1.0, atol=0.05), np.allclose(fit.gaussian.scale, 0.5, atol=0.05)
        (True, True)
    """
    k_runs, k_check = jax.random.split(key)
    runs = _vi_runs(target, k_runs, int(steps), int(num_samples), float(learning_rate), int(restarts))
    return _vi_fit(target, runs, k_check, check_samples)


def fit_initial(
    target: Target,
    key: jax.Array,
    method: str = "auto",
    *,
    explicit_initial: bool = False,
    cov: str = "diag",
    restarts: int = 4,
    vi_steps: int = 2000,
    max_steps: int = 500,
    check_samples: int = 2048,
) -> InitFit:
    """The initial distribution chosen by `--init METHOD` (one of "auto", "target", "laplace", "vi").

    "auto": the declared distribution when the target sets one explicitly (`explicit_initial`);
    otherwise VI from `restarts + 1` starting points, and when these end at different modes, the
    Gaussian matching the mean and variance of an equal-weight mixture of one fit per mode (it
    covers every mode found, where a single fit would cover one), with a warning. When VI finds
    one mode and `d ≤ AUTO_FULL_MAX_DIM`, the full-covariance Laplace fit is tried too and kept
    when it converged and its ELBO as a proposal (`check.elbo`) is higher: exact on a conjugate
    regression, where the mean-field fit misses the correlations; worse on a funnel, where it loses.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2, initial_scale=3.0)
        >>> fit_initial(t, jax.random.key(0), "auto", explicit_initial=True).gaussian.scale
        array([3., 3.])
    """
    if method not in METHODS:
        raise ValueError(f"unknown initial-distribution method {method!r}; choose one of {', '.join(METHODS)}")
    k_fit, k_check = jax.random.split(key)
    if method == "target" or (method == "auto" and explicit_initial):
        gaussian = Gaussian(np.asarray(target.initial_mean), np.asarray(target.initial_scale))
        check = check_proposal(target, gaussian, k_check, check_samples)
        name = "target" if method == "target" else "auto:target"
        return InitFit(name, gaussian, True, 0, check.elbo, check.elbo, check, ())
    if method == "laplace":
        return laplace(target, cov=cov, max_steps=max_steps, restarts=restarts, key=k_fit, check_samples=check_samples)
    if method == "vi":
        return vi(target, k_fit, steps=vi_steps, restarts=restarts, check_samples=check_samples)
    k_runs, k_best = jax.random.split(k_fit)
    runs = _vi_runs(target, k_runs, int(vi_steps), 16, 0.1, int(restarts))
    best = _vi_fit(target, runs, k_best, check_samples)
    if best.modes == 1:
        best = best._replace(method="auto:vi")
        if target.dim > AUTO_FULL_MAX_DIM:
            return best
        # A correlated unimodal posterior (a regression) is covered far better by the full
        # Laplace Gaussian; a funnel is not. Keep whichever has the higher ELBO as a proposal,
        # and Laplace only when it converged to one mode.
        k_laplace = jax.random.fold_in(k_fit, 1)
        full = laplace(target, cov="full", max_steps=max_steps, restarts=1, key=k_laplace, check_samples=check_samples)
        if full.converged and full.modes == 1 and full.gaussian.chol is not None and full.check.elbo > best.check.elbo:
            return full._replace(method="auto:laplace-full")
        return best
    # One fit per mode found (the best ELBO in each cluster), weighted equally: how much mass each
    # mode holds is unknown, and the point is to cover every one.
    ok = np.flatnonzero(np.isfinite(runs.final))
    labels = np.array(_cluster(runs.means[ok], best.gaussian.scale, target))
    keep = [ok[labels == c][np.argmax(runs.final[ok[labels == c]])] for c in np.unique(labels)]
    means, variances = runs.means[keep], runs.scales[keep] ** 2
    mean = means.mean(axis=0)
    gaussian = Gaussian(mean, np.sqrt((variances + means**2).mean(axis=0) - mean**2))
    check = check_proposal(target, gaussian, k_check, check_samples)
    warnings = best.warnings + (
        f"auto: the variational fits found {best.modes} modes; starting from one Gaussian matching "
        "their mixture's mean and variance, which covers all of them",
    )
    return InitFit(
        "auto:vi-moments", gaussian, best.converged, best.steps, check.elbo, check.elbo, check, warnings, best.modes
    )


# ----------------------------------------------------------------------------------------------
# Using a fit


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
    log_det = float(log_det)
    # Constants are closed over as numpy arrays, so they take the working precision of the caller.
    mu, lower = mean, chol

    def log_density(u):
        return target.log_density(mu + lower @ u) + log_det

    return Target.create(
        log_density,
        target.dim,
        initial_mean=0.0,
        initial_scale=1.0,
        log_z=target.log_z,
        name=target.name,
        description=f"{target.description} (whitened: x = μ + L u)",
        params=target.params,
        source=target.source,
    )


def unwhiten(mean: Array, chol: Array, u: Array) -> jax.Array:
    """Maps whitened points `u` (shape `(..., d)`) back to `x = mean + L u`."""
    chol = jnp.asarray(chol)
    chol = jnp.diag(chol) if chol.ndim == 1 else chol
    return jnp.asarray(mean) + jnp.asarray(u) @ chol.T


def apply_initial(target: Target, fit: InitFit | Gaussian, *, precondition: bool = False) -> Target:
    """The target with the fitted Gaussian as its initial distribution.

    A diagonal fit becomes the declared `N(mean, diag scale²)` of the same density; with
    `precondition`, the target is instead whitened by it (`x = mean + scale ⊙ u`), so that the
    samplers' isotropic steps see unit conditional scales. A full-covariance fit is always applied
    by `whiten` (the samplers' initial distributions are diagonal). log Z is unchanged either way.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
        >>> apply_initial(t, Gaussian(np.ones(2), np.full(2, 0.5))).initial_scale
        array([0.5, 0.5])
    """
    gaussian = fit.gaussian if isinstance(fit, InitFit) else fit
    if gaussian.chol is not None:
        return whiten(target, gaussian.mean, gaussian.chol)
    if precondition:
        return whiten(target, gaussian.mean, gaussian.scale)
    return target.with_initial(mean=np.asarray(gaussian.mean), scale=np.asarray(gaussian.scale))


# ----------------------------------------------------------------------------------------------
# Step sizes


def _power_iteration(hvp, key: jax.Array, dim: int, iterations: int, dtype) -> jax.Array:
    """Largest |eigenvalue| of the symmetric operator `hvp`, by power iteration from a random vector."""
    v = jax.random.normal(key, (dim,), dtype)
    v = v / jnp.linalg.norm(v)

    def body(_, v):
        w = hvp(v)
        return w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(dtype).tiny)

    v = jax.lax.fori_loop(0, iterations, body, v)
    return jnp.linalg.norm(hvp(v))


def pilot_step_sizes(
    target: Target,
    betas: Array,
    *,
    key: jax.Array,
    initial: Optional[Gaussian] = None,
    num_particles: int = 16,
    power_iterations: int = 20,
    safety: float = 0.5,
    max_step_size: float = 0.25,
    min_step_size: float = 1e-8,
) -> np.ndarray:
    """Per-step ULA step sizes from the curvature of the annealing path, by a short pilot run.

    The rule: `num_particles` particles start from `π0` (the declared initial distribution, or
    `initial`, a diagonal `Gaussian`). At step k = 1 … K, power iteration on Hessian–vector
    products of `log γ_k = β_k log γ + (1 − β_k) log π0` estimates the largest curvature magnitude
    at each particle; `λ_k` is the largest over the particles, and

        δ_k = clip(safety / λ_k, min_step_size, max_step_size).

    Then every particle takes one ULA step `x ← x + δ_k ∇log γ_k(x) + sqrt(2 δ_k) ε` so that the
    next curvature is measured where the path's mass is. ULA diverges for `δ λ > 2` along a
    direction of curvature λ; `safety = 0.5` puts each step at a quarter of that limit, which also
    covers the power iteration's underestimate of `λ_k` and keeps the kernel close to invariant.

    Args:
        target: the target.
        betas: the annealing schedule `β_0 … β_K`, shape `(K + 1,)`.
        key: PRNG key.
        initial: the initial distribution (default: the target's declared one).
        num_particles: particles of the pilot.
        power_iterations: Hessian–vector products per power iteration.
        safety: `δ_k λ_k`, the fraction of the curvature's inverse taken as the step.
        max_step_size: the cap (the paper's 0.25).
        min_step_size: the floor (a step of exactly zero would stop the sampler).

    Returns:
        `δ_1 … δ_K`, shape `(K,)`, float64.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2) / 0.02**2, dim=10)
        >>> d = pilot_step_sizes(t, jnp.linspace(0.0, 1.0, 65), key=jax.random.key(0))
        >>> d.shape, round(float(d[-1] * 2500), 2)  # δ_K λ_K = safety
        ((64,), 0.5)
    """
    betas = np.asarray(betas, dtype=np.float64)
    if betas.ndim != 1 or betas.size < 2:
        raise ValueError(f"betas must be the schedule β_0 … β_K, shape (K + 1,), got shape {betas.shape}")
    if not 0 < safety < 2:
        raise ValueError(f"safety must lie in (0, 2) (ULA is unstable at δ λ ≥ 2), got {safety}")
    if not 0 < min_step_size <= max_step_size:
        raise ValueError(f"need 0 < min_step_size <= max_step_size, got {min_step_size} and {max_step_size}")
    if initial is not None and initial.chol is not None:
        raise ValueError("pilot_step_sizes needs a diagonal initial Gaussian; whiten the target by a full one first")
    dtype = jnp.result_type(float)
    mean = jnp.asarray(target.initial_mean if initial is None else initial.mean, dtype)
    scale = jnp.asarray(target.initial_scale if initial is None else initial.scale, dtype)
    run = _pilot(
        target, int(num_particles), int(power_iterations), float(safety), float(max_step_size), float(min_step_size)
    )
    deltas = run(key, jnp.asarray(betas[1:], dtype), mean, scale)
    return np.asarray(deltas, dtype=np.float64)


@functools.lru_cache(maxsize=32)
def _pilot(target: Target, num: int, iterations: int, safety: float, max_step: float, min_step: float):
    grad_target = jax.grad(target.log_density)
    dim = target.dim

    @jax.jit
    def run(key, betas, mean, scale):
        dtype = mean.dtype
        k0, k_steps = jax.random.split(key)
        x0 = mean + scale * jax.random.normal(k0, (num, dim), dtype)

        def grad_k(beta, x):
            return beta * grad_target(x) - (1.0 - beta) * (x - mean) / scale**2

        def curvature(beta, x, k):
            def hvp(v):
                return beta * jax.jvp(grad_target, (x,), (v,))[1] - (1.0 - beta) * v / scale**2

            return _power_iteration(hvp, k, dim, iterations, dtype)

        def step(x, inputs):
            beta, k = inputs
            k_power, k_noise = jax.random.split(k)
            lam = jax.vmap(curvature, in_axes=(None, 0, 0))(beta, x, jax.random.split(k_power, num))
            lam = jnp.max(jnp.where(jnp.isfinite(lam), lam, 0.0))
            delta = jnp.clip(safety / lam, min_step, max_step)
            noise = jax.random.normal(k_noise, x.shape, dtype)
            moved = x + delta * jax.vmap(grad_k, in_axes=(None, 0))(beta, x) + jnp.sqrt(2 * delta) * noise
            # A particle whose move is not finite stays put: the pilot only measures curvature.
            x = jnp.where(jnp.all(jnp.isfinite(moved), axis=1, keepdims=True), moved, x)
            return x, delta

        _, deltas = jax.lax.scan(step, x0, (betas, jax.random.split(k_steps, betas.shape[0])))
        return deltas

    return run
