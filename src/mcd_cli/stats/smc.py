"""log Z from SMC: one run's genealogy standard error, merging populations, and the verdicts that
only SMC has (the mixing of the moves, the stationarity of the final population, the number of
populations).

Example:
    >>> e = smc_estimate(0.0, np.zeros(100), np.zeros(100, dtype=int), 5)
    >>> e.status.value, [r.code for r in e.reasons]
    ('unreliable', ['genealogy_collapsed'])
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import Optional, Sequence

import numpy as np

from mcd_cli.stats.importance import ESS_MIN, Estimate, Status, summarize, tail_reasons, worst
from mcd_cli.stats.psis import PARETO_K_WARN, pareto_k, pareto_k_limit, tail_length
from mcd_cli.stats.reasons import Reason, scoped
from mcd_cli.stats.repeats import STDERR_DISAGREE_Z

# Eight units in the last place of a float32 log weight, relative to |log Ẑ|: standard errors
# smaller than this are below the resolution of the log weights they come from.
STDERR_RESOLUTION = 2.0**-20

# Independent SMC populations are replicates of the estimator: from this many on, the spread of
# their Ẑ is a standard error (the genealogy one collapses in long runs, and is biased low near
# collapse: measured at d = 200 in docs/method.md).
MIN_POPULATIONS = 4
# A relative standard error of Ẑ above this makes the delta method's log-scale SE meaningless. The
# spread of J populations reaches 1 when one of them carries all of Ẑ, and 0.65 when two of eight
# share it: above 0.5, too few populations carry the estimate.
MAX_RELATIVE_STDERR = 0.5

# Adaptive tempering has no forward kernel: its refinement moves alone carry the population from
# one β to the next. `smc.move_correlation` measures how much of each coordinate's spread the moves
# leave in place (0: fresh draws, 1: no movement). When the median over the steps is high, the
# population still mirrors the initial distribution and the reweightings, and the estimate can be
# off by far more than any standard error sees (every population is biased alike, so their spread
# stays small). Measured in docs/method.md, "Mixing of the moves": runs that were right stayed far
# below MIXING_WARN, and a run far off (the bundled logistic regression from N(0, I)) far above
# MIXING_BAD.
MIXING_WARN = 0.3
MIXING_BAD = 0.6

# The stationarity test of the final SMC population (`smc.stationarity`): the z score of the drift
# of log γ under extra moves at β = 1. Above STATIONARITY_WARN the population was not at
# equilibrium and the estimate carries a bias its standard error cannot see (docs/method.md,
# "Stationarity of the final population").
STATIONARITY_WARN = 3.0
# Stuck particles (`smc.stationarity`: over the test's moves at β = 1 they accepted less than 5 %
# on average) carrying more than STUCK_WARN of the weight: the step size that suits the rest of
# the population cannot move them, and the region they are in (a funnel's neck) is represented by
# too few particles, a bias no standard error sees. Measured (one population of 2,048 at the
# first pilot's effort, two each): funnel 1.1-1.6 %; none on gauss_narrow, gauss_shift, gmm8,
# student_t3, laplace, many_well, logreg_breast_cancer, brownian_motion; nice_flow 0.13-0.21 %
# (docs/method.md, "Stuck moves").
STUCK_WARN = 0.005
# Above this share of the points about the final particles (`smc.stationarity`) where log γ is
# finite and its gradient is not, the moves cannot enter part of the target and its mass may be
# missing: `unreliable`. A correct target gives none; the PyMC logistic regression whose float32
# gradient is NaN over most of its posterior gave 10 nats low with every other check passing
# (docs/method.md, "A gradient that is not finite").
NONFINITE_GRADIENTS = 1e-3

# Adaptive tempering's populations' final weights are measurements of one tail (the same replayed
# schedule and moves, independent keys): `tail_verdict` judges the mean of their k̂s, and flags a
# population whose k̂ the others' tail explains with probability below TAIL_OUTLIER_LEVEL (over all
# P, Bonferroni).
TAIL_OUTLIER_LEVEL = 0.05
# A variant of the tail rule, off (None): a k̂ in (0.5, limit] warns only when the share of Ẑ the
# sample's tail typically misses (`psis.tail_shortfall`, δ) is more than this many standard errors.
# Measured on weights of known tail, 4 populations of 4,096, 300 runs per cell
# (benchmarks/questions/tail_scale.py, results/calibration.md "tail_scale.json"): on a rare heavy
# component under a light body (0.2 % of the draws, tail index 0.4–0.7: k̄ 0.63–0.66, ESS/N
# 0.76–0.88) it lets 66–75 % of the runs through, of which 58–83 % cover log Z at ±2 SE, where
# the mean-k̂ rule lets 1–3 % through: the fit to the top weights mixes body and tail and
# understates both. Reading ESS/N instead (warn only below 0.9) is worse there (2–69 % covering).
# Off: the calibration's records (`tail_shortfall_populations`) measure it on real runs.
TAIL_SHORTFALL_SE: "float | None" = None


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
    tail: bool = True,
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
    variance is an average over about `L` independent lineage groups. `tail=False` leaves k̂'s
    value to `tail_verdict`, which judges it with the other populations'.

    Example:
        >>> e = smc_estimate(0.0, np.zeros(100), np.arange(100), 0)
        >>> e.log_z, e.log_z_stderr, e.log_z_stderr_method
        (0.0, 0.0, 'smc-genealogy')
    """
    final = summarize(log_w, seconds=seconds, tail=tail)
    relvar, lineages = genealogy_relative_variance(log_w, eve, resamplings)
    # A difference of sums: rounding can leave a true zero slightly below it.
    relvar = 0.0 if -1e-9 <= relvar < 0.0 else relvar
    se = math.sqrt(relvar) if relvar >= 0.0 else math.nan
    reasons = list(final.reasons)
    status = final.status
    if lineages < ESS_MIN:
        reasons.append(Reason("genealogy_collapsed", {"lineages": lineages}))
        status = Status.UNRELIABLE
    elif not math.isfinite(se):
        reasons.append(Reason("genealogy_negative", {}))
        status = Status.UNRELIABLE
    valid = status is not Status.UNRELIABLE
    if valid and resamplings > 0 and not multinomial:
        reasons.append(Reason("no_single_run_stderr", {}))
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


