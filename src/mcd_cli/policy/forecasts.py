"""What a pilot's measurements say about the next run: stalls and margins of the default policy.

`policy.decide` reads a pilot's record (its reasons, its populations' k̂, its stationarity z) to decide
the next effort. Two questions are answered here. *Did raising a part of the effort help?*
(`mixing_stalled`, `tails_stalled`: when it did not, that part counts as at its cap.) *Does an `ok`
pilot predict an `ok` final run?* (`predicts_ok`, with `scaled_drift` and `tail_pass_probability`:
a pilot passes the verdict's thresholds more easily than its larger final run.)
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from mcd_cli.policy.settings import DRIFT_MARGIN, STUCK_MARGIN, TAIL_PASS
from mcd_cli.stats.psis import PARETO_K_WARN, tail_length
from mcd_cli.stats.smc import MIXING_WARN, STUCK_WARN, tail_values

TAILS_STALL = 0.05  # `tails_stalled`: k̂'s mean must fall by this much when the conditional ESS is raised


def _correlation(record: Any) -> Optional[float]:
    """The move correlation a record's `moves_barely_move` reason measured, if it has one."""
    return next((r.params.get("correlation") for r in record.combined.reasons if r.code == "moves_barely_move"), None)


def tails_stalled(before: Any, after: Any) -> bool:
    """Did raising the conditional ESS from pilot `before` to pilot `after` fail to lighten the
    tails of the final weights? When the mean of the populations' k̂ fell by less than
    `TAILS_STALL` (0.05, about half the sd of one population's k̂), the tail is not the one more
    temperatures thin (on nice_mnist and brownian_motion k̂ stayed near 0.45 from ESS 0.5 to 0.9,
    resampling at every step included), and raising them further only costs time.

    Example:
        >>> from types import SimpleNamespace as S
        >>> def stage(ess, ks):
        ...     return S(effort=S(target_ess=ess, trained=False), record=S(smc=({"pareto_k_populations": ks},)))
        >>> tails_stalled(stage(0.5, [0.5, 0.4]), stage(0.7, [0.45, 0.42])), tails_stalled(stage(0.5, [0.5, 0.4]), stage(0.7, [0.2, 0.3]))
        (True, False)
    """
    if before.effort.trained or after.effort.trained or after.effort.target_ess <= before.effort.target_ess:
        return False
    k0, k1 = _mean_k(before.record), _mean_k(after.record)
    return k0 is not None and k1 is not None and k1 > k0 - TAILS_STALL


def _tail_ks(record: Any) -> list:
    """A record's populations' k̂, as the tail verdict counts them (`stats.tail_values`)."""
    sections = getattr(record, "smc", None) or ()
    ks = sections[0].get("pareto_k_populations") if sections else None
    return tail_values(ks or ())


def _mean_k(record: Any) -> Optional[float]:
    ks = _tail_ks(record)
    return sum(ks) / len(ks) if ks else None


def doubling_too_short(record: Any) -> bool:
    """Would doubling a pilot's moves leave them barely moving? Moves that mix shrink the
    correlation across a step's moves geometrically, c → c² for twice the moves (`mixing_stalled`);
    when c² stays above the verdict's `MIXING_WARN` (c above √0.3 ≈ 0.55), a pilot of twice the
    short moves would warn again, and the policy makes them longer instead. False when the record
    measured no correlation (`moves_barely_move` absent).

    Measured (15 moves of 3 leapfrog steps, 8192 particles in populations of 2048, seed 0):
    nice_flow 0.64 (twice the moves: still 0.34 at 60 moves; 15 of 15 steps: `ok`), many_well 0.42
    and mixture2 0.41 (twice the moves: many_well `ok`, mixture2 stuck in its modes).

    Example:
        >>> from types import SimpleNamespace as S
        >>> from mcd_cli.stats.reasons import Reason
        >>> rec = lambda c: S(combined=S(reasons=(Reason("moves_barely_move", {"correlation": c}),)))
        >>> doubling_too_short(rec(0.64)), doubling_too_short(rec(0.42)), doubling_too_short(S(combined=S(reasons=())))
        (True, False, False)
    """
    c = _correlation(record)
    return c is not None and math.isfinite(c) and c * c > MIXING_WARN


def _gradients(effort: Any) -> int:
    """Gradients per particle and temperature of an adaptive effort's moves: moves × leapfrog steps."""
    return effort.moves * effort.leapfrog


