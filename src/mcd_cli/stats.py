"""log Z from importance weights, with diagnostics that say when not to believe it.

With N log weights `log w_i` (NaN and +inf are dropped and counted; `−inf`, a zero weight, is a
legitimate sample):

- `log Ẑ = logsumexp(log w) − log N`; `Ẑ` is unbiased for Z, `log Ẑ` biased low (Jensen);
- `ESS = (Σ w)² / Σ w²`; the delta-method standard error `sqrt(1/ESS − 1/N)`;
- `ELBO = mean(log w)`;
- Pareto k̂: the shape of a generalised Pareto distribution (GPD) fitted to the largest weights
  (PSIS; Vehtari, Simpson, Gelman, Yao & Gabry, JMLR 2024), computed in log space so that no
  spread of the weights underflows it.

Every estimate gets a verdict, `Status.OK`, `WARN` or `UNRELIABLE`, with short reasons:

==========================  ===================================  ==================================
check                       warn                                 unreliable
==========================  ===================================  ==================================
Pareto k̂                    `0.5 < k̂ ≤ 0.7`                     `k̂ > min(1 − 1/log10 N, 0.7)`, or
                                                                 no tail to fit (`k̂ = inf`)
ESS                         `ESS < ESS_WARN` (100)               `ESS < ESS_MIN` (10)
NaN / +inf weights dropped  any                                  `≥ NONFINITE_MAX_FRAC` (10 %)
log Ẑ − ELBO (gap, over    `4·gap > log N − GAP_MARGIN`         `2·gap > log N − GAP_MARGIN`
nonzero weights, from
max(ELBO, median log w))
==========================  ===================================  ==================================

When the verdict is unreliable the delta method is not valid: `log_z_stderr` is None and
`log_z_stderr_method` is `"none"`; the raw value stays in `delta_stderr`. `combine_estimates`
turns R repeated estimates into the headline: the spread of the repeats (`sd/√R`, method
`"replicates"`) when R ≥ 2, else the run's own standard error, with the per-run value beside it and
a flag when the two disagree by more than their own uncertainties allow.

API: `summarize(log_w, seconds) -> Estimate` (all of the above for one run);
`combine_estimates(estimates) -> Combined` (R repeats); `advice(estimate_or_combined) -> str` (one
line of what to try); the pieces `pareto_k`, `tail_length`, `pareto_k_limit`, `ess_floor`,
`delta_stderr_uncertainty`, `verdict`, `stderr_disagreement`, `worst`, `combine(values)`; the
`Status` enum, `AllWeightsNonFinite`, and the thresholds as module constants. All host-side
float64 numpy/scipy: they run once per estimate.

Example:
    >>> rng = np.random.default_rng(0)
    >>> good = summarize(rng.normal(size=4096) * 0.5)
    >>> good.status, good.log_z_stderr_method
    (<Status.OK: 'ok'>, 'delta')
    >>> bad = summarize(rng.normal(size=16384) * 10_000)  # weights spread over 10^4 nats
    >>> bad.status, bad.log_z_stderr, bad.pareto_k > 100
    (<Status.UNRELIABLE: 'unreliable'>, None, True)
    >>> advice(bad).startswith("the sampler does not cover the target")
    True
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Optional, Sequence, Union

import numpy as np
import scipy.stats
from scipy.special import polygamma, softmax

from mcd_cli.errors import RunFailed

# Pareto k̂ (Vehtari et al. 2024): above 0.5 the weights' variance is likely infinite, so the
# delta-method standard error loses its meaning; above 0.7 even the estimate converges too slowly
# to be useful at any practical N. With fewer than ~2,200 samples their limit is lower,
# 1 − 1/log10 N: a short tail fit is too noisy to vouch for 0.7.
PARETO_K_WARN = 0.5
PARETO_K_BAD = 0.7

# The tail fit needs this many distinct weights strictly above the tail cutoff (the PSIS tail
# length rule reaches 5 at N = 21); with fewer the GPD has nothing to fit, and k̂ = inf.
PARETO_MIN_TAIL = 5

# ESS floor, absolute: below 10 effective draws the mass sits on a handful of particles, the
# normal approximation behind any ± interval has no support and the delta SE (≤ 1/√ESS) is
# bounded whatever the error. Not relative to N: a large run with ESS/N small is fine as long as
# ESS itself is large (N = 10⁶, ESS = 10³ is a good estimate); whether N is large enough for the
# weights' spread is the gap rule's question. Between 10 and 100 the SE's own relative error,
# about 1/sqrt(2 ESS) for the best-behaved weights, is 7 to 22 %: workable, worth a warning.
ESS_MIN = 10.0
ESS_WARN = 100.0

# Dropping a fraction f of the particles (NaN or +inf weights) biases log Ẑ by up to log(1 − f)
# when the dropped region holds its share of the mass; at 10 % that is 0.1 nats, more than the
# standard error of a typical run.
NONFINITE_MAX_FRAC = 0.1

# Gap rule: with log-normal weights, log w ~ N(μ, σ²), log Z − ELBO = σ²/2 and the relative
# variance of Ẑ is (e^{σ²} − 1)/N. The delta method linearises log Ẑ ≈ log Z + (Ẑ/Z − 1); it
# needs that relative sd well below 1. With σ̂² = 2·(log Ẑ − ELBO), "unreliable when
# σ̂² > log N − log 4" says "when the relative sd of Ẑ would exceed 1/2", where the neglected
# second-order term (a bias of −relvar/2) already reaches a quarter of the standard error.
# The SE itself is a sample variance of w, which needs the sample to reach where w² has its mass
# (log w = μ + 2σ², probability ≈ e^{−2σ²}): N ≫ e^{2σ²}. So the same margin on 4·gap gives a
# warning: without it, runs at log-normal σ = 2 and N ≤ 2,000 passed as "ok" and missed log Z by
# more than 4 SEs in 4-10 % of cases (benchmarks/stats_calibration.py).
GAP_MARGIN = math.log(4.0)

# Replicate and per-run SEs disagree when `stderr_disagreement` (a z score) exceeds DISAGREE in
# size; a combination is unreliable when the repeats scatter more than claimed by WILD.
STDERR_DISAGREE_Z = 2.0
STDERR_WILD_Z = 4.0


class Status(str, enum.Enum):
    """How far an estimate (and its standard error) can be trusted."""

    OK = "ok"
    WARN = "warn"
    UNRELIABLE = "unreliable"


_RANK = {Status.OK: 0, Status.WARN: 1, Status.UNRELIABLE: 2}


def worst(statuses: Sequence[Status]) -> Status:
    """The least trustworthy of `statuses` (OK for none).

    Example:
        >>> worst([Status.OK, Status.WARN]).value
        'warn'
    """
    return max(statuses, key=_RANK.__getitem__, default=Status.OK)


class AllWeightsNonFinite(RunFailed):
    """No importance weight was finite: there is nothing to estimate from."""


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One log Z estimate and its diagnostics.

    Attributes:
        log_z: `logsumexp(log w) − log N`.
        log_z_stderr: the standard error to report, or None when there is none that means
            anything (status unreliable).
        log_z_stderr_method: `"delta"`, `"smc-genealogy"` (an SMC run) or `"none"`.
        delta_stderr: the delta-method value `sqrt(1/ESS − 1/N)`, always computed.
        delta_stderr_uncertainty: the standard deviation of `delta_stderr` as an estimate, from
            the sample fourth moment of the weights (see `delta_stderr_uncertainty`).
        elbo: `mean(log w)` (−inf when a weight is zero).
        ess: `(Σ w)² / Σ w²`.
        num_samples: weights used (N); `num_nonfinite`: NaN or +inf weights dropped.
        pareto_k: PSIS k̂ (`inf` when no tail can be fitted, `−inf` when the M + 1 largest weights
            are all equal, i.e. there is no tail; see `pareto_k`).
        seconds: time taken to produce the weights.
        status, reasons: the verdict (`verdict`).
        weights_status: an SMC run's verdict of its final weights alone (before the genealogy is
            judged), which `merge_runs` needs when the populations' spread replaces a collapsed
            genealogy; None for importance sampling.
    """

    log_z: float
    log_z_stderr: Optional[float]
    log_z_stderr_method: str
    delta_stderr: float
    delta_stderr_uncertainty: float
    elbo: float
    ess: float
    num_samples: int
    pareto_k: float
    num_nonfinite: int = 0
    seconds: float = 0.0
    status: Status = Status.OK
    reasons: tuple[str, ...] = ()
    weights_status: Optional[Status] = None

    @property
    def trustworthy(self) -> bool:
        """Whether the estimate and its standard error can be used (status is not unreliable)."""
        return self.status is not Status.UNRELIABLE


