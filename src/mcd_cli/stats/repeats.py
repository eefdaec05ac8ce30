"""Repeated estimates of one log Z combined into the headline, and per-datum estimates into a mean.

`combine_estimates` turns R repeated estimates into the headline: the spread of the repeats
(`sd/√R`, method `"replicates"`) when R ≥ 2, else the run's own standard error, with the per-run
value beside it and a flag when the two disagree by more than their own uncertainties allow.

Example:
    >>> combine([1.0, 2.0, 3.0])[0], combine([1.5])
    (2.0, (1.5, None))
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import scipy.stats
from scipy.special import polygamma

from mcd_cli.stats.importance import Estimate, Status, worst
from mcd_cli.stats.reasons import Reason, scoped

# Replicate and per-run SEs disagree when `stderr_disagreement` (a z score) exceeds DISAGREE in
# size; a combination is unreliable when the repeats scatter more than claimed by WILD.
STDERR_DISAGREE_Z = 2.0
STDERR_WILD_Z = 4.0


def combine(values: Sequence[float]) -> tuple[float, Optional[float]]:
    """Mean and standard error (`sd / √R`) of R independent log Z estimates; stderr is None if R < 2."""
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
        status, reasons: the worst repeat's status, raised when the SEs disagree; the repeats'
            reasons (scoped to their repeat when R ≥ 2), then the disagreement's.
        estimates: the repeats.
    """

    log_z: float
    log_z_stderr: Optional[float]
    log_z_stderr_method: str
    replicate_stderr: Optional[float]
    delta_stderr: float
    stderr_disagree: Optional[bool]
    status: Status
    reasons: tuple[Reason, ...]
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
    the normal approximation flags honest runs far more often than the nominal 4.6 % (the
    rate of this rule: benchmarks/questions/stats_calibration.py, `disagree`).
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
        >>> from mcd_cli.stats.importance import summarize
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
        (scoped(reason, "repeat", i + 1) if r > 1 else reason)
        for i, e in enumerate(estimates)
        for reason in e.reasons
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
            reasons.append(
                Reason("repeats_disagree", {"replicate_stderr": replicate_se, "delta_stderr": delta_se, "z": z})
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
