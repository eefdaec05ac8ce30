"""The estimation policy: pilot runs choose the effort, a fresh run at that effort estimates.

When no option fixes the method, a run starts as adaptive tempered SMC (`defaults.POLICY_START`)
and makes a small *pilot* run, with its own key. Its verdict decides what comes next: `ok` takes
the effort, anything else raises the part of it that the verdict's reasons point at (`escalate`),
and another pilot measures again, up to `POLICY_MAX_PILOTS`. A *final* run, with its own key, is
then made at the chosen effort, with enough particles for the standard error to reach `max_se`
(from the pilot's, which falls as 1/√N). The final run's estimate is reported with the verdict it
earns, whatever that is.

Without a time limit the final run has at most `MAX_FINAL_FACTOR` × `--samples` particles; with
`--time-limit` it grows to `max_se` as far as the time left allows (`_fits`). Where adaptive SMC's
last pilot is not `ok`, or is `ok` with tails its effort's margin says are too heavy and nothing
left to raise (`falls_short`), the limit leaves time to spare beside the final run
(`learn_seconds`) and `learn` asks for it, one more pilot learns MCD kernels, trained as an
importance sampler, for part of it (`POLICY_LEARNED`, its schedule learned from adaptive SMC's
temperatures), and the final run uses them instead when that pilot is `ok` and predicts an `ok`
final run (`_learn`), sized for the standard error the adaptive final run would have had; else the
final run is the adaptive one chosen before. `learn` is off by default: on brownian_motion at ten
minutes (20 seeds) the learned final runs were not measurably more accurate than the adaptive ones
they replaced and less often `ok`, at 16 times the wall time (docs/method.md, "The default
policy", step 4).

Why pilots, not "stop at the first `ok` run": the decision where to stop is made on runs whose
random numbers the reported estimate does not share, so it selects an effort, never an estimate
(a run kept because it came out `ok` would be selected by its own verdict, which biases the
coverage of its error bar). The argument and its measurement: docs/method.md, "The default policy".

Every stage is a complete run (`execute` of a `RunPlan` with `stage` set). Without a time limit
the stages are a pure function of the seed; with one, the record lists the stages that ran.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Optional

from mcd_cli.errors import Interrupted, RunFailed, TooSlow
from mcd_cli.run.defaults import (
    DEFAULT_MAX_SE, MAX_FINAL_FACTOR, PILOT_POPULATIONS, POLICY_LEARN_MIN_SECONDS, POLICY_LEARN_MIN_UPDATES,
    POLICY_LEARN_SHARE, POLICY_MAX_PILOTS,
)
from mcd_cli.run.effort import Effort, escalate, first_effort
from mcd_cli.run.pilots import doubling_too_short, mixing_stalled, predicts_ok, tails_stalled
from mcd_cli.run.plan import Progress, RunPlan
from mcd_cli.stats.importance import Status
from mcd_cli.stats.reasons import Reason

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `1.5m`, `2h` or `1d`; ValueError with what is wrong.

    Example:
        >>> parse_duration("90s"), parse_duration("10m"), parse_duration("2")
        (90.0, 600.0, 2.0)
    """
    value = str(text).strip().lower()
    number, unit = (value[:-1], value[-1]) if value[-1:] in _UNITS else (value, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"a duration is a number with s, m, h or d, such as 90s or 10m; got {text!r}") from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a duration must be positive, got {text!r}")
    return seconds


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the default policy aims at and may spend.

    Attributes:
        max_se: the standard error (nats) the final run is sized to reach.
        time_limit: seconds the whole run may take (None: no limit; `max_pilots` bounds it).
        max_pilots: pilots before the final run.
        learn: with a time limit, spend time to spare on learned MCD kernels where adaptive SMC's
            pilots end short (`falls_short`, `learn_seconds`); off by default (see the module's
            docstring).
    """

    max_se: float = DEFAULT_MAX_SE
    time_limit: Optional[float] = None
    max_pilots: int = POLICY_MAX_PILOTS
    learn: bool = False

    def __post_init__(self):
        if not (self.max_se > 0 and math.isfinite(self.max_se)):
            raise ValueError(f"max_se must be a positive number of nats, got {self.max_se}")
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {self.time_limit}")
        if self.max_pilots < 1:
            raise ValueError(f"max_pilots must be at least 1, got {self.max_pilots}")


@dataclasses.dataclass(frozen=True)
class Stage:
    """One run the policy made: a pilot, or the final run."""

    index: int
    role: str  # "pilot" or "final"
    effort: Effort
    num_samples: int
    record: Any  # its RunRecord
    seconds: float
    decision: str = ""  # what the policy concluded from it

    def as_dict(self) -> dict:
        rec = self.record
        return {
            "stage": self.index,
            "role": self.role,
            "method": self.effort.describe(),
            "effort": self.effort.as_dict(),
            "num_samples": self.num_samples,
            "log_z": rec.log_z,
            "log_z_stderr": rec.log_z_stderr,
            "status": rec.status,
            "reason_codes": sorted({r.code for r in rec.combined.reasons}),
            "seconds": round(self.seconds, 3),
            "decision": self.decision,
        }


def stage_plan(
    plan: RunPlan, effort: Effort, num_samples: int, index: int, train_stage: Optional[int] = None, pilot: bool = False,
) -> RunPlan:
    """The plan of stage `index` (a `pilot` or the final run): `plan`'s target and sizes at
    `effort`, with its own keys; a final run with trained kernels trains as its pilot
    `train_stage` did (the same kernels: the pilot's verdict then chose them, and given them the
    final run is an ordinary, unbiased one)."""
    sconf, tconf = effort.configs(plan.sconf, plan.tconf, pilot)
    return dataclasses.replace(
        plan, sconf=sconf, tconf=tconf, num_samples=num_samples, particles=effort.population, stage=index,
        train_stage=train_stage if effort.trained else None, policy=None, repeats=1,
        train_seconds=effort.train_seconds if effort.train_iterations is None else None,
        train_min_updates=effort.train_min_updates if effort.train_iterations is None else None,
    )


def final_samples(
    plan: RunPlan, effort: Effort, se: Optional[float], pilot_n: int, max_se: float, capped: bool = True,
) -> tuple[int, str]:
    """Particles for the final run: `plan.num_samples` (at least a pilot's worth, the populations an
    `ok` verdict needs), or more when the pilot's standard error, scaled by √(n_pilot/N), would stay
    above `max_se`: `N = n_pilot (se/max_se)²`, in whole populations, at most
    `MAX_FINAL_FACTOR × plan.num_samples` when `capped` (the policy's bound without a time limit;
    with one, the time left bounds the final run instead: `_fits`)."""
    need = 0 if se is None else math.ceil(pilot_n * (se / max_se) ** 2)
    n = max(plan.num_samples, pilot_n, need)
    n = -(-n // effort.population) * effort.population
    cap = MAX_FINAL_FACTOR * max(plan.num_samples, pilot_n) if capped else n
    if n > cap:
        return cap, f"the pilot's SE {se:.3g} needs {need} particles for {max_se:g}; capped at {cap}"
    if se is None:
        return n, f"{n} particles"
    return n, f"{n} particles for an SE of at most {max_se:g} (pilot SE {se:.3g} at {pilot_n})"


class StageProgress:
    """A `Progress` whose bars name the stage, the last estimate and the time left."""

    def __init__(self, progress: Progress, label: str):
        self.progress, self.label = progress, label

    def training(self, description: str, total: int, start: int = 0):
        return self.progress.training(f"{self.label}: {description}", total, start)

    def estimation(self, description: str, total: int):
        return self.progress.estimation(f"{self.label}: {description}", total)


def run_policy(
    plan: RunPlan,
    progress: Progress,
    execute_stage: Callable[[RunPlan, Progress], Any],
    clock: Callable[[], float] = time.monotonic,
) -> Any:
    """Pilots, then the final run (see the module docstring); returns the reported stage's record
    with the policy's account (`RunRecord.policy`).

    `execute_stage` runs one stage's plan (`run.execute` without a policy). Ctrl-C (`Interrupted`),
    or a failure, during a stage after another has finished returns the finished stages, the last
    one reported; so does a time limit that leaves too little for the next stage.
    """
    policy: Policy = plan.policy
    began = clock()
    stages: list[Stage] = []
    stopped = "plan"
    size_cap = policy.time_limit is None  # the final run: at most MAX_FINAL_FACTOR × --samples, or what the time fits

    def left() -> float:
        return math.inf if policy.time_limit is None else policy.time_limit - (clock() - began)

    def one(role: str, effort: Effort, n: int, train_stage: Optional[int] = None) -> Any:
        label = f"stage {len(stages) + 1} ({role})"
        if stages:
            last = stages[-1].record
            se = "" if last.log_z_stderr is None else f" ± {last.log_z_stderr:.3g}"
            label += f", last {last.log_z:.4g}{se} {last.status}"
        if policy.time_limit is not None:
            label += f", {max(left(), 0):.0f} s left"
        t0 = clock()
        shown = StageProgress(progress, label)
        record = execute_stage(stage_plan(plan, effort, n, len(stages), train_stage, role == "pilot"), shown)
        stages.append(Stage(len(stages), role, effort, n, record, clock() - t0))
        return record

    def decide(text: str) -> None:
        stages[-1] = dataclasses.replace(stages[-1], decision=text)

    def add(text: str) -> None:
        decide(f"{stages[-1].decision}; {text}" if stages[-1].decision else text)

    def fitted(effort: Effort, n: int, n_pilot: int) -> int:
        """The size a final run of `n` particles at `effort` will have: what the time left fits,
        from the last stage's time per particle, in whole populations, at least a pilot's."""
        return max(min(n, _fits(stages[-1], effort, left()) // effort.population * effort.population), n_pilot)

    effort: Optional[Effort] = first_effort(plan)
    final: Optional[tuple[Effort, int]] = None
    heavy = False  # the last adaptive pilot is `ok` but its tails miss the effort's margin
    try:
        for pilot_index in range(policy.max_pilots):
            n_pilot = PILOT_POPULATIONS * effort.population
            if stages and _predicted(stages[-1], effort, n_pilot) > left():
                stopped = "time_limit"
                break
            pilot = one("pilot", effort, n_pilot)
            # Two pilots in one geometry, before and after a raise (not across a change of variables).
            paired = len(stages) > 1 and stages[-2].effort.transport == stages[-1].effort.transport
            stalled = paired and mixing_stalled(stages[-2], stages[-1])
            thin = paired and tails_stalled(stages[-2], stages[-1])
            short = doubling_too_short(pilot)
            codes, usable, status, heavy = _codes(pilot), pilot.status == "ok", pilot.status, False
            if usable:  # an `ok` pilot must predict an `ok` final run (`predicts_ok`), of the size it will have
                n, _ = final_samples(plan, effort, pilot.log_z_stderr, n_pilot, policy.max_se, size_cap)
                n = fitted(effort, n, n_pilot)
                more, doubt = predicts_ok(pilot, n_pilot, n, effort.population)
                if more:
                    codes, usable, status = codes | more, False, f"ok, but {doubt}"
                heavy = "pareto_k_warn" in more  # a tail time to spare may learn for, if this pilot is the last
            next_effort, why = (None, "") if usable else escalate(effort, codes, plan, stalled, thin, short)
            if status.startswith("ok, but") and (next_effort is None or next_effort.trained):
                # The margin asks for more than adaptive SMC has left to raise: an `ok` pilot is
                # not a reason to change the method, so the final run is made at its effort.
                usable, next_effort, status = True, None, f"{status}; nothing left to raise in adaptive SMC"
            if usable or next_effort is None or pilot_index == policy.max_pilots - 1:
                # Only an `ok` pilot's standard error sizes the final run: another one's is not to
                # be trusted, and growing a run whose verdict will not be `ok` buys only time.
                n, size = final_samples(
                    plan, effort, pilot.log_z_stderr if usable else None, n_pilot, policy.max_se, size_cap
                )
                verdict = ("pilot ok" if status == "ok" else f"pilot {status}") if usable else (
                    f"pilot {status}, {why or 'pilots used up'}"
                )
                decide(f"{verdict}: final run at this effort, {size}")
                final = (effort, n)
                break
            decide(f"pilot {status}: {why}")
            effort = next_effort
        chosen = stages[-1]  # the pilot whose effort the final run takes
        if final is not None:
            short = falls_short(chosen, heavy)
            learning = learn_seconds(policy, final[0], left() - _predicted(chosen, *final)) if short else None
            if learning is not None and not policy.learn:
                add(f"{short}; --learn would spend up to {learning:.0f} s of the time to spare learning MCD kernels")
                learning = None
            if learning is not None:
                add(f"{short}; time to spare: first MCD kernels learned for at most {learning:.0f} s")
                se = _final_se(chosen, final[1])
                learned, n_learned = _learn(plan, policy, final[0], learning, se, one, decide, add, fitted)
                if learned is not None and _fits(stages[-1], learned, left()) < PILOT_POPULATIONS * learned.population:
                    # A pilot's worth no longer fits: the adaptive final run, cut to the time, rather than none.
                    add("no time left for a final run with these kernels: the final run is the adaptive one")
                    learned = None
                if learned is not None:
                    final, chosen = (learned, n_learned), stages[-1]
        if final is not None:
            effort, n = final
            fits = _fits(chosen, effort, left())
            if fits < n:
                n = fits // effort.population * effort.population
                decide(stages[-1].decision + f"; cut to {n} particles by the time limit")
            if n >= PILOT_POPULATIONS * effort.population:
                pilot = chosen
                one("final", effort, n, train_stage=pilot.index)
                if pilot.record.status == "unreliable" and stages[-1].record.status == "ok":
                    stages[-1] = dataclasses.replace(stages[-1], record=capped(stages[-1].record, pilot.index))
                decide("reported")
            else:
                stopped = "time_limit"
    except Interrupted:
        if not stages:
            raise
        stopped = "interrupted"
    except RunFailed as err:
        if not stages:
            raise
        stopped = f"failed: {err}"
    if stages[-1].role != "final":
        decide((stages[-1].decision + "; " if stages[-1].decision else "") + f"reported: stopped ({stopped}) before a final run")
    account = {
        "max_se": policy.max_se,
        "time_limit": policy.time_limit,
        "learn": policy.learn,
        "stopped": stopped,
        "reported_stage": stages[-1].index,
        "seconds": round(clock() - began, 3),
        "stages": [s.as_dict() for s in stages],
    }
    return dataclasses.replace(stages[-1].record, policy=account)


def falls_short(pilot: Stage, heavy: bool = False) -> str:
    """Why the adaptive final run at `pilot`'s effort would not give what was asked, or "" when it
    would: its pilot is not `ok`, or (`heavy`) it is `ok` but its populations' k̂ miss the effort's
    margin (`pilots.tail_pass_probability`), with nothing left to raise or the pilots used up: a
    tail under which adaptive SMC was measured low beyond its standard error (brownian_motion:
    docs/method.md, "The default policy", step 4). (A standard error above `max_se` is not a
    shortfall that learning is tried for: with a time limit the adaptive final run grows into the
    time left, and no learning pilot measured beside an `ok` adaptive one was used, and those that
    were `ok` had 1.2 to 6.4 times its variance per second of estimating: the same step.)"""
    if pilot.record.status != "ok":
        return f"adaptive SMC's pilot is {pilot.record.status}"
    return "adaptive SMC's pilot is ok, but its tails miss the effort's margin" if heavy else ""


def learn_seconds(policy: Policy, effort: Effort, spare: float) -> Optional[float]:
    """Seconds a learning pilot may train (`POLICY_LEARN_SHARE` of `spare`, the time the limit leaves
    beside the adaptive final run at `effort`), or None: no time limit, an effort already trained or
    transported by a flow (where the flow alone did better than learning in it), or less than
    `POLICY_LEARN_MIN_SECONDS` to train. (Whether `policy.learn` spends them is the caller's: without
    it the decision names what `--learn` would spend.)"""
    if policy.time_limit is None or effort.trained or effort.transport or not math.isfinite(spare):
        return None
    seconds = POLICY_LEARN_SHARE * spare
    return seconds if seconds >= POLICY_LEARN_MIN_SECONDS else None


def _final_se(pilot: Stage, n: int) -> Optional[float]:
    """The standard error a final run of `n` particles at `pilot`'s effort is predicted to have
    (its SE scaled by √(n_pilot/n)); None when the pilot has none."""
    se = pilot.record.log_z_stderr
    return None if se is None else se * math.sqrt(pilot.num_samples / n)


def _learn(
    plan: RunPlan, policy: Policy, adaptive: Effort, seconds: float, adaptive_se: Optional[float], one: Callable,
    decide: Callable, add: Callable, fitted: Callable[[Effort, int, int], int],
) -> tuple[Optional[Effort], int]:
    """A learning pilot: MCD kernels trained (`POLICY_LEARNED`) for at most `seconds`, then
    estimated like any pilot. Its kernels and a final size, or `(None, 0)` and the final run is the
    adaptive one. The kernels are used when the pilot made at least `POLICY_LEARN_MIN_UPDATES`
    updates, is `ok` and predicts an `ok` final run (`predicts_ok`, its tails judged by the
    verdict's own rule: learned kernels have no conditional ESS to raise, and the alternative is an
    adaptive final run that fell short, `falls_short`). The final size is what the learned pilot's
    standard error asks for `max_se`, or for `adaptive_se` (the standard error predicted for the
    adaptive final run they replace) when that is smaller, bounded by the time left as the
    adaptive run's is: the kernels are taken for a bias under that standard error, and their own
    must not hide what they remove. Training whose rate says it will not make those updates in
    `seconds` stops at the end of a chunk after the second (`training.fit`'s `min_updates`,
    `errors.TooSlow`), and no estimate is made of it. Either way the choice is made before the
    final run draws a random number, from runs whose numbers it does not share (as every pilot's)."""
    learned = Effort(
        adaptive.moves, adaptive.target_ess, adaptive.population, trained=True, leapfrog=plan.sconf.leapfrog,
        train_seconds=seconds, train_min_updates=POLICY_LEARN_MIN_UPDATES,
    )
    n_pilot = PILOT_POPULATIONS * learned.population
    try:
        record = one("pilot", learned, n_pilot)
    except TooSlow as err:
        add(f"learning stopped early ({err}): the final run is the adaptive one")
        return None, 0
    except RunFailed as err:
        add(f"learning failed ({err}): the final run is the adaptive one")
        return None, 0
    updates, status = int(getattr(record, "iterations_run", 0)), record.status
    goal = policy.max_se if adaptive_se is None else min(policy.max_se, adaptive_se)
    n, size = final_samples(plan, learned, record.log_z_stderr, n_pilot, goal, policy.time_limit is None)
    if status == "ok":
        more, doubt = predicts_ok(record, n_pilot, fitted(learned, n, n_pilot), learned.population, every=False)
        status = f"ok, but {doubt}" if more else status
    why = (
        f"fewer than {POLICY_LEARN_MIN_UPDATES}" if updates < POLICY_LEARN_MIN_UPDATES
        else "not ok" if status != "ok"
        else ""
    )
    if why:
        decide(f"pilot {status} after {updates} updates ({why}): learned kernels not used; the final run is the adaptive one")
        return None, 0
    decide(f"pilot ok after {updates} updates: final run with these kernels, {size}")
    return dataclasses.replace(learned, train_seconds=None, train_iterations=updates), n


def capped(record: Any, stage: int) -> Any:
    """`record` at most `warn`, with the reason `effort_unreliable`: its pilot at the same effort
    (stage `stage`) was `unreliable`. Two independent runs of one effort are two measurements of it;
    when one says the effort fails, the other's `ok` may be luck (funnel seed 1 of the calibration:
    pilots `unreliable`, final run `ok` at −0.26 ± 0.022). Stricter, never looser, than the run's
    own verdict; its standard error is kept."""
    combined = record.combined
    reasons = (*combined.reasons, Reason("effort_unreliable", {"stage": int(stage)}))
    return dataclasses.replace(record, combined=dataclasses.replace(combined, status=Status.WARN, reasons=reasons))


def _codes(record: Any) -> set:
    return {r.code for r in record.combined.reasons}


def _per_particle_move(stage: Stage) -> float:
    """Seconds per particle and gradient of a move (per particle for trained kernels) of a finished
    stage. For trained kernels, the estimate's own time (`estimate_seconds`) where the record has
    it: neither their training nor their start (the tempered start's run of adaptive SMC, the
    compilations) is the final run's, which reuses both; on brownian_motion a learning pilot's
    time beside its training was about five times its final run's for as many particles (35 s
    against 7 s for 16,384), and left the learned kernels no room for a final run that fitted."""
    if stage.effort.trained:
        spent = getattr(stage.record, "estimate_seconds", None)
        if spent is None:
            spent = stage.seconds - (getattr(stage.record, "train_seconds", 0.0) or 0.0)
    else:
        spent = stage.seconds
    return max(spent, 0.0) / max(stage.num_samples * stage.effort.gradients(), 1)


def _predicted(last: Stage, effort: Effort, n: int) -> float:
    """Seconds a stage of `n` particles at `effort` will take, from the last stage's time per
    particle and gradient (a higher conditional ESS adds temperatures this does not foresee)."""
    if effort.trained != last.effort.trained or effort.transport != last.effort.transport:
        return 0.0  # nothing measured yet for the other method: let it run
    return _per_particle_move(last) * n * effort.gradients()


def _fits(last: Stage, effort: Effort, seconds: float) -> int:
    """How many particles at `effort` fit in `seconds`, with a 20 % margin."""
    if not math.isfinite(seconds):
        return 2**62
    per = _per_particle_move(last) * effort.gradients()
    return int(0.8 * seconds / max(per, 1e-12))