def _scaled_weights(log_w: np.ndarray) -> tuple[float, np.ndarray]:
    """`(m, w)` with `w = exp(log w − m)`, `m` the largest log weight: `w ≤ 1`, one is exactly 1,
    and equal log weights give exactly equal weights (ESS = N and SE = 0 hold exactly)."""
    m = float(np.max(log_w))
    return m, np.exp(log_w - m)


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


def pareto_k(log_w: np.ndarray) -> float:
    """PSIS Pareto k̂ of the right tail of the weights (larger = heavier tail).

    Fitted to the weights among the `M = ceil(min(N/5, 3√N))` largest that lie strictly above
    the next one (the cutoff), as exceedances `w_i − w_cut = w_cut · expm1(log w_i − log w_cut)`
    kept in log space: any spread of log weights is fine. Zero weights (`−inf`) count in N.

    Returns:
        k̂; `inf` when there are fewer than `PARETO_MIN_TAIL` distinct weights above the cutoff
        (too few to fit, e.g. one or two dominant weights, or N < 21); `−inf` when the M + 1
        largest weights are all equal: the exceedances are a point mass at 0, the limit of a
        GPD as k → −∞ (e.g. constant weights).

    Raises:
        ValueError: on NaN or +inf log weights (`summarize` drops and counts them first).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> round(pareto_k(rng.normal(size=10_000)), 1)  # log-normal weights, light tail
        0.1
        >>> pareto_k(np.zeros(100)), pareto_k(np.r_[np.zeros(99), 50.0])
        (-inf, inf)
    """
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    if np.any(np.isnan(lw) | (lw == np.inf)):
        raise ValueError("pareto_k needs log weights without NaN or +inf; drop them first")
    n = lw.size
    tail_len = tail_length(n)
    if tail_len < PARETO_MIN_TAIL:
        return float("inf")
    lw = np.sort(lw)
    cutoff = lw[-tail_len - 1]
    tail = lw[-tail_len:]
    tail = tail[tail > cutoff]
    if tail.size == 0:
        return float("-inf")
    if np.unique(tail).size < PARETO_MIN_TAIL:
        return float("inf")
    # log(w_i − w_cut) = log w_i + log(1 − w_cut/w_i); exact for a zero cutoff (−inf).
    log_x = tail + _log1mexp(cutoff - tail)
    return _gpd_fit_log(log_x)[0]


HISTOGRAM_BINS = 60
HISTOGRAM_SPAN = 4.0


