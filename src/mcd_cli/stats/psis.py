"""Pareto k̂: how heavy the right tail of the importance weights is (PSIS).

The shape of a generalised Pareto distribution (GPD) fitted to the largest weights (Vehtari,
Simpson, Gelman, Yao & Gabry, JMLR 2024), computed in log space so that no spread of the weights
underflows it. Larger k̂ is a heavier tail: above 0.5 the weights' variance is likely infinite,
above `pareto_k_limit(N)` the estimate itself cannot be trusted.

Example:
    >>> rng = np.random.default_rng(0)
    >>> round(pareto_k(rng.normal(size=10_000)), 1)  # log-normal weights, light tail
    0.1
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import softmax

# Pareto k̂ (Vehtari et al. 2024): above 0.5 the weights' variance is likely infinite, so the
# delta-method standard error loses its meaning; above 0.7 even the estimate converges too slowly
# to be useful at any practical N. With fewer than ~2,200 samples their limit is lower,
# 1 − 1/log10 N: a short tail fit is too noisy to vouch for 0.7.
PARETO_K_WARN = 0.5
PARETO_K_BAD = 0.7

# The tail fit needs this many distinct weights strictly above the tail cutoff (the PSIS tail
# length rule reaches 5 at N = 21); with fewer the GPD has nothing to fit, and k̂ = inf.
PARETO_MIN_TAIL = 5

# Weights equal to float precision are the best case (a proposal equal to the target), not a tail
# too short to fit: log weights computed in float32 from densities of size |log w| differ by a few
# units in the last place (2^-23 |log w|). Tail log weights within 64 such units, relative to
# max(1, |log w|), count as one point mass: k̂ = −inf. A tail that narrow moves log Ẑ by less than
# the rounding of the log weights themselves.
EQUAL_WEIGHTS_RTOL = 2.0**-17


def _log1mexp(a: np.ndarray) -> np.ndarray:
    """`log(1 − e^a)` for `a ≤ 0`, accurate at both ends (Mächler 2012); −inf at a = 0."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(a > -math.log(2.0), np.log(-np.expm1(a)), np.log1p(-np.exp(a)))


def _gpd_fit_log(log_x: np.ndarray) -> tuple[float, float]:
    """Shape k and scale σ of a generalised Pareto fitted to positive exceedances given by their logs.

    The empirical-Bayes estimate of Zhang & Stephens (2009) with the weakly informative prior of
    PSIS (Vehtari et al. 2024), as in ArviZ's `_gpdfit`, but without ever forming the
    exceedances. The fit is scale-free, so take `x_max = 1`. Its grid is
    `b_j = 1/x_max − c_j / (3 x_q)` with `c_j = sqrt(m/(j − ½)) − 1 > 0` and `x_q` the first
    quartile, so each `1 − b_j x_i = (1 − x_i) + c_j x_i / (3 x_q)` is a sum of two non-negative
    terms and its log is a `logaddexp`; the posterior mean of `b` is the same form with
    `c̄ = Σ w_j c_j` because the weights sum to one.

    Args:
        log_x: logs of the positive exceedances, sorted ascending.

    Returns:
        `(k, σ)`: k with PSIS's shrinkage towards 0.5; σ = −k/b (before the shrinkage, as in
        ArviZ) in units of the largest exceedance.
    """
    lx = log_x - log_x[-1]
    n = lx.size
    m = 30 + int(math.sqrt(n))
    c = np.sqrt(m / (np.arange(1, m + 1) - 0.5)) - 1.0
    log_xq = lx[int(n / 4 + 0.5) - 1]
    lower = _log1mexp(lx)  # log(1 − x_i / x_max)

    def k_of(log_c):  # k(b) = mean log(1 − b x) for b = 1 − e^{log_c − log 3 − log x_q}
        a = np.asarray(log_c) - math.log(3.0) - log_xq
        return np.logaddexp(lower, a[..., None] + lx).mean(axis=-1), a

    k_grid, a = k_of(np.log(c))
    # log|b| = log|1 − e^a|; b and k share their sign, so −b/k > 0.
    with np.errstate(divide="ignore"):
        log_abs_b = np.where(a < 0, _log1mexp(np.minimum(a, 0.0)), a + _log1mexp(-np.abs(a)))
        profile = n * (log_abs_b - np.log(np.abs(k_grid)) - k_grid - 1.0)
    # b = 0 exactly (a = 0) gives 0/0; the grid point then carries no weight.
    weights = softmax(np.where(np.isnan(profile), -np.inf, profile))
    keep = weights >= 10 * np.finfo(float).eps
    weights = weights[keep] / weights[keep].sum()
    k, a = k_of(math.log(float(np.sum(c[keep] * weights))))
    k = float(k)
    with np.errstate(over="ignore"):
        b = -float(np.expm1(a))  # −inf when the tail is extremely heavy: σ → 0
    sigma = -k / b if b != 0.0 else float("nan")
    return float((n * k + 10 * 0.5) / (n + 10)), sigma


def tail_length(num_samples: int) -> int:
    """PSIS tail length `M = ceil(min(N/5, 3√N))`: how many of the largest weights k̂ is fitted to.

    Example:
        >>> tail_length(100), tail_length(16384)
        (20, 384)
    """
    return int(math.ceil(min(0.2 * num_samples, 3.0 * math.sqrt(num_samples))))


