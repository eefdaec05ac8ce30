"""The Gaussian every fit returns, the fit's record, and the importance-sampling check of a fit.

Every fit is checked by importance sampling with its Gaussian as the proposal (`ProposalCheck`:
log Ẑ, ESS, Pareto k̂). A k̂ above `K_HAT_WARN` means the Gaussian misses part of the target's mass
(several modes, a funnel, heavy tails); the fit then warns (`InitFit.warnings`, one line each).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp  # of float64 weights on the host: jax's would round them to float32

from mcd_cli.stats import pareto_k
from mcd_cli.targets.base import Target

Array = Any

K_HAT_WARN = 0.7  # PSIS: above this, the proposal misses part of the target's mass
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


def starting_points(target: Target, key: jax.Array, restarts: int) -> jax.Array:
    """The declared initial mean and `restarts` draws from the declared initial distribution.

    The starts of the fits' searches, shape `(restarts + 1, d)`, in the working precision.
    """
    dtype = jnp.result_type(float)
    mean0 = jnp.asarray(target.initial_mean, dtype=dtype)
    scale0 = jnp.asarray(target.initial_scale, dtype=dtype)
    return jnp.concatenate([mean0[None], mean0 + scale0 * jax.random.normal(key, (restarts, target.dim), dtype)])


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
        pareto_k=0.0 if ess > 0.99 * num_samples else float(pareto_k(finite)),
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