@dataclasses.dataclass(frozen=True)
class WeightSummary:
    """A bounded summary of N log weights, enough to draw them: a histogram and the fitted tail.

    Its size does not grow with N beyond the PSIS tail (`M ≤ 3√N` weights), so a run keeps it
    instead of the weights.

    Attributes:
        edges, counts: a histogram of the finite log weights (`HISTOGRAM_BINS` bins), from
            `max(min, median − HISTOGRAM_SPAN · (max − median))` to the largest.
        num_below: finite weights below the histogram's range (negligible ones), not in it.
        num_zero: weights that are exactly zero (log w = −inf), left out of the histogram.
        num_samples: N, the weights summarised (NaN and +inf already dropped).
        log_cutoff: log w at the PSIS tail cutoff (None when there is no tail to fit).
        tail: the log weights above the cutoff, ascending (the exceedances k̂ is fitted to).
        pareto_k: k̂ of those exceedances (`pareto_k`); `pareto_sigma`: the fitted GPD scale of
            `w − w_cut`, in units of the largest weight (None without a fit).
    """

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    num_below: int
    num_zero: int
    num_samples: int
    log_cutoff: Optional[float]
    tail: tuple[float, ...]
    pareto_k: float
    pareto_sigma: Optional[float]

    def tail_counts(self, edges: Sequence[float]) -> np.ndarray:
        """Expected counts of the fitted tail in the log-weight bins `edges` (0 below the cutoff).

        The tail holds the `len(tail)` largest weights; each lies above `w_cut` by a GPD(k̂, σ)
        exceedance, so bin `[y₀, y₁)` expects `M · (F(e^y₁ − w_cut) − F(e^y₀ − w_cut))`, with
        weights in units of the largest.
        """
        e = np.asarray(edges, dtype=np.float64)
        if self.log_cutoff is None or self.pareto_sigma is None or not self.tail or not self.pareto_sigma > 0:
            return np.zeros(e.size - 1)
        top = self.tail[-1]
        x = np.clip(np.exp(np.minimum(e, top) - top) - math.exp(self.log_cutoff - top), 0.0, None)
        cdf = scipy.stats.genpareto.cdf(x, c=self.pareto_k, scale=self.pareto_sigma)
        return len(self.tail) * np.diff(cdf)


def summarize_weights(log_w: np.ndarray, bins: int = HISTOGRAM_BINS) -> WeightSummary:
    """The `WeightSummary` of a vector of log weights (NaN and +inf are dropped first).

    Example:
        >>> s = summarize_weights(np.random.default_rng(0).normal(size=4096))
        >>> sum(s.counts), len(s.tail), round(s.pareto_k, 1)
        (4096, 192, 0.1)
    """
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    lw = lw[~np.isnan(lw) & (lw != np.inf)]
    finite_lw = lw[np.isfinite(lw)]
    num_below = 0
    if finite_lw.size == 0:
        counts, edges = np.zeros(bins, dtype=int), np.linspace(-1.0, 1.0, bins + 1)
    else:
        # The estimate lives in the upper part of the weights; a long lower tail of negligible
        # weights would squeeze it into a few bins, so the range stops HISTOGRAM_SPAN times the
        # median-to-maximum distance below the median (all of it for normal log weights).
        top, median = float(finite_lw.max()), float(np.median(finite_lw))
        low = max(float(finite_lw.min()), median - HISTOGRAM_SPAN * (top - median))
        num_below = int(np.sum(finite_lw < low))
        counts, edges = np.histogram(finite_lw, bins=bins, range=(low, top) if top > low else None)
    k, cutoff, tail, sigma = float("inf"), None, np.empty(0), None
    n, tail_len = lw.size, tail_length(lw.size)
    if tail_len >= PARETO_MIN_TAIL:
        ordered = np.sort(lw)
        cut = ordered[-tail_len - 1]
        tail = ordered[-tail_len:]
        tail = tail[tail > cut]
        k = pareto_k(lw)
        if tail.size and np.unique(tail).size >= PARETO_MIN_TAIL:
            _, sigma_x = _gpd_fit_log(tail + _log1mexp(cut - tail))
            # σ was fitted in units of the largest exceedance, w_max − w_cut; rescale to w_max.
            sigma = sigma_x * -math.expm1(cut - tail[-1]) if math.isfinite(sigma_x) else None
            cutoff = float(cut) if math.isfinite(cut) else None
    return WeightSummary(
        edges=tuple(float(e) for e in edges),
        counts=tuple(int(c) for c in counts),
        num_below=num_below,
        num_zero=int(np.sum(lw == -np.inf)),
        num_samples=int(n),
        log_cutoff=cutoff,
        tail=tuple(float(t) for t in tail),
        pareto_k=float(k),
        pareto_sigma=None if sigma is None else float(sigma),
    )


def pareto_k_limit(num_samples: int) -> float:
    """The largest k̂ for which N samples can be trusted: `min(1 − 1/log10 N, 0.7)`.

    Example:
        >>> pareto_k_limit(100), pareto_k_limit(16384)
        (0.5, 0.7)
    """
    if num_samples <= 1:
        return float("-inf")
    return min(1.0 - 1.0 / math.log10(num_samples), PARETO_K_BAD)


def ess_floor(num_samples: int) -> float:
    """The ESS below which an estimate is unreliable (the same for every N: `ESS_MIN`)."""
    del num_samples  # the floor is absolute on purpose: see ESS_MIN
    return ESS_MIN


def delta_stderr_uncertainty(log_w: np.ndarray) -> float:
    """Standard deviation of the delta-method standard error, as an estimate, from the weights.

    The delta SE is `sqrt(g/N)` with `g = m₂/m₁² − 1`, `m_j` the sample moments of the weights.
    The delta method once more, with the weights scaled to mean 1 and `c_j` the central moments
    of `r = w − 1`, gives `N·Var(g) ≈ c₄ − c₂² + 4c₂³ − 4c₂c₃` (the last two terms from the
    sample mean in the denominator; without them the result is 20 % too large at σ = 0.5 for
    log-normal weights), and the SE's sd is `se · sd(g) / (2g)`. Bootstrap-free and
    deterministic; like the SE it assumes a finite fourth moment (k̂ < 1/4 in theory, small k̂ in
    practice), which is where it is used: the verdict withholds the SE long before k̂ = 0.7.

    Example:
        >>> delta_stderr_uncertainty(np.zeros(10))
        0.0
    """
    _, w = _scaled_weights(np.asarray(log_w, dtype=np.float64).ravel())
    n = w.size
    r = w * (n / np.sum(w)) - 1.0
    c2, c3, c4 = (float(np.mean(r**j)) for j in (2, 3, 4))
    if c2 <= 0.0:
        return 0.0
    var_g = max(c4 - c2**2 + 4.0 * c2**3 - 4.0 * c2 * c3, 0.0) / n
    return math.sqrt(c2 / n) * math.sqrt(var_g) / (2.0 * c2)