def _tail_fit(log_w: np.ndarray) -> tuple[float, float, int]:
    """`(k̂, log σ̂, M)`: the GPD fitted to the tail of `log_w` (see `pareto_k`), its scale σ̂ in
    the weights' own units (log; −inf when there is no tail, nan when it cannot be fitted) and the
    tail length M."""
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    if np.any(np.isnan(lw) | (lw == np.inf)):
        raise ValueError("pareto_k needs log weights without NaN or +inf; drop them first")
    n = lw.size
    tail_len = tail_length(n)
    if tail_len < PARETO_MIN_TAIL:
        return float("inf"), math.nan, tail_len
    lw = np.sort(lw)
    cutoff = lw[-tail_len - 1]
    if lw[-1] - cutoff <= EQUAL_WEIGHTS_RTOL * max(1.0, abs(lw[-1])):  # also all −inf: nan, not ≤
        return float("-inf"), float("-inf"), tail_len
    tail = lw[-tail_len:]
    tail = tail[tail > cutoff]
    if tail.size == 0:
        return float("-inf"), float("-inf"), tail_len
    if np.unique(tail).size < PARETO_MIN_TAIL:
        return float("inf"), math.nan, tail_len
    # log(w_i − w_cut) = log w_i + log(1 − w_cut/w_i); exact for a zero cutoff (−inf).
    log_x = tail + _log1mexp(cutoff - tail)
    k, sigma = _gpd_fit_log(log_x)
    log_sigma = math.log(sigma) + float(log_x[-1]) if sigma > 0 else math.nan
    return k, log_sigma, tail_len


def pareto_k(log_w: np.ndarray) -> float:
    """PSIS Pareto k̂ of the right tail of the weights (larger = heavier tail).

    Fitted to the weights among the `M = ceil(min(N/5, 3√N))` largest that lie strictly above
    the next one (the cutoff), as exceedances `w_i − w_cut = w_cut · expm1(log w_i − log w_cut)`
    kept in log space: any spread of log weights is fine. Zero weights (`−inf`) count in N.

    Returns:
        k̂; `inf` when there are fewer than `PARETO_MIN_TAIL` distinct weights above the cutoff
        (too few to fit, e.g. one or two dominant weights, or N < 21); `−inf` when the M + 1
        largest weights are all equal, to float precision (`EQUAL_WEIGHTS_RTOL`): the exceedances
        are a point mass at 0, the limit of a GPD as k → −∞ (e.g. a proposal equal to the target).

    Raises:
        ValueError: on NaN or +inf log weights (`summarize` drops and counts them first).

    Example:
        >>> pareto_k(np.zeros(100)), pareto_k(np.r_[np.zeros(99), 50.0])
        (-inf, inf)
        >>> pareto_k(np.float32(-496.6) + np.arange(100) * np.spacing(np.float32(496.6)))  # float32 rounding
        -inf
    """
    return _tail_fit(log_w)[0]


def tail_shortfall(log_w: np.ndarray) -> float:
    """The share of Ẑ that N weights of this tail typically miss: how much the tail matters.

    k̂ is the tail's shape; this is its size. With the GPD of `pareto_k` (shape k, scale σ over
    the cutoff, fitted to the M largest of N weights, so the tail holds a share p = M/N of the
    draws), the weights beyond the sample's 1 − 1/N quantile, where a sample of N typically has
    none, hold the share

        δ = σ · [(M^k − 1)/k + M^k/(1 − k)] / (N · w̄)

    of E w in excess of the cutoff: p·∫ over the GPD beyond its survival 1/M, the quantile
    (σ/k)(M^k − 1) plus the mean excess beyond it, σ M^k/(1 − k). A typical run's log Ẑ is
    about δ low, and its spread does not show it: for k > 1/2 the weights' variance is infinite and
    both the estimate's error and its standard error are ruled by draws it has not made. δ falls
    with N as N^(k − 1), slower than the standard error's N^(−1/2) above k = 1/2, and scales with
    σ/w̄: a heavy tail far below the body's weight (ESS/N near 1) misses little. `smc.tail_verdict`
    compares δ with the standard error (`TAIL_SHORTFALL_SE`).

    Returns:
        δ ≥ 0; 0 when there is no tail (`pareto_k` −inf), `inf` for k̂ ≥ 1 or a tail that cannot
        be fitted.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> light = rng.normal(scale=0.1, size=4096)  # log-normal weights, ESS/N 0.99
        >>> bool(tail_shortfall(light) < 0.01)
        True
        >>> heavy = np.log1p(rng.pareto(1.0 / 0.6, size=4096))  # tail index 0.6, weights of mean 2.5
        >>> bool(0.01 < tail_shortfall(heavy) < 0.3)
        True
    """
    return pareto_tail(log_w)[1]


def pareto_tail(log_w: np.ndarray) -> tuple[float, float]:
    """`(pareto_k(log_w), tail_shortfall(log_w))` from one fit of the tail."""
    k, log_sigma, tail_len = _tail_fit(log_w)
    if k == -math.inf:
        return k, 0.0
    if not (k < 1.0 and math.isfinite(log_sigma)):
        return k, math.inf
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    top = float(np.max(lw))
    log_mean = top + math.log(float(np.mean(np.exp(lw - top))))
    log_m = math.log(tail_len)
    quantile = math.expm1(k * log_m) / k if abs(k) > 1e-12 else log_m
    bracket = quantile + math.exp(k * log_m) / (1.0 - k)
    return k, math.exp(log_sigma + math.log(bracket) - math.log(lw.size) - log_mean)


def pareto_k_limit(num_samples: int) -> float:
    """The largest k̂ for which N samples can be trusted: `min(1 − 1/log10 N, 0.7)`.

    Example:
        >>> pareto_k_limit(100), pareto_k_limit(16384)
        (0.5, 0.7)
    """
    if num_samples <= 1:
        return float("-inf")
    return min(1.0 - 1.0 / math.log10(num_samples), PARETO_K_BAD)