def mixing_stalled(before: Any, after: Any) -> bool:
    """Did raising the moves from pilot `before` to pilot `after` fail to mix? Moves that mix
    shrink the correlation between a particle before and after them geometrically, about c → c^m
    for m times the moves (m times the gradients, moves × leapfrog steps, when the moves also grew
    longer); when both pilots' moves barely moved and the correlation fell by less than half of
    that, in logarithms (above `c^((1 + m)/2)`: 0.35 from 0.5 for twice the moves), what holds the
    particles is no number of moves (a mode they cannot leave: its share of the spread stays
    whatever the moves do), and more would be wasted.

    Example:
        >>> from types import SimpleNamespace as S
        >>> from mcd_cli.stats.reasons import Reason
        >>> def stage(moves, c, leapfrog=3):
        ...     rec = S(combined=S(reasons=(Reason("moves_barely_move", {"correlation": c}),)))
        ...     return S(effort=S(moves=moves, leapfrog=leapfrog, trained=False), record=rec)
        >>> mixing_stalled(stage(15, 0.5), stage(30, 0.45)), mixing_stalled(stage(15, 0.5), stage(30, 0.3))
        (True, False)
        >>> mixing_stalled(stage(30, 0.5), stage(15, 0.25, leapfrog=15))  # 2.5 times the gradients: below 0.5^1.75 = 0.30
        False
    """
    if before.effort.trained or after.effort.trained or _gradients(after.effort) <= _gradients(before.effort):
        return False
    c0, c1 = _correlation(before.record), _correlation(after.record)
    if c0 is None or c1 is None or not (0 < c0 < 1):
        return False
    return c1 > c0 ** (0.5 * (1 + _gradients(after.effort) / _gradients(before.effort)))