def verdict(
    log_w: np.ndarray, ess: float, pareto_k: float, num_nonfinite: int = 0
) -> tuple[Status, tuple[str, ...]]:
    """Status and reasons for the estimate from the usable log weights `log_w`.

    The thresholds are the module constants (see the module docstring for the table and the
    constants for why). The gap rules, `2·(log Ẑ − ELBO) > log N − GAP_MARGIN` for the estimate
    and `4·(log Ẑ − ELBO) > …` for its standard error (a warning), are derived for log-normal
    weights. The gap also grows when some particles carry negligible weight (a lower
    tail of log w, or zero weights from a constrained target), which costs samples (ESS sees it)
    but does not bias log Ẑ. So the rule runs on the nonzero weights and uses the ELBO or the
    median log weight, whichever is higher: the two agree for log-normal weights, and the median
    ignores any lower tail holding less than half the particles. When more than half the
    particles sit far below the rest the rule fires: from the weights alone that cannot be told
    apart from a tail the sample has not reached.

    Args:
        log_w: log weights without NaN or +inf (zero weights, −inf, allowed).
        ess: their ESS; pareto_k: their k̂.
        num_nonfinite: NaN or +inf weights dropped before (they count in the fraction).

    Example:
        >>> lw = np.random.default_rng(0).normal(size=1000) * 3.0
        >>> s, reasons = verdict(lw, 5.0, 1.2)
        >>> s.value, len(reasons)
        ('unreliable', 3)
    """
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    n = lw.size
    bad: list[str] = []
    warn: list[str] = []
    total = n + num_nonfinite
    if num_nonfinite:
        frac = num_nonfinite / total
        text = f"{num_nonfinite} of {total} weights NaN or +inf, dropped ({frac:.1%})"
        (bad if frac >= NONFINITE_MAX_FRAC else warn).append(text)
    limit = pareto_k_limit(n)
    if math.isinf(pareto_k) and pareto_k > 0:
        if tail_length(n) < PARETO_MIN_TAIL:
            bad.append(f"{n} samples: too few to fit the weights' tail (needs 21 or more)")
        else:
            bad.append(f"Pareto k̂ not fittable: fewer than {PARETO_MIN_TAIL} distinct weights in the tail")
    elif pareto_k > limit:
        bad.append(f"Pareto k̂ {pareto_k:.2f} > {limit:.2f}: tail too heavy")
    elif pareto_k > PARETO_K_WARN:
        warn.append(f"Pareto k̂ {pareto_k:.2f} > {PARETO_K_WARN}: variance may be infinite")
    if ess < ess_floor(n):
        bad.append(f"ESS {ess:.1f} of {n}, below {ESS_MIN:g}")
    elif ess < ESS_WARN:
        warn.append(f"ESS {ess:.1f} of {n}, below {ESS_WARN:g}: the standard error is itself rough")
    positive = lw[np.isfinite(lw)]
    if positive.size >= 2:
        log_n = math.log(positive.size)
        typical = max(float(positive.mean()), float(np.median(positive)))
        m, w = _scaled_weights(positive)
        gap = m + math.log(float(np.mean(w))) - typical
        if 2.0 * gap > log_n - GAP_MARGIN:
            bad.append(
                f"log Ẑ exceeds the ELBO (or median log w) by {gap:.3g} nats: log-normal "
                f"weights this spread need N ≫ e^{2 * gap:.3g}, have {positive.size}"
            )
        elif 4.0 * gap > log_n - GAP_MARGIN:
            warn.append(
                f"log Ẑ exceeds the ELBO (or median log w) by {gap:.3g} nats: the standard "
                f"error needs N ≫ e^{4 * gap:.3g} to see the weights that set it, have {positive.size}"
            )
    if bad:
        return Status.UNRELIABLE, tuple(bad + warn)
    return (Status.WARN if warn else Status.OK), tuple(warn)