def pooled_pareto_k(log_w: Sequence[np.ndarray]) -> float:
    """Pareto k̂ of J populations' final weights pooled, each population's relative to its own
    mean: the tail index the J populations share, fitted once to all J·N weights, where the
    largest of J noisy k̂s rises with J at the same tail (`tail_verdict` judges their mean; measured on
    weights of known tail in benchmarks/results/calibration.md, `tail_rule`). Each population is
    scaled by its own mean so that the spread of the populations' Ẑ_j, which the replicate
    standard error measures, does not enter the tail (pooled at their Ẑ_j scale, the largest
    weights would come from the population with the largest Ẑ_j). On real SMC runs the
    populations' final weights also differ in spread (each resampled last at its own step), and
    the pooled k̂ can exceed every population's (funnel: 0.60-0.69 against at most 0.48; docs/
    method.md, "The default policy", step 4). Recorded beside the populations' k̂s, not used by
    the verdict. NaN weights count as zero; an infinite one gives NaN.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> lw = [rng.normal(size=1000) for _ in range(4)]
        >>> a, b = pooled_pareto_k(lw), pooled_pareto_k([w + 3.0 * j for j, w in enumerate(lw)])
        >>> round(a, 1), abs(a - b) < 1e-9  # log-normal weights, light tail; each population scale-free
        (0.1, True)
    """
    parts = []
    for w in log_w:
        w = np.asarray(w, np.float64).ravel()
        w = np.where(np.isnan(w), -np.inf, w)
        if np.any(w == np.inf):
            return math.nan
        top = np.max(w)
        if not np.isfinite(top):
            continue  # a population whose weights all vanished has no tail
        parts.append(w - (top + math.log(np.mean(np.exp(w - top)))))
    return float(pareto_k(np.concatenate(parts))) if parts else math.nan


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


def _population_reasons(estimates: Sequence[Estimate], drop: frozenset = frozenset()) -> list[Reason]:
    """Every run's reasons, scoped to its population, but those whose code is in `drop`."""
    return [scoped(r, "population", i + 1) for i, e in enumerate(estimates) for r in e.reasons if r.code not in drop]