def predicts_ok(
    pilot: Any, n_pilot: int, n_final: int, population: int, every: bool = True, tails: bool = True
) -> tuple[set, str]:
    """Does an `ok` pilot predict an `ok` final run of `n_final` particles? `(codes, why)`: the
    reasons it does not (empty when it does) and a phrase saying so.

    An `ok` pilot of a few populations passes the verdict's thresholds more easily than a larger
    final run would: its stationarity test has less power (`scaled_drift`) and the final run's more
    populations give more chances to a k̂ above 0.5 (`tail_pass_probability`, an effort rule stricter
    than the verdict's mean k̂). Each is asked
    with a margin (`DRIFT_MARGIN`, `TAIL_PASS`) whose false alarms cost one more pilot,
    never a wrong verdict: the final run earns its own. A pilot that is to be the answer is asked one
    more (`stuck_near_threshold`). `every=False` asks the tails what the
    verdict asks (`mean_tail_pass_probability`) instead of the effort's stricter rule: for learned
    kernels, which have no conditional ESS to raise, and whose alternative is an adaptive final run
    that fell short (`decide._after_learning`). `tails=False` asks the stationarity alone: for a pilot
    that is to be the answer, whose own verdict judged its tails (`settings.ANSWER_TAIL_MARGIN`).
    """
    codes, why = set(), []
    drift = scaled_drift(pilot, n_pilot, n_final)
    if drift is not None and drift > DRIFT_MARGIN:
        codes.add("not_at_equilibrium")
        why.append(f"its stationarity z at the final run's {n_final} particles would be {drift:.2g}")
    chance = tail_pass_probability if every else mean_tail_pass_probability
    passing = chance(pilot, n_final // population, population) if tails else None
    if passing is not None and passing < TAIL_PASS:
        codes.add("pareto_k_warn")
        which = "all" if every else "their mean"
        why.append(f"its populations' k̂ give the final run's {n_final // population} a {passing:.0%} chance of {which} ≤ 0.5")
    return codes, "; ".join(why)


def tail_pass_probability(record: Any, populations: int, population: int) -> Optional[float]:
    """The chance that `populations` new populations of `population` particles all have k̂ ≤ 0.5
    (`PARETO_K_WARN`), from the pilot's populations' k̂ (None when it has none finite).

    Each population's k̂ is taken as normal about the true k, with the sd of the generalised
    Pareto shape's estimate from M tail weights, `(1 + k)/√M` (M = `tail_length(population)`);
    the true k is estimated by the mean of the pilot's P values (`stats.tail_values`), whose own
    sd adds `1/P` to the variance.

    This asks more than the verdict does (`stats.tail_verdict` judges the mean of the final run's
    k̂s, not each): it is the policy's rule for the effort, not a prediction of the verdict. Raising
    the conditional ESS until every population's tail stays clear of 0.5 also removed a bias no
    verdict sees: brownian_motion at the first effort was 0.04 low on average (4 of 7 `ok` runs
    outside ±2 SE; docs/method.md, "The default policy").

    Example:
        >>> from types import SimpleNamespace as S
        >>> rec = lambda ks: S(smc=({"pareto_k_populations": ks},))
        >>> round(tail_pass_probability(rec([0.1, 0.05, 0.15, 0.1]), 4, 4096), 3)
        1.0
        >>> round(tail_pass_probability(rec([0.35, 0.3, 0.45, 0.3]), 4, 4096), 2)
        0.7
    """
    one = _chance_below_warn(record, population, lambda count: 1.0 + 1.0 / count)
    return None if one is None else one ** max(populations, 1)


def mean_tail_pass_probability(record: Any, populations: int, population: int) -> Optional[float]:
    """The chance that the mean k̂ of `populations` new populations of `population` particles stays
    at or below 0.5, the verdict's rule (`stats.tail_verdict`), from the pilot's populations' k̂
    (None when it has none finite).

    As in `tail_pass_probability`, one population's k̂ is normal about the true k with sd
    `s = (1 + k)/√M`, and the true k is estimated by the mean k̄ of the pilot's P values; the final
    run's mean of J values then has the variance `s² (1/P + 1/J)` about k̄.

    Example:
        >>> from types import SimpleNamespace as S
        >>> rec = lambda ks: S(smc=({"pareto_k_populations": ks},))
        >>> ks = rec([0.35, 0.3, 0.45, 0.3])
        >>> round(mean_tail_pass_probability(ks, 16, 4096), 3), round(tail_pass_probability(ks, 16, 4096), 2)
        (0.997, 0.24)
        >>> round(mean_tail_pass_probability(rec([0.5, 0.4, 0.45, 0.45]), 16, 4096), 2)
        0.8
    """
    return _chance_below_warn(record, population, lambda count: 1.0 / count + 1.0 / max(populations, 1))


def _chance_below_warn(record: Any, population: int, variance: Callable[[int], float]) -> Optional[float]:
    """The chance that a normal value about the pilot's populations' mean k̂ is at or below 0.5
    (`PARETO_K_WARN`), its variance `s² · variance(P)` for the pilot's P values of k̂, where
    `s = (1 + k)/√M` is one population's sd (M = `tail_length(population)`); None without any k̂."""
    k = _mean_k(record)
    if k is None:
        return None
    sd = (1.0 + k) / math.sqrt(tail_length(population)) * math.sqrt(variance(len(_tail_ks(record))))
    return 0.5 * math.erfc((k - PARETO_K_WARN) / (sd * math.sqrt(2.0)))


def stuck_near_threshold(pilot: Any) -> tuple[set, str]:
    """Is an `ok` pilot that would be the answer too close to the verdict's stuck threshold?
    `({"moves_stuck"}, why)` when its stuck particles carry more than `STUCK_MARGIN` of its weight
    (half the verdict's `STUCK_WARN`), else `(set(), "")`.

    Asked only of a pilot that is to be the answer (`decide`): the share is read from the few dozen
    particles in a neck, and answering from a pilot selects it by its own verdict (funnel seed 19 at
    6c700d5: 0.42 % stuck, `ok`, 7 SE low). Asked of every `ok` pilot, it sent nice_mnist seed 4 and
    brownian_motion seed 7 (886c8fe, 0.42 % and 0.45 %, pilots whose tail margin had failed anyway)
    through the flow transport, 4 times the wall time, to worse answers (docs/policy.md, "The margins").

    Example:
        >>> from types import SimpleNamespace as S
        >>> stuck_near_threshold(S(smc=({"stuck_particles": 0.0042},)))[0], stuck_near_threshold(S(smc=({"stuck_particles": 0.001},)))
        ({'moves_stuck'}, (set(), ''))
    """
    stuck = stuck_share(pilot)
    if stuck is None or stuck <= STUCK_MARGIN:
        return set(), ""
    return {"moves_stuck"}, f"its stuck particles carry {stuck:.2%} of its weight, near the verdict's {STUCK_WARN:.1%}"


def stuck_share(record: Any) -> Optional[float]:
    """The share of a record's final weight on particles its stationarity test found stuck
    (`smc.stationarity`: under 5 % acceptance over the test's moves at β = 1), None without one.

    Example:
        >>> from types import SimpleNamespace as S
        >>> stuck_share(S(smc=({"stuck_particles": 0.0042},))), stuck_share(S(smc=({},)))
        (0.0042, None)
    """
    sections = getattr(record, "smc", None) or ()
    share = sections[0].get("stuck_particles") if sections else None
    return float(share) if share is not None and math.isfinite(share) else None


def scaled_drift(record: Any, n_pilot: int, n_final: int) -> Optional[float]:
    """The pilot's stationarity |z| scaled to a run of `n_final` particles (None without one).

    The drift of log γ under extra moves is a property of the effort, not of the run's size, while
    its standard error falls as 1/√N: the final run's test sees a drift the pilot's smaller one
    may not. Judged at the final size with the margin `DRIFT_MARGIN` (2.5, below the
    verdict's 3), a pilot at equilibrium exceeds it only when its own |z| > 2.5/√(n_final/n_pilot)
    (1.8 for a final run twice its size: about 8 % of them), and the price of that false alarm is
    one more pilot, never a wrong verdict.

    Example:
        >>> from types import SimpleNamespace as S
        >>> round(scaled_drift(S(smc=({"stationarity_z": -2.5},)), 8192, 16384), 2)
        3.54
    """
    sections = getattr(record, "smc", None) or ()
    z = sections[0].get("stationarity_z") if sections else None
    if z is None or not math.isfinite(z):
        return None
    return abs(z) * math.sqrt(n_final / n_pilot)