def summarize(log_w: np.ndarray, seconds: float = 0.0) -> Estimate:
    """All statistics and the verdict of a vector of log weights (computed in float64).

    Raises:
        AllWeightsNonFinite: when no weight can be used.

    Example:
        >>> e = summarize(np.zeros(100))
        >>> e.log_z, e.log_z_stderr, round(e.ess, 9), e.status.value
        (0.0, 0.0, 100.0, 'ok')
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
    m, w = _scaled_weights(lw)
    s1, s2 = float(np.sum(w)), float(np.sum(w * w))
    ess = s1 * s1 / s2
    delta = math.sqrt(max(s2 / (s1 * s1) - 1.0 / n, 0.0))
    k = pareto_k(lw)
    status, reasons = verdict(lw, ess, k, num_nonfinite)
    valid = status is not Status.UNRELIABLE
    return Estimate(
        log_z=m + math.log(s1 / n),
        log_z_stderr=delta if valid else None,
        log_z_stderr_method="delta" if valid else "none",
        delta_stderr=delta,
        delta_stderr_uncertainty=delta_stderr_uncertainty(lw),
        elbo=float(np.mean(lw)) if np.all(np.isfinite(lw)) else float("-inf"),
        ess=ess,
        num_samples=n,
        pareto_k=k,
        num_nonfinite=num_nonfinite,
        seconds=seconds,
        status=status,
        reasons=reasons,
    )


def genealogy_relative_variance(log_w: np.ndarray, eve: np.ndarray, resamplings: int) -> tuple[float, float]:
    """Lee & Whiteley's (2018) estimate of `Var(Ẑ)/Z²` from one SMC run, and the effective number
    of time-0 ancestors it rests on.

    With `W_i` the final normalised weights, `E_i` each final particle's time-0 ancestor (its Eve
    index), `S_m = Σ_{i: E_i = m} W_i` and `R` resamplings,

        V̂ / Ẑ² = 1 − (N / (N − 1))^{R+1} · (1 − Σ_m S_m²).

    Without resampling (`R = 0`, `E_i = i`) this is `(N/ESS − 1)/(N − 1)`: the unbiased sample
    variance of the weights over `N Ŵ²`, i.e. the importance-sampling formula (the delta-method
    SE squared times `N/(N − 1)`). The second value, `1/Σ_m S_m²`, is the effective number of
    distinct Eve lineages: when it is small the genealogy has collapsed and the estimate is
    useless (Olsson & Douc 2019).

    Example:
        >>> v, lineages = genealogy_relative_variance(np.zeros(4), np.arange(4), 0)
        >>> v, lineages
        (0.0, 4.0)
    """
    lw = np.asarray(log_w, dtype=np.float64)
    lw = np.where(np.isnan(lw), -np.inf, lw)
    n = lw.size
    w = np.exp(lw - np.max(lw))
    w = w / w.sum()
    s = np.bincount(np.asarray(eve, dtype=np.int64), weights=w, minlength=n)
    sum_sq = float(np.sum(s * s))
    factor = math.exp((resamplings + 1) * (math.log(n) - math.log(n - 1)))
    return 1.0 - factor * (1.0 - sum_sq), 1.0 / sum_sq


def smc_estimate(
    log_z_resampled: float,
    log_w: np.ndarray,
    eve: np.ndarray,
    resamplings: int,
    seconds: float = 0.0,
    multinomial: bool = True,
) -> Estimate:
    """The estimate of one SMC run: `log Ẑ = log_z_resampled + logsumexp(log w) − log N`, the
    verdict of its final weights (`summarize`), and the genealogy standard error.

    `log_z_stderr = sqrt(V̂/Ẑ²)` (`genealogy_relative_variance`; the delta method on the relative
    variance), method `"smc-genealogy"`. None (method `"none"`) when the verdict of the final
    weights is unreliable, when fewer than `ESS_MIN` effective Eve lineages are left (a collapsed
    genealogy), or when the estimate is negative; also None, with a warning, when the run resampled
    with a scheme other than multinomial (`multinomial=False`), for which the estimate is biased
    low (lineages coalesce less; measured in docs/method.md). `delta_stderr` holds the genealogy value whatever
    the verdict, and its uncertainty `se / sqrt(2 L)` with `L` the effective lineages: the
    variance is an average over about `L` independent lineage groups.

    Example:
        >>> e = smc_estimate(0.0, np.zeros(100), np.arange(100), 0)
        >>> e.log_z, e.log_z_stderr, e.log_z_stderr_method
        (0.0, 0.0, 'smc-genealogy')
    """
    final = summarize(log_w, seconds=seconds)
    relvar, lineages = genealogy_relative_variance(log_w, eve, resamplings)
    # A difference of sums: rounding can leave a true zero slightly below it.
    relvar = 0.0 if -1e-9 <= relvar < 0.0 else relvar
    se = math.sqrt(relvar) if relvar >= 0.0 else math.nan
    reasons = list(final.reasons)
    status = final.status
    if lineages < ESS_MIN:
        reasons.append(f"the genealogy collapsed: {lineages:.1f} effective initial ancestors left")
        status = Status.UNRELIABLE
    elif not math.isfinite(se):
        reasons.append("the genealogy variance estimate is negative")
        status = Status.UNRELIABLE
    valid = status is not Status.UNRELIABLE
    if valid and resamplings > 0 and not multinomial:
        reasons.append(
            "no single-run standard error with systematic or stratified resampling; use --resampling "
            "multinomial, or --repeats"
        )
        status = worst([status, Status.WARN])
        valid = False
    return dataclasses.replace(
        final,
        log_z=float(log_z_resampled) + final.log_z,
        log_z_stderr=se if valid else None,
        log_z_stderr_method="smc-genealogy" if valid else "none",
        delta_stderr=se,
        delta_stderr_uncertainty=se / math.sqrt(2.0 * lineages) if math.isfinite(se) else math.nan,
        elbo=float(log_z_resampled) + final.elbo,
        status=status,
        reasons=tuple(reasons),
        weights_status=final.status,
    )


# Independent SMC populations are replicates of the estimator: from this many on, the spread of
# their Ẑ is a standard error (the genealogy one collapses in long runs, and is biased low near
# collapse: measured at d = 200 in docs/method.md).
MIN_POPULATIONS = 4
# A relative standard error of Ẑ above this makes the delta method's log-scale SE meaningless. The
# spread of J populations reaches 1 when one of them carries all of Ẑ, and 0.65 when two of eight
# share it: above 0.5, too few populations carry the estimate.
MAX_RELATIVE_STDERR = 0.5


def population_spread(log_z: np.ndarray) -> tuple[float, float]:
    """The standard error of `log mean_j Ẑ_j` from the spread of J independent runs' Ẑ_j, and its
    own uncertainty: `se = sd_j(Ẑ_j / Ẑ̄) / √J` (delta method), `u = se / √(2 (J − 1))`.

    Example:
        >>> se, u = population_spread(np.log([1.0, 1.0, 1.0, 1.0]))
        >>> se, u
        (0.0, 0.0)
    """
    log_z = np.asarray(log_z, np.float64)
    j = log_z.size
    rel = np.exp(log_z - np.max(log_z))
    rel = rel / rel.mean()
    se = float(np.std(rel, ddof=1) / math.sqrt(j))
    return se, se / math.sqrt(2.0 * (j - 1))


def merge_runs(estimates: Sequence[Estimate]) -> Estimate:
    """J independent SMC runs (populations) of one log Z merged into one estimate.

    `Ẑ = mean_j Ẑ_j` (still unbiased), so `log Ẑ = logsumexp(log Ẑ_j) − log J`. Two standard
    errors: the genealogy one, `sqrt(Σ_j Ẑ_j² v_j) / Σ_j Ẑ_j` with `v_j` each run's genealogy
    relative variance, and, from `MIN_POPULATIONS` runs on, the spread of the Ẑ_j
    (`population_spread`). The headline is the genealogy SE when every run has one and the two
    agree (|Δ| ≤ 2√(u₁² + u₂²)); when they disagree, the larger, with a warning; when a genealogy
    collapsed, the spread (method `"replicates"`), the verdict then coming from the runs' final
    weights. The verdict is otherwise the worst run's; ESS, N and the non-finite counts add up,
    k̂ is the worst, the ELBO the mean.
    """
    estimates = tuple(estimates)
    if len(estimates) == 1:
        return estimates[0]
    j = len(estimates)
    log_z = np.array([e.log_z for e in estimates])
    top = float(np.max(log_z))
    z = np.exp(log_z - top)
    se = np.array([e.delta_stderr for e in estimates])
    genealogy = math.sqrt(float(np.sum(z * z * se * se))) / float(np.sum(z))
    lineage_u = [e.delta_stderr_uncertainty / e.delta_stderr for e in estimates if e.delta_stderr > 0]
    genealogy_u = genealogy * (max(lineage_u) if lineage_u else 0.0) / math.sqrt(j)
    reasons = [f"population {i + 1}: {r}" for i, e in enumerate(estimates) for r in e.reasons]
    status = worst([e.status for e in estimates])
    genealogy_valid = (
        status is not Status.UNRELIABLE
        and math.isfinite(genealogy)
        and all(e.log_z_stderr is not None for e in estimates)
    )
    headline, method, uncertainty = (genealogy, "smc-genealogy", genealogy_u) if genealogy_valid else (None, "none", math.nan)
    finite = bool(np.all(np.isfinite(log_z)))
    if j >= MIN_POPULATIONS and finite:
        spread, spread_u = population_spread(log_z)
        if genealogy_valid:
            if abs(spread - genealogy) > STDERR_DISAGREE_Z * math.hypot(spread_u, genealogy_u) and spread > genealogy:
                headline, method, uncertainty = spread, "replicates", spread_u
                reasons.append(
                    f"the genealogy standard error ({genealogy:.3g}) is smaller than the spread of the {j} "
                    f"populations ({spread:.3g}) beyond their uncertainties; the spread is reported"
                )
                status = worst([status, Status.WARN])
        elif all(e.weights_status is not None and e.weights_status is not Status.UNRELIABLE for e in estimates):
            headline, method, uncertainty = spread, "replicates", spread_u
            status = worst([e.weights_status for e in estimates])
            # The spread holds for any resampling scheme: drop the note that asks for multinomial.
            reasons = [f"population {i + 1}: {r}" for i, e in enumerate(estimates) for r in e.reasons
                       if "--resampling multinomial" not in r]
            reasons.append(f"standard error from the spread of the {j} independent populations")
            collapsed = sum(e.status is Status.UNRELIABLE for e in estimates)
            if collapsed:
                # Each such Ẑ_j rests on a few initial ancestors, so the Ẑ_j are heavy-tailed and
                # their spread over J populations is itself a rough, usually low, estimate (measured:
                # gauss_narrow at d = 20, all 8 genealogies at 1-4 lineages, 1.85 nats off with a
                # spread of 0.33; docs/method.md, "Several populations").
                status = worst([status, Status.WARN])
                reasons.append(
                    f"{collapsed} of the {j} populations' genealogies collapsed, so their spread may "
                    "understate the error; use more refinement moves (--refine-steps) or more particles per population"
                )
    if headline is not None and headline > MAX_RELATIVE_STDERR:
        reasons.append(
            f"the populations' Ẑ scatter by {headline:.3g} of their mean: log Ẑ has no meaningful "
            "standard error; use more particles per population or more refinement moves"
        )
        status, headline, method = Status.UNRELIABLE, None, "none"
    return Estimate(
        log_z=top + math.log(float(np.sum(z)) / j),
        log_z_stderr=headline,
        log_z_stderr_method=method,
        delta_stderr=genealogy,
        delta_stderr_uncertainty=uncertainty if headline is not None else genealogy_u,
        elbo=float(np.mean([e.elbo for e in estimates])),
        ess=float(sum(e.ess for e in estimates)),
        num_samples=int(sum(e.num_samples for e in estimates)),
        pareto_k=max(e.pareto_k for e in estimates),
        num_nonfinite=int(sum(e.num_nonfinite for e in estimates)),
        seconds=float(sum(e.seconds for e in estimates)),
        status=status,
        reasons=tuple(reasons),
        weights_status=worst([e.weights_status for e in estimates if e.weights_status is not None]),
    )


# Adaptive tempering has no forward kernel: its refinement moves alone carry the population from
# one β to the next. `smc.move_correlation` measures how much of each coordinate's spread the moves
# leave in place (0: fresh draws, 1: no movement). When the median over the steps is high, the
# population still mirrors the initial distribution and the reweightings, and the estimate can be
# off by far more than any standard error sees (every population is biased alike, so their spread
# stays small). Measured (docs/method.md, "Mixing of the moves"): at most 0.07 on runs that were
# right, 0.80 on the bundled logistic regression started from N(0, I), 18 nats low.
MIXING_WARN = 0.3
MIXING_BAD = 0.6


def mixing_verdict(estimate: Estimate, correlation: Optional[float]) -> Estimate:
    """The estimate with the verdict of its refinement moves' mixing (adaptive tempering): `warn`
    when the median correlation across a step's moves exceeds `MIXING_WARN`, `unreliable` (and no
    standard error) above `MIXING_BAD`; unchanged when `correlation` is None.

    Example:
        >>> e = Estimate(0.0, 0.1, "replicates", 0.1, 0.01, 0.0, 100.0, 100, 0.1)
        >>> mixing_verdict(e, 0.8).status.value, mixing_verdict(e, 0.8).log_z_stderr
        ('unreliable', None)
    """
    if correlation is None or not math.isfinite(correlation) or correlation <= MIXING_WARN:
        return estimate
    reason = (
        f"the refinement moves barely move the particles (median correlation {correlation:.2f} across "
        "a step's moves): the estimate can be biased far beyond its standard error; use more "
        "--refine-steps or --leapfrog, or a better-placed initial distribution (--init auto)"
    )
    if correlation <= MIXING_BAD:
        return dataclasses.replace(
            estimate, status=worst([estimate.status, Status.WARN]), reasons=(*estimate.reasons, reason)
        )
    return dataclasses.replace(
        estimate, status=Status.UNRELIABLE, log_z_stderr=None, log_z_stderr_method="none",
        reasons=(*estimate.reasons, reason),
    )


# The stationarity test of the final SMC population (`smc.stationarity`): the z score of the drift
# of log γ under extra moves at β = 1. Above STATIONARITY_WARN the population was not at
# equilibrium and the estimate carries a bias its standard error cannot see (docs/method.md,
# "Stationarity of the final population").
STATIONARITY_WARN = 3.0


def stationarity_verdict(estimate: Estimate, drift: float, z: float, moves: int) -> Estimate:
    """The estimate with the verdict of the stationarity test: at most `warn` when |z| exceeds
    `STATIONARITY_WARN`; unchanged otherwise. `moves`: how many extra moves the test made (for the
    reason's text; `smc.stationarity_moves`).

    Example:
        >>> e = Estimate(0.0, 0.1, "replicates", 0.1, 0.01, 0.0, 100.0, 100, 0.1)
        >>> stationarity_verdict(e, 0.5, 9.0, 20).status.value, stationarity_verdict(e, 0.01, 1.0, 20).status.value
        ('warn', 'ok')
    """
    if not math.isfinite(z) or abs(z) <= STATIONARITY_WARN:
        return estimate
    reason = (
        f"the final particles are not at equilibrium: {moves} more refinement moves at β = 1 change their "
        f"mean log density by {drift:+.3g} ({abs(z):.0f} standard errors), so the estimate is biased "
        "by more than its standard error shows; use more --refine-steps or --leapfrog, or more --samples"
    )
    return dataclasses.replace(
        estimate, status=worst([estimate.status, Status.WARN]), reasons=(*estimate.reasons, reason)
    )


def population_verdict(estimate: Estimate, populations: int) -> Estimate:
    """The estimate with the verdict of its population count: an SMC estimate from fewer than
    `MIN_POPULATIONS` populations whose headline is the genealogy standard error is at most `warn`.

    One population's genealogy sees the variance of resampling and reweighting among the particles
    it has; it cannot see how far the share of particles in each mode is from the truth, and no
    count of lineages tells the two apart (measured: gmm8 at d = 200, 4,096 particles, runs 5–14
    genealogy SEs off with as many surviving lineages as correct gauss_narrow runs; docs/method.md).
    Only replicate populations measure that; `ok` needs them.

    Example:
        >>> e = Estimate(0.0, 0.1, "smc-genealogy", 0.1, 0.01, 0.0, 100.0, 100, 0.1)
        >>> population_verdict(e, 1).status.value, population_verdict(e, 8).status.value
        ('warn', 'ok')
    """
    if populations >= MIN_POPULATIONS or estimate.log_z_stderr_method != "smc-genealogy":
        return estimate
    reason = (
        f"{populations} SMC population{'s' if populations > 1 else ''}: the genealogy standard error "
        "cannot see errors in how the particles share the modes; for a replicate standard error give "
        f"--samples at least {MIN_POPULATIONS}× --particles (--particles N splits them into populations of N)"
    )
    return dataclasses.replace(
        estimate, status=worst([estimate.status, Status.WARN]), reasons=(*estimate.reasons, reason)
    )


def combine(values: Sequence[float]) -> tuple[float, Optional[float]]:
    """Mean and standard error (`sd / √R`) of R independent log Z estimates; stderr is None if R < 2.

    Example:
        >>> combine([1.0, 2.0, 3.0])[0], combine([1.5])
        (2.0, (1.5, None))
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("combine needs at least one value")
    if v.size < 2:
        return float(v.mean()), None
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))


