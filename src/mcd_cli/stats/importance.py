"""log Z from importance weights, with the verdict that says when not to believe it.

With N log weights `log w_i` (NaN and +inf are dropped and counted; `−inf`, a zero weight, is a
legitimate sample):

- `log Ẑ = logsumexp(log w) − log N`; `Ẑ` is unbiased for Z, `log Ẑ` biased low (Jensen);
- `ESS = (Σ w)² / Σ w²`; the delta-method standard error `sqrt(1/ESS − 1/N)`;
- `ELBO = mean(log w)`;
- Pareto k̂ of the largest weights (`psis.pareto_k`).

Every estimate gets a verdict, `Status.OK`, `WARN` or `UNRELIABLE`, with its reasons (`Reason`
codes; `mcd_cli.record.messages` words them):

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
`log_z_stderr_method` is `"none"`; the raw value stays in `delta_stderr`. All host-side float64
numpy: it runs once per estimate.

Example:
    >>> rng = np.random.default_rng(0)
    >>> good = summarize(rng.normal(size=4096) * 0.5)
    >>> good.status, good.log_z_stderr_method
    (<Status.OK: 'ok'>, 'delta')
    >>> bad = summarize(rng.normal(size=16384) * 10_000)  # weights spread over 10^4 nats
    >>> bad.status, bad.log_z_stderr, bad.pareto_k > 100
    (<Status.UNRELIABLE: 'unreliable'>, None, True)
    >>> [r.code for r in bad.reasons]
    ['pareto_k_high', 'ess_low', 'gap_unreliable']
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Optional, Sequence

import numpy as np

from mcd_cli.errors import RunFailed
from mcd_cli.stats.psis import PARETO_K_WARN, PARETO_MIN_TAIL, pareto_k_limit, pareto_tail, tail_length
from mcd_cli.stats.reasons import Reason

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
# more than 4 SEs in 4-10 % of cases (benchmarks/questions/stats_calibration.py).
GAP_MARGIN = math.log(4.0)


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
        status, reasons: the verdict (`verdict`), its reasons as `Reason` codes.
        weights_status: an SMC run's verdict of its final weights alone (before the genealogy is
            judged), which `merge_runs` needs when the populations' spread replaces a collapsed
            genealogy; None for importance sampling.
        tail_shortfall: the share of Ẑ the weights' tail typically misses at this N
            (`psis.tail_shortfall`); for merged populations the mean of theirs. None: not measured.
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
    reasons: tuple[Reason, ...] = ()
    weights_status: Optional[Status] = None
    tail_shortfall: Optional[float] = None

    @property
    def trustworthy(self) -> bool:
        """Whether the estimate and its standard error can be used (status is not unreliable)."""
        return self.status is not Status.UNRELIABLE


def _scaled_weights(log_w: np.ndarray) -> tuple[float, np.ndarray]:
    """`(m, w)` with `w = exp(log w − m)`, `m` the largest log weight: `w ≤ 1`, one is exactly 1,
    and equal log weights give exactly equal weights (ESS = N and SE = 0 hold exactly)."""
    m = float(np.max(log_w))
    return m, np.exp(log_w - m)


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


def tail_reasons(n: int, pareto_k: float, judge: bool = True) -> tuple[list[Reason], list[Reason]]:
    """`(bad, warn)`: the verdict of k̂ for n weights; with `judge` False only whether a tail can be
    fitted at all (the value is then judged with other populations': `smc.tail_verdict`)."""
    limit = pareto_k_limit(n)
    if math.isinf(pareto_k) and pareto_k > 0:
        if tail_length(n) < PARETO_MIN_TAIL:
            return [Reason("too_few_samples", {"samples": n})], []
        return [Reason("pareto_k_unfittable", {"min_tail": PARETO_MIN_TAIL})], []
    if not judge:
        return [], []
    if pareto_k > limit:
        return [Reason("pareto_k_high", {"k": float(pareto_k), "limit": limit})], []
    if pareto_k > PARETO_K_WARN:
        return [], [Reason("pareto_k_warn", {"k": float(pareto_k), "limit": PARETO_K_WARN})]
    return [], []


def verdict(
    log_w: np.ndarray, ess: float, pareto_k: float, num_nonfinite: int = 0, tail: bool = True
) -> tuple[Status, tuple[Reason, ...]]:
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
        tail: judge k̂'s value here (False: an SMC population, whose k̂ is judged with the others'
            by `smc.tail_verdict`; a tail too short to fit is judged either way).

    Returns:
        The status, and the reasons: the unreliable ones first, then the warnings.

    Example:
        >>> lw = np.random.default_rng(0).normal(size=1000) * 3.0
        >>> s, reasons = verdict(lw, 5.0, 1.2)
        >>> s.value, [r.code for r in reasons]
        ('unreliable', ['pareto_k_high', 'ess_low', 'gap_unreliable'])
    """
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    n = lw.size
    bad: list[Reason] = []
    warn: list[Reason] = []
    total = n + num_nonfinite
    if num_nonfinite:
        reason = Reason("nonfinite_weights", {"dropped": int(num_nonfinite), "total": int(total)})
        (bad if num_nonfinite / total >= NONFINITE_MAX_FRAC else warn).append(reason)
    tail_bad, tail_warn = tail_reasons(n, pareto_k, tail)
    bad += tail_bad
    warn += tail_warn
    if ess < ess_floor(n):
        bad.append(Reason("ess_low", {"ess": float(ess), "samples": n, "floor": ESS_MIN}))
    elif ess < ESS_WARN:
        warn.append(Reason("ess_rough", {"ess": float(ess), "samples": n, "floor": ESS_WARN}))
    positive = lw[np.isfinite(lw)]
    if positive.size >= 2:
        log_n = math.log(positive.size)
        typical = max(float(positive.mean()), float(np.median(positive)))
        m, w = _scaled_weights(positive)
        gap = m + math.log(float(np.mean(w))) - typical
        if 2.0 * gap > log_n - GAP_MARGIN:
            bad.append(Reason("gap_unreliable", {"gap": gap, "samples": int(positive.size)}))
        elif 4.0 * gap > log_n - GAP_MARGIN:
            warn.append(Reason("gap_warn", {"gap": gap, "samples": int(positive.size)}))
    if bad:
        return Status.UNRELIABLE, tuple(bad + warn)
    return (Status.WARN if warn else Status.OK), tuple(warn)


def summarize(log_w: np.ndarray, seconds: float = 0.0, tail: bool = True) -> Estimate:
    """All statistics and the verdict of a vector of log weights (computed in float64); `tail` as
    in `verdict`.

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
    k, shortfall = pareto_tail(lw)
    status, reasons = verdict(lw, ess, k, num_nonfinite, tail)
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
        tail_shortfall=shortfall,
    )


# Log weights are sums of densities computed in the run's precision, so log Ẑ is not resolved more
# finely than a few units in the last place of |log Ẑ| (measured: float32 runs on a posterior with
# log Z ≈ −497, whose proposal is exact, miss the truth by 3·10⁻⁶, 15 times their sampling SE).
ROUNDING_ULPS = 8


def with_rounding(estimate: Estimate, eps: float) -> Estimate:
    """`estimate` with the rounding of its arithmetic (machine epsilon `eps`) added to its standard
    error in quadrature: `se² + (ROUNDING_ULPS · eps · max(1, |log Ẑ|))²`.

    Example:
        >>> e = with_rounding(summarize(np.full(100, -496.6)), float(np.finfo(np.float32).eps))
        >>> round(e.log_z_stderr, 6)
        0.000474
    """
    if estimate.log_z_stderr is None or not math.isfinite(estimate.log_z):
        return estimate
    floor = ROUNDING_ULPS * eps * max(1.0, abs(estimate.log_z))
    return dataclasses.replace(estimate, log_z_stderr=math.hypot(estimate.log_z_stderr, floor))
