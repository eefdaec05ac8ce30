"""log Z from importance weights: the estimate, its standard error, ESS, ELBO and Pareto k̂.

With N log weights `log w_i`:

- `log Ẑ = logsumexp(log w) − log N`; `Ẑ` is unbiased for Z and `log Ẑ` is a lower bound of
  log Z in expectation (Jensen);
- `ESS = (Σ w)² / Σ w²` and the delta-method standard error of `log Ẑ`, `sqrt(1/ESS − 1/N)`;
- `ELBO = mean(log w)`;
- Pareto k̂: the shape of a generalised Pareto distribution fitted to the largest weights (PSIS,
  Vehtari et al. 2024). Above 0.7 the weights are too heavy-tailed for the standard error (and
  often the estimate) to be trusted.

Weights are generated in fixed-size chunks, so memory does not grow with N beyond the N scalars
kept for the diagnostics, and the shape (hence the compiled program) is the same for every chunk.
The key of particle `i` is `fold_in(key, i)`: results do not depend on the chunk size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
from scipy.special import logsumexp, softmax

from mcd_cli.errors import RunFailed


# Above this k̂ the weights' tail is too heavy for the standard error to mean much.
PARETO_K_WARN = 0.7


class AllWeightsNonFinite(RunFailed):
    """No importance weight was finite: there is nothing to estimate from."""


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One log Z estimate and its diagnostics.

    `num_samples` counts the weights used; `num_nonfinite` the ones dropped (NaN or +inf).
    A weight of zero (`log w = −inf`) is a legitimate sample and is used.
    """

    log_z: float
    log_z_stderr: float
    elbo: float
    ess: float
    num_samples: int
    pareto_k: float
    num_nonfinite: int = 0
    seconds: float = 0.0

    @property
    def trustworthy(self) -> bool:
        """Whether the weights' tail is light enough (k̂ ≤ 0.7) for the standard error."""
        return self.pareto_k <= PARETO_K_WARN


def _gpd_fit(exceedances: np.ndarray) -> float:
    """Shape k of a generalised Pareto fitted to sorted positive exceedances.

    The empirical-Bayes estimate of Zhang & Stephens (2009) with the weakly informative prior of
    Vehtari et al. (PSIS): a profile over a grid of `b = −k/σ`, weighted by its likelihood.
    """
    x = exceedances
    n = x.size
    grid = 30 + int(math.sqrt(n))
    b = 1.0 - np.sqrt(grid / (np.arange(1, grid + 1) - 0.5))
    b = b / (3.0 * x[int(n / 4 + 0.5) - 1]) + 1.0 / x[-1]
    k_grid = np.log1p(-b[:, None] * x).mean(axis=1)
    profile = n * (np.log(-b / k_grid) - k_grid - 1.0)
    weights = softmax(profile)  # = 1 / Σ_j exp(profile_j − profile_i), without overflow
    keep = weights >= 10 * np.finfo(float).eps
    weights = weights[keep] / weights[keep].sum()
    b_post = np.sum(b[keep] * weights)
    k = np.log1p(-b_post * x).mean()
    return float((n * k + 10 * 0.5) / (n + 10))


def pareto_k(log_w: np.ndarray) -> float:
    """PSIS Pareto k̂ of the right tail of the weights (larger = heavier tail).

    Fitted to the `M = ceil(min(N/5, 3√N))` largest weights above the next one. Returns `inf`
    when the tail is too short or degenerate to fit.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> round(pareto_k(rng.normal(size=10_000)), 1)  # log-normal weights, light tail
        0.1
    """
    lw = np.asarray(log_w, dtype=np.float64)
    lw = lw[np.isfinite(lw)]
    n = lw.size
    tail_len = int(math.ceil(min(0.2 * n, 3.0 * math.sqrt(n))))
    if tail_len < 5 or n <= tail_len:
        return float("inf")
    lw = np.sort(lw - lw.max())
    tail = lw[-tail_len:]
    cutoff = lw[-tail_len - 1]
    exceedances = np.exp(tail) - np.exp(cutoff)
    if not np.all(exceedances > 0):
        return float("inf") if np.all(exceedances == 0) else _gpd_fit(exceedances[exceedances > 0])
    return _gpd_fit(exceedances)


def summarize(log_w: np.ndarray, seconds: float = 0.0) -> Estimate:
    """All statistics of a vector of log weights (computed in float64).

    Raises:
        AllWeightsNonFinite: when no weight can be used.

    Example:
        >>> e = summarize(np.zeros(100))
        >>> e.log_z, e.log_z_stderr, round(e.ess, 9)
        (0.0, 0.0, 100.0)
    """
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    usable = ~np.isnan(lw) & (lw != np.inf)
    num_nonfinite = int(lw.size - usable.sum())
    lw = lw[usable]
    if lw.size == 0 or not np.any(np.isfinite(lw)):
        raise AllWeightsNonFinite(
            f"all {num_nonfinite + lw.size} importance weights are zero or not finite: the sampler "
            "diverged or the target has no mass where the sampler goes; try smaller steps, more "
            "training, or check the target with `mcd check`"
        )
    n = lw.size
    lse = logsumexp(lw)
    log_z = float(lse - math.log(n))
    ess = float(math.exp(2.0 * lse - logsumexp(2.0 * lw)))
    stderr = math.sqrt(max(1.0 / ess - 1.0 / n, 0.0))
    finite = lw[np.isfinite(lw)]
    return Estimate(
        log_z=log_z,
        log_z_stderr=stderr,
        elbo=float(np.mean(finite)) if finite.size == n else float("-inf"),
        ess=ess,
        num_samples=n,
        pareto_k=pareto_k(finite),
        num_nonfinite=num_nonfinite,
        seconds=seconds,
    )


def combine(values: Sequence[float]) -> tuple[float, Optional[float]]:
    """Mean and standard error (`sd / √R`) of R independent log Z estimates; stderr is None if R < 2."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("combine needs at least one value")
    if v.size < 2:
        return float(v.mean()), None
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))