@dataclasses.dataclass(frozen=True)
class Combined:
    """R repeated estimates of one log Z, combined into the headline.

    Attributes:
        log_z: the mean of the repeats' log Ẑ.
        log_z_stderr: the headline standard error, or None (status unreliable, or nothing valid).
        log_z_stderr_method: `"replicates"` (R ≥ 2: `sd/√R`), `"delta"` (R = 1) or `"none"`.
        replicate_stderr: `sd/√R` of the repeats (None when R = 1), reported whatever the headline.
        delta_stderr: the per-run delta SEs combined for the mean, `sqrt(Σ se_r²)/R`.
        stderr_disagree: whether the two disagree beyond their uncertainties; None when they were
            not compared (R = 1, or a repeat without a valid delta SE).
        status, reasons: the worst repeat's status, raised when the SEs disagree.
        estimates: the repeats.
    """

    log_z: float
    log_z_stderr: Optional[float]
    log_z_stderr_method: str
    replicate_stderr: Optional[float]
    delta_stderr: float
    stderr_disagree: Optional[bool]
    status: Status
    reasons: tuple[str, ...]
    estimates: tuple[Estimate, ...]

    @property
    def trustworthy(self) -> bool:
        """Whether the combined estimate and its standard error can be used."""
        return self.status is not Status.UNRELIABLE