def merge_runs(estimates: Sequence[Estimate]) -> Estimate:
    """J independent SMC runs (populations) of one log Z merged into one estimate.

    `Ẑ = mean_j Ẑ_j` (still unbiased), so `log Ẑ = logsumexp(log Ẑ_j) − log J`. Two standard
    errors: the genealogy one, `sqrt(Σ_j Ẑ_j² v_j) / Σ_j Ẑ_j` with `v_j` each run's genealogy
    relative variance, and, from `MIN_POPULATIONS` runs on, the spread of the Ẑ_j
    (`population_spread`). The headline is the genealogy SE when every run has one and the two
    agree (|Δ| ≤ 2√(u₁² + u₂²)); when they disagree, the larger, with a warning; when a genealogy
    collapsed, the spread (method `"replicates"`), the verdict then coming from the runs' final
    weights. The verdict is otherwise the worst run's, but for their k̂s (`tail_verdict` judges
    them); ESS, N and the non-finite counts add up, k̂ is the worst (`tail_verdict` may make it
    the mean), the ELBO the mean. Each run's reasons are scoped to its population.
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
    reasons = _population_reasons(estimates)
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
            # Below the rounding of float32 log weights both are noise, however precisely they seem
            # to disagree (equal weights): the larger is reported, without a warning.
            resolved = spread > STDERR_RESOLUTION * max(1.0, abs(top))
            if spread > genealogy and not resolved:
                headline, method, uncertainty = spread, "replicates", spread_u
            elif abs(spread - genealogy) > STDERR_DISAGREE_Z * math.hypot(spread_u, genealogy_u) and spread > genealogy:
                headline, method, uncertainty = spread, "replicates", spread_u
                reasons.append(
                    Reason("stderr_spread_larger", {"genealogy": genealogy, "spread": spread, "populations": j})
                )
                status = worst([status, Status.WARN])
        elif all(e.weights_status is not None and e.weights_status is not Status.UNRELIABLE for e in estimates):
            headline, method, uncertainty = spread, "replicates", spread_u
            status = worst([e.weights_status for e in estimates])
            # The spread holds for any resampling scheme: drop the note that asks for multinomial.
            reasons = _population_reasons(estimates, drop=frozenset({"no_single_run_stderr"}))
            reasons.append(Reason("stderr_from_spread", {"populations": j}))
            collapsed = sum(e.status is Status.UNRELIABLE for e in estimates)
            if collapsed:
                # Each such Ẑ_j rests on a few initial ancestors, so the Ẑ_j are heavy-tailed and
                # their spread over J populations is itself a rough, usually low, estimate
                # (measured on gauss_narrow at d = 20: docs/method.md, "Several populations").
                status = worst([status, Status.WARN])
                reasons.append(Reason("populations_collapsed", {"collapsed": int(collapsed), "populations": j}))
    if headline is not None and headline > MAX_RELATIVE_STDERR:
        reasons.append(Reason("populations_scatter", {"relative_stderr": float(headline)}))
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
        tail_shortfall=_merged_shortfall(z, estimates),
    )


def _merged_shortfall(z: np.ndarray, estimates: Sequence[Estimate]) -> Optional[float]:
    """The share of the merged Ẑ = mean Ẑ_j the populations' tails typically miss: their
    shortfalls δ_j weighted by Ẑ_j (None if any is unmeasured)."""
    shortfalls = [e.tail_shortfall for e in estimates]
    if any(d is None for d in shortfalls) or not float(np.sum(z)) > 0:
        return None
    with np.errstate(invalid="ignore"):
        return float(np.sum(z * np.asarray(shortfalls, dtype=np.float64)) / np.sum(z))


def tail_values(ks: Sequence[Optional[float]]) -> list[float]:
    """The populations' k̂s as the tail verdict counts them: below 0 (equal weights, −inf included)
    as 0, since a lighter tail is no safer than none; an unfittable tail (+inf, NaN, None: a reason
    of its own) not at all.

    Example:
        >>> tail_values([0.3, -0.2, float("-inf"), float("inf"), None])
        [0.3, 0.0, 0.0]
    """
    return [max(float(k), 0.0) for k in ks if k is not None and (math.isfinite(k) or k == -math.inf)]


def _common_k(ks: Sequence[float], default: float) -> float:
    """The k̂ of populations judged together: the mean of `tail_values`; −inf when every
    population's largest weights are equal (no tail: `pareto_tail` false in the record);
    `default` when no population has a fitted tail."""
    values = tail_values(ks)
    if all(k == -math.inf for k in ks):
        return -math.inf
    return float(np.mean(values)) if values else default


def tail_verdict(estimate: Estimate, ks: Sequence[Optional[float]], population: int) -> Estimate:
    """The estimate with the verdict of its populations' final-weight tails: `ks`, their k̂s, each
    fitted to `population` weights (`tail_values` says how each counts). The run's k̂ is their mean.
    Adaptive tempering's and trained kernels' populations alike (until session 34 trained kernels
    were judged by the largest k̂, for large runs whose misses were the bias of their moves' timing:
    docs/method.md, "The tail of several populations").

    One population: its k̂ as for importance weights, above `pareto_k_limit(population)`
    `unreliable` (`pareto_k_high`), above 0.5 `warn` (`pareto_k_warn`). Several: they are P
    measurements of one tail index, so their mean k̄ is judged the same way
    (`pareto_k_mean_high`, `pareto_k_mean_warn`). The largest of P k̂s is not: it passes 0.5 ever
    more often as P grows where the common tail is light (weights of known tail k = 0.4 in 16
    populations of 4,096: 95 % of runs, 96 % of which cover log Z; the mean flags none:
    docs/method.md, "The tail of several populations"). A population whose k̂ is above 0.5 and
    beyond what the others' tail explains, above their mean k̄₋ⱼ by `z · sd · √(1 + 1/(P − 1))`
    with `sd = (1 + k̄₋ⱼ)/√M` (the sd of a generalised Pareto shape's estimate from M =
    `tail_length(population)` tail weights) and `z` the normal quantile at `1 − TAIL_OUTLIER_LEVEL/P`,
    has a heavier tail of its own (`pareto_k_outlier`, scoped to it): `warn`, or `unreliable` above
    the limit.

    A k̂ (or k̄) in (0.5, limit] measures the tail's shape, not how much of Ẑ lies in it; the
    variant `TAIL_SHORTFALL_SE` (off) would warn only where the share the sample typically misses,
    `estimate.tail_shortfall`, is more than that many standard errors (`tail_negligible`).

    Example:
        >>> e = Estimate(0.0, 0.1, "replicates", 0.1, 0.01, 0.0, 100.0, 16384, 0.45)
        >>> tail_verdict(e, [0.55, 0.38, 0.41, 0.46], 4096).status.value
        'ok'
        >>> [r.code for r in tail_verdict(e, [0.55, 0.52, 0.61, 0.46], 4096).reasons]
        ['pareto_k_mean_warn']
        >>> v = tail_verdict(e, [0.95, 0.21, 0.30, 0.25], 4096)
        >>> v.status.value, [(r.code, r.scope) for r in v.reasons]
        ('unreliable', [('pareto_k_outlier', (('population', 1),))])
    """
    limit = pareto_k_limit(population)
    if len(ks) > 1:
        estimate = dataclasses.replace(estimate, pareto_k=_common_k(ks, estimate.pareto_k))
    fitted = [(j, v) for j, k in enumerate(ks) for v in tail_values([k])]
    if not fitted:
        return estimate
    if len(ks) == 1:  # as importance weights (an unfittable tail, dropped above, has its own reason)
        bad, warn = tail_reasons(population, fitted[0][1])
        if warn and not bad and tail_negligible(estimate):
            warn = []
        for reason in bad + warn:
            estimate = _flag(estimate, reason, Status.UNRELIABLE if bad else Status.WARN)
        return estimate
    values = [k for _, k in fitted]
    mean = float(np.mean(values))
    if mean > limit:
        reason = Reason("pareto_k_mean_high", {"k": mean, "limit": limit, "populations": len(values)})
        estimate = _flag(estimate, reason, Status.UNRELIABLE)
    elif mean > PARETO_K_WARN and not tail_negligible(estimate):
        reason = Reason("pareto_k_mean_warn", {"k": mean, "limit": PARETO_K_WARN, "populations": len(values)})
        estimate = _flag(estimate, reason)
    if len(values) < 2:
        return estimate
    z = NormalDist().inv_cdf(1.0 - TAIL_OUTLIER_LEVEL / len(values))
    scale = 1.0 / math.sqrt(tail_length(population)) * math.sqrt(1.0 + 1.0 / (len(values) - 1))
    total = sum(values)
    for j, k in fitted:
        others = (total - k) / (len(values) - 1)
        bound = others + z * (1.0 + others) * scale
        if k > PARETO_K_WARN and k > bound:
            reason = scoped(Reason("pareto_k_outlier", {"k": k, "others": others, "bound": bound}), "population", j + 1)
            estimate = _flag(estimate, reason, Status.UNRELIABLE if k > limit else Status.WARN)
    return estimate


def tail_negligible(estimate: Estimate) -> bool:
    """Whether the tail of `estimate`'s weights, heavy as its k̂ may be (up to the limit), misses
    too little of Ẑ to matter beside its standard error: `tail_shortfall ≤ TAIL_SHORTFALL_SE ·
    log_z_stderr`. False without either, or with the variant off (`TAIL_SHORTFALL_SE` None, the
    default). `tail_verdict` warns of a k̂ in (0.5, limit] only where this is False.
    """
    shortfall, stderr = estimate.tail_shortfall, estimate.log_z_stderr
    if TAIL_SHORTFALL_SE is None or shortfall is None or stderr is None:
        return False
    return bool(shortfall <= TAIL_SHORTFALL_SE * stderr)


def _flag(estimate: Estimate, reason: Reason, status: Status = Status.WARN) -> Estimate:
    """`estimate` with `reason` added and its status at least `status`; an unreliable estimate
    loses its standard error."""
    if status is Status.UNRELIABLE:
        return dataclasses.replace(
            estimate, status=status, log_z_stderr=None, log_z_stderr_method="none",
            reasons=(*estimate.reasons, reason),
        )
    return dataclasses.replace(estimate, status=worst([estimate.status, status]), reasons=(*estimate.reasons, reason))


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
    reason = Reason("moves_barely_move", {"correlation": float(correlation)})
    return _flag(estimate, reason, Status.WARN if correlation <= MIXING_BAD else Status.UNRELIABLE)


def stationarity_verdict(
    estimate: Estimate, drift: float, z: float, stuck: float, moves: int, nonfinite: float = 0.0
) -> Estimate:
    """The estimate with the verdict of the stationarity test: at most `warn` when |z| exceeds
    `STATIONARITY_WARN`, or when stuck particles carry more than `STUCK_WARN` of the weight;
    `unreliable` when the gradient is not finite at more than `NONFINITE_GRADIENTS` of the points
    about the final particles where the density is; unchanged otherwise. `moves`: how many extra moves the test made (a
    parameter of the reasons; `smc.stationarity_moves`).

    Example:
        >>> e = Estimate(0.0, 0.1, "replicates", 0.1, 0.01, 0.0, 100.0, 100, 0.1)
        >>> stationarity_verdict(e, 0.5, 9.0, 0.0, 20).status.value, stationarity_verdict(e, 0.01, 1.0, 0.0, 20).status.value
        ('warn', 'ok')
        >>> [r.code for r in stationarity_verdict(e, 0.01, 1.0, 0.02, 20).reasons]
        ['moves_stuck']
        >>> stationarity_verdict(e, 0.01, 1.0, 0.0, 20, nonfinite=0.01).status.value
        'unreliable'
    """
    if math.isfinite(z) and abs(z) > STATIONARITY_WARN:
        estimate = _flag(estimate, Reason("not_at_equilibrium", {"moves": int(moves), "drift": float(drift), "z": float(z)}))
    if math.isfinite(stuck) and stuck > STUCK_WARN:
        estimate = _flag(estimate, Reason("moves_stuck", {"fraction": float(stuck), "moves": int(moves)}))
    if math.isfinite(nonfinite) and nonfinite > NONFINITE_GRADIENTS:
        reason = Reason("gradient_nonfinite", {"fraction": float(nonfinite)})
        estimate = _flag(estimate, reason, Status.UNRELIABLE)
    return estimate


def population_verdict(estimate: Estimate, populations: int) -> Estimate:
    """The estimate with the verdict of its population count: an SMC estimate from fewer than
    `MIN_POPULATIONS` populations whose headline is the genealogy standard error is at most `warn`.

    One population's genealogy sees the variance of resampling and reweighting among the particles
    it has; it cannot see how far the share of particles in each mode is from the truth, and no
    count of lineages tells the two apart (measured on gmm8 at d = 200, with as many surviving
    lineages as correct runs on gauss_narrow: docs/method.md). Only replicate populations measure
    that; `ok` needs them.

    Example:
        >>> e = Estimate(0.0, 0.1, "smc-genealogy", 0.1, 0.01, 0.0, 100.0, 100, 0.1)
        >>> population_verdict(e, 1).status.value, population_verdict(e, 8).status.value
        ('warn', 'ok')
    """
    if populations >= MIN_POPULATIONS or estimate.log_z_stderr_method != "smc-genealogy":
        return estimate
    return _flag(
        estimate, Reason("few_populations", {"populations": int(populations), "min_populations": MIN_POPULATIONS})
    )