def stderr_disagreement(
    replicate_se: float, repeats: int, delta_se: float, delta_se_uncertainty: float
) -> float:
    """How many standard deviations separate the replicate SE from the delta SE (signed).

    If each of R runs is normal with the spread its delta SE claims, `ν·(se_rep/se_delta)²` is
    χ² with `ν = R − 1` degrees of freedom (a sample variance). Its two-sided tail probability,
    written as a normal z, is the disagreement when the delta SE is exact. The delta SE's own
    relative uncertainty `r = u_delta / se_delta` then widens the spread of the log ratio: with
    `s = sqrt(ψ′(ν/2))/2`, the sd of log se_rep (about `1/sqrt(2(R − 1))`), z shrinks by
    `s / sqrt(s² + r²)`. To first order this is the brief rule "the SEs differ by z·sqrt(u_rep² +
    u_delta²)" with `u_rep ≈ se/sqrt(2(R − 1))`; the exact χ² law matters for small R, where
    the normal approximation flags 8 % (R = 5) to 21 % (R = 2) of honest runs instead of 4.6 %.
    Positive: the repeats scatter more than each run claims.

    Example:
        >>> round(stderr_disagreement(0.3, 9, 0.1, 0.0), 1)  # 3× the claimed spread, R = 9
        6.9
        >>> round(stderr_disagreement(0.1, 9, 0.1, 0.0), 1)
        0.2
    """
    if replicate_se <= 0.0 or delta_se <= 0.0:
        if replicate_se == delta_se:
            return 0.0
        return math.copysign(math.inf, replicate_se - delta_se)
    nu = repeats - 1
    x = nu * (replicate_se / delta_se) ** 2
    if x < nu:
        z = float(scipy.stats.norm.ppf(scipy.stats.chi2.cdf(x, nu)))
    else:
        z = float(scipy.stats.norm.isf(scipy.stats.chi2.sf(x, nu)))
    s2 = float(polygamma(1, nu / 2.0)) / 4.0
    return z * math.sqrt(s2 / (s2 + (delta_se_uncertainty / delta_se) ** 2))


def combine_estimates(estimates: Sequence[Estimate]) -> Combined:
    """Combines R ≥ 1 repeated estimates of the same log Z into the headline and its verdict.

    Status: the worst repeat's, then warn when the replicate SE and the per-run delta SE
    disagree (`|z| > STDERR_DISAGREE_Z`, see `stderr_disagreement`; needs R ≥ 2 and a valid
    delta SE in every run), unreliable when the
    repeats scatter far more than the runs claim (`z > STDERR_WILD_Z`): the per-run SEs then
    understate the error, the mark of a tail the runs do not see. An unreliable combination
    has no headline SE, like an unreliable estimate.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> c = combine_estimates([summarize(rng.normal(size=2000) * 0.3) for _ in range(4)])
        >>> c.log_z_stderr_method, c.status.value, c.stderr_disagree
        ('replicates', 'ok', False)
    """
    estimates = tuple(estimates)
    if not estimates:
        raise ValueError("combine_estimates needs at least one estimate")
    r = len(estimates)
    log_z, replicate_se = combine([e.log_z for e in estimates])
    delta_se = math.sqrt(sum(e.delta_stderr**2 for e in estimates)) / r
    status = worst([e.status for e in estimates])
    reasons = [
        (f"repeat {i + 1}: {text}" if r > 1 else text)
        for i, e in enumerate(estimates)
        for text in e.reasons
    ]
    disagree: Optional[bool] = None
    if replicate_se is not None and all(e.log_z_stderr_method in ("delta", "smc-genealogy") for e in estimates):
        # u of the combined delta SE: d(delta_se)/d(se_r) = se_r / (R² delta_se).
        u = (
            math.sqrt(sum((e.delta_stderr * e.delta_stderr_uncertainty) ** 2 for e in estimates))
            / (r**2 * delta_se)
            if delta_se > 0
            else 0.0
        )
        z = stderr_disagreement(replicate_se, r, delta_se, u)
        disagree = abs(z) > STDERR_DISAGREE_Z
        if disagree:
            side = "more" if z > 0 else "less"
            reasons.append(
                f"repeats scatter {side} than each run claims: replicate SE {replicate_se:.3g} "
                f"vs delta SE {delta_se:.3g} ({abs(z):.1f} combined sd apart)"
            )
            status = worst([status, Status.UNRELIABLE if z > STDERR_WILD_Z else Status.WARN])
    if status is Status.UNRELIABLE:
        headline, method = None, "none"
    elif replicate_se is not None:
        headline, method = replicate_se, "replicates"
    else:
        headline, method = estimates[0].log_z_stderr, estimates[0].log_z_stderr_method
    return Combined(
        log_z=log_z,
        log_z_stderr=headline,
        log_z_stderr_method=method,
        replicate_stderr=replicate_se,
        delta_stderr=delta_se,
        stderr_disagree=disagree,
        status=status,
        reasons=tuple(reasons),
        estimates=estimates,
    )


_COVER = (
    "train longer (--iterations), use more annealing steps (--steps), a wider or better-placed "
    "initial distribution (the target's `initial:`)"
)


def advice(result: Union[Estimate, Combined]) -> str:
    """One line of what to try next, from an estimate's or a combination's verdict.

    Example:
        >>> advice(summarize(np.zeros(100)))
        'nothing to fix; more samples (--samples) or repeats (--repeats) shrink the standard error'
    """
    estimates = result.estimates if isinstance(result, Combined) else (result,)
    nonfinite = max(e.num_nonfinite / (e.num_samples + e.num_nonfinite) for e in estimates)
    if nonfinite >= NONFINITE_MAX_FRAC:
        return (
            f"{nonfinite:.0%} of the weights are NaN or +inf: use smaller steps (more --steps), "
            "check the target with `mcd check`, or train longer (--iterations)"
        )
    if result.status is Status.UNRELIABLE:
        return "the sampler does not cover the target: " + _COVER
    if result.status is Status.WARN:
        extra = (
            "; the repeats disagree with the runs' own SEs: use more --repeats"
            if isinstance(result, Combined) and result.stderr_disagree
            else "; --repeats R gives an empirical standard error"
        )
        return "usable, but to firm it up: " + _COVER + extra
    return "nothing to fix; more samples (--samples) or repeats (--repeats) shrink the standard error"


@dataclasses.dataclass(frozen=True)
class DataSummary:
    """The mean of per-datum log Ẑ over n data, with its two uncertainties.

    Attributes:
        mean: `mean_i log Ẑ(x_i)`.
        mc_stderr: the Monte Carlo uncertainty of that mean, `sqrt(Σ se_i²) / n` (the data held
            fixed: what more samples per datum would shrink); None when n = 0.
        data_stderr: the spread over data, `sd_i(log Ẑ(x_i)) / √n` (what more data would shrink, as
            an estimate of the population's mean log p(x)); None when n < 2.
        num_data: n.
    """

    mean: float
    mc_stderr: Optional[float]
    data_stderr: Optional[float]
    num_data: int


def summarize_data(log_z: Sequence[float], stderr: Sequence[float]) -> DataSummary:
    """Combines per-datum estimates `log_z[i] ± stderr[i]` into the mean over the data.

    Example:
        >>> s = summarize_data([1.0, 3.0], [0.3, 0.4])
        >>> s.mean, round(s.mc_stderr, 12), s.data_stderr
        (2.0, 0.25, 1.0)
    """
    v = np.asarray(log_z, dtype=np.float64)
    se = np.asarray(stderr, dtype=np.float64)
    if v.size == 0:
        return DataSummary(float("nan"), None, None, 0)
    mc = float(math.sqrt(np.sum(se * se)) / v.size)
    spread = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else None
    return DataSummary(float(v.mean()), mc, spread, int(v.size))
