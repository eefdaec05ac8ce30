"""The default policy's decisions: a pure function from what has run to what runs next.

`begin(plan, policy)` gives the first pilot; `decide(state, left)` reads the stages that have run
(their typed records) and the seconds the time limit leaves, and returns a `Decision`: the next
stage to run (`Next`) or none, with the state after it (the last stage's decision words, a capped
record). Nothing here runs a sampler or reads a clock: tests call it with hand-made records.

The single run's phases (docs/policy.md):
- `pilot`: the last stage is a pilot of adaptive SMC. An `ok` pilot that predicts an `ok` final run
  (`forecasts.predicts_ok`) chooses the effort; otherwise its reasons raise it (`effort.escalate`)
  and another pilot measures again, up to `Policy.max_pilots`, while the time left fits one.
- `learning`: with `--learn` and time to spare beside an adaptive final run that falls short, one
  pilot learns MCD kernels (`LEARNED_MCD`); the final run uses them when that pilot is `ok`.
- `final`: the final run, with keys of its own, at the chosen effort; then the policy stops.

A conditional target's decisions (`decide_data`) have pilots of the first data and no trained rung.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Optional

from mcd_cli.errors import TooSlow
from mcd_cli.policy.effort import BROKEN, Effort, escalate, first_effort
from mcd_cli.policy.forecasts import (
    doubling_too_short, mixing_stalled, predicts_ok, stuck_near_threshold, tails_stalled,
)
from mcd_cli.policy import settings
from mcd_cli.policy.settings import LEARN_MIN_SECONDS, LEARN_MIN_UPDATES, LEARN_SHARE, PILOT_POPULATIONS, Policy
from mcd_cli.policy.stages import Stage, capped, codes, final_samples, final_se, fits, predicted

Phase = Literal["pilot", "learning", "final"]


@dataclasses.dataclass(frozen=True)
class Next:
    """The next stage: a pilot or the final run, at `effort`, of `num_samples` particles; a final
    run with trained kernels trains as stage `train_stage` did; `learning` marks the pilot that
    learns MCD kernels (its failure to train falls back to the adaptive final run)."""

    role: Literal["pilot", "final"]
    effort: Effort
    num_samples: int
    train_stage: Optional[int] = None
    learning: bool = False


@dataclasses.dataclass(frozen=True)
class State:
    """What the policy knows: the run's plan and `Policy`, the stages that ran, and the phase.

    `chosen` is the stage whose effort the final run takes (its pilot); `adaptive` the adaptive
    final run `(effort, particles)` a learning pilot may replace, with its predicted standard error
    `adaptive_se`."""

    plan: Any
    policy: Policy
    stages: tuple[Stage, ...] = ()
    phase: Phase = "pilot"
    heavy: bool = False  # the last adaptive pilot is `ok` but its tails miss the effort's margin
    chosen: Optional[int] = None
    adaptive: Optional[tuple[Effort, int]] = None
    adaptive_se: Optional[float] = None

    def noted(self, text: str) -> "State":
        """The state with `text` as the last stage's decision."""
        last = dataclasses.replace(self.stages[-1], decision=text)
        return dataclasses.replace(self, stages=(*self.stages[:-1], last))

    def added(self, text: str) -> "State":
        """The state with `text` added to the last stage's decision."""
        before = self.stages[-1].decision
        return self.noted(f"{before}; {text}" if before else text)


@dataclasses.dataclass(frozen=True)
class Decision:
    """The state after a decision, and the stage to run next (None: stop, for `stopped`)."""

    state: State
    next: Optional[Next] = None
    stopped: str = "plan"


def begin(plan: Any, policy: Policy) -> Decision:
    """The first pilot: adaptive SMC at the first effort (`effort.first_effort`)."""
    effort = first_effort(plan)
    return Decision(State(plan, policy), Next("pilot", effort, PILOT_POPULATIONS * effort.population))


def decide(state: State, left: float, failure: Optional[Exception] = None) -> Decision:
    """What follows the last stage of `state`, with `left` seconds to spend (inf: no limit).
    `failure`: the learning pilot stopped without a record (`TooSlow`, `RunFailed`)."""
    if state.phase == "pilot":
        return _after_pilot(state, left)
    if state.phase == "learning":
        return _after_learning(state, left, failure)
    chosen = state.stages[state.chosen]
    if chosen.record.status == "unreliable" and state.stages[-1].record.status == "ok":
        last = state.stages[-1]
        final = dataclasses.replace(last, record=capped(last.record, chosen.index))
        state = dataclasses.replace(state, stages=(*state.stages[:-1], final))
    return Decision(state.noted("reported"))


def _fitted(state: State, effort: Effort, n: int, n_pilot: int, left: float) -> int:
    """The size a final run of `n` particles at `effort` will have: what the time left fits, from the
    last stage's time per particle, in whole populations, at least a pilot's."""
    return max(min(n, fits(state.stages[-1], effort, left) // effort.population * effort.population), n_pilot)


def _after_pilot(state: State, left: float) -> Decision:
    """An adaptive pilot ran: take its effort, raise it, or stop for the time."""
    stages, policy, plan = state.stages, state.policy, state.plan
    pilot_stage = stages[-1]
    pilot, effort, n_pilot = pilot_stage.record, pilot_stage.effort, pilot_stage.num_samples
    size_cap = policy.time_limit is None  # the final run: at most MAX_FINAL_FACTOR × --samples, or what the time fits
    # Two pilots in one geometry, before and after a raise (not across a change of variables).
    paired = len(stages) > 1 and stages[-2].effort.transport == pilot_stage.effort.transport
    stalled = paired and mixing_stalled(stages[-2], pilot_stage)
    thin = paired and tails_stalled(stages[-2], pilot_stage)
    reasons, usable, status, heavy, doubted = codes(pilot), pilot.status == "ok", pilot.status, False, False
    if reasons & BROKEN:
        # The target's gradient is not finite where its density is: no run of ours can be right
        # there, so the pilot's `unreliable` verdict is the answer, without a final run.
        state = dataclasses.replace(state, chosen=pilot_stage.index)
        return Decision(state.noted(f"pilot {status}: the target's gradient is not finite where its density is: reported"))
    if usable:  # an `ok` pilot must predict an `ok` final run, of the size it will have
        n, _ = final_samples(plan, effort, pilot.log_z_stderr, n_pilot, policy.max_se, size_cap)
        answers = settings.ANSWER_FROM_PILOT and pilot.log_z_stderr is not None and pilot.log_z_stderr <= policy.max_se
        # A pilot that is to be the answer has had its tails judged by its own verdict; the tail
        # margin forecasts a final run's (settings.ANSWER_TAIL_MARGIN).
        tails = settings.ANSWER_TAIL_MARGIN or not answers
        more, doubt = predicts_ok(pilot, n_pilot, _fitted(state, effort, n, n_pilot, left), effort.population, tails=tails)
        if answers and not more:  # a pilot that is to be the answer: clear of the stuck threshold too
            more, doubt = stuck_near_threshold(pilot)
        if more:
            reasons, usable, status, doubted = reasons | more, False, f"ok, but {doubt}", True
        elif answers:
            # Tuned as a final run is, an `ok` pilot within --max-se whose stationarity predicts an
            # `ok` run of the final size answers the question (funnel seed 8 at 33bb012: an `ok`
            # pilot 0.41 low at SE 0.03, stationarity z −2.2, 3.1 at the final size); the tail
            # margin, a forecast of the final run's populations, is not asked of it.
            state = dataclasses.replace(state, chosen=pilot_stage.index)
            return Decision(state.noted(f"pilot ok, SE {pilot.log_z_stderr:.3g} within --max-se {policy.max_se:g}: reported"))
        heavy = "pareto_k_warn" in more  # a tail time to spare may learn for, if this pilot is the last
    raised, why = (None, "") if usable else escalate(
        effort, reasons, plan, stalled, thin, doubling_too_short(pilot)
    )
    if doubted and (raised is None or raised.trained):
        # The margin asks for more than adaptive SMC has left to raise: an `ok` pilot is not a
        # reason to change the method, so the final run is made at its effort.
        usable, raised, status = True, None, f"{status}; nothing left to raise in adaptive SMC"
    if usable or raised is None or len(stages) == policy.max_pilots:
        # Only an `ok` pilot's standard error sizes the final run: another one's is not to be
        # trusted, and growing a run whose verdict will not be `ok` buys only time.
        n, size = final_samples(plan, effort, pilot.log_z_stderr if usable else None, n_pilot, policy.max_se, size_cap)
        verdict = ("pilot ok" if status == "ok" else f"pilot {status}") if usable else (
            f"pilot {status}, {why or 'pilots used up'}"
        )
        state = dataclasses.replace(state.noted(f"{verdict}: final run at this effort, {size}"), heavy=heavy)
        return _after_pilots(state, (effort, n), left)
    state = state.noted(f"pilot {status}: {why}")
    n_next = PILOT_POPULATIONS * raised.population
    if predicted(pilot_stage, raised, n_next) > left:
        return Decision(state, stopped="time_limit")
    return Decision(state, Next("pilot", raised, n_next))


def falls_short(pilot: Stage, heavy: bool = False) -> str:
    """Why the adaptive final run at `pilot`'s effort would not give what was asked, or "" when it
    would: its pilot is not `ok`, or (`heavy`) it is `ok` but its populations' k̂ miss the effort's
    margin, with nothing left to raise or the pilots used up (a standard error above `max_se` is
    not a shortfall: with a time limit the adaptive final run grows into the time left)."""
    if pilot.record.status != "ok":
        return f"adaptive SMC's pilot is {pilot.record.status}"
    return "adaptive SMC's pilot is ok, but its tails miss the effort's margin" if heavy else ""


def learn_seconds(policy: Policy, effort: Effort, spare: float) -> Optional[float]:
    """Seconds a learning pilot may train (`LEARN_SHARE` of `spare`, the time the limit leaves
    beside the adaptive final run at `effort`), or None: no time limit, an effort already trained or
    transported by a flow (where the flow alone did better than learning in it), or less than
    `LEARN_MIN_SECONDS` to train. (Whether `policy.learn` spends them is the caller's: without it
    the decision names what `--learn` would spend.)"""
    if policy.time_limit is None or effort.trained or effort.transport or not math.isfinite(spare):
        return None
    seconds = LEARN_SHARE * spare
    return seconds if seconds >= LEARN_MIN_SECONDS else None


def _after_pilots(state: State, final: tuple[Effort, int], left: float) -> Decision:
    """The pilots chose `final`: learn kernels with time to spare where it falls short, or run it."""
    chosen = state.stages[-1]
    state = dataclasses.replace(state, chosen=chosen.index)
    short = falls_short(chosen, state.heavy)
    learning = learn_seconds(state.policy, final[0], left - predicted(chosen, *final)) if short else None
    if learning is not None and not state.policy.learn:
        state = state.added(f"{short}; --learn would spend up to {learning:.0f} s of the time to spare learning MCD kernels")
        learning = None
    if learning is None:
        return _final(state, final, left)
    state = state.added(f"{short}; time to spare: first MCD kernels learned for at most {learning:.0f} s")
    adaptive = final[0]
    learned = Effort(
        adaptive.moves, adaptive.target_ess, adaptive.population, trained=True, leapfrog=state.plan.sconf.leapfrog,
        train_seconds=learning, train_min_updates=LEARN_MIN_UPDATES,
    )
    state = dataclasses.replace(state, phase="learning", adaptive=final, adaptive_se=final_se(chosen, final[1]))
    return Decision(state, Next("pilot", learned, PILOT_POPULATIONS * learned.population, learning=True))


def _after_learning(state: State, left: float, failure: Optional[Exception]) -> Decision:
    """The learning pilot ran (or stopped): its kernels and a final size, or the adaptive final run.
    The kernels are used when the pilot made at least `LEARN_MIN_UPDATES` updates, is `ok` and
    predicts an `ok` final run (its tails judged by the verdict's own rule: `every=False`), sized
    for `max_se` or the adaptive final run's predicted standard error, whichever is smaller."""
    if failure is not None:
        what = "learning stopped early" if isinstance(failure, TooSlow) else "learning failed"
        state = state.added(f"{what} ({failure}): the final run is the adaptive one")
        return _final(state, state.adaptive, left)
    policy, stage = state.policy, state.stages[-1]
    record, learned, n_pilot = stage.record, stage.effort, stage.num_samples
    updates, status = int(getattr(record, "iterations_run", 0)), record.status
    goal = policy.max_se if state.adaptive_se is None else min(policy.max_se, state.adaptive_se)
    n, size = final_samples(state.plan, learned, record.log_z_stderr, n_pilot, goal, policy.time_limit is None)
    if status == "ok":
        more, doubt = predicts_ok(record, n_pilot, _fitted(state, learned, n, n_pilot, left), learned.population, every=False)
        status = f"ok, but {doubt}" if more else status
    why = f"fewer than {LEARN_MIN_UPDATES}" if updates < LEARN_MIN_UPDATES else "not ok" if status != "ok" else ""
    if why:
        state = state.noted(
            f"pilot {status} after {updates} updates ({why}): learned kernels not used; the final run is the adaptive one"
        )
        return _final(state, state.adaptive, left)
    state = state.noted(f"pilot ok after {updates} updates: final run with these kernels, {size}")
    learned = dataclasses.replace(learned, train_seconds=None, train_iterations=updates)
    if fits(stage, learned, left) < PILOT_POPULATIONS * learned.population:
        # A pilot's worth no longer fits: the adaptive final run, cut to the time, rather than none.
        state = state.added("no time left for a final run with these kernels: the final run is the adaptive one")
        return _final(state, state.adaptive, left)
    return _final(dataclasses.replace(state, chosen=stage.index), (learned, n), left)


def _final(state: State, final: tuple[Effort, int], left: float) -> Decision:
    """The final run at `final`, cut to what the time left fits; none when not a pilot's worth fits."""
    effort, n = final
    room = fits(state.stages[state.chosen], effort, left)
    if room < n:
        n = room // effort.population * effort.population
        state = state.noted(state.stages[-1].decision + f"; cut to {n} particles by the time limit")
    state = dataclasses.replace(state, phase="final")
    if n < PILOT_POPULATIONS * effort.population:
        return Decision(state, stopped="time_limit")
    return Decision(state, Next("final", effort, n, train_stage=state.chosen))


def decide_data(state: State, left: float, failure: Optional[Exception] = None) -> Decision:
    """`decide` for a conditional target: each pilot estimates the first data (`policy.perdatum`),
    and its reasons are the union of theirs. No rung trains (training per datum is the cost the
    policy avoids), and no time limit applies; the final run estimates every datum."""
    if state.phase == "final":
        return Decision(state.noted("reported"))
    stages, policy, plan = state.stages, state.policy, state.plan
    pilot = stages[-1]
    effort, n_pilot, ok = pilot.effort, pilot.num_samples, pilot.record.all_ok
    raised, why = (None, "") if ok else escalate(effort, pilot.record.codes, plan, can_transport=False)
    if raised is not None and raised.trained:  # no trained rung per datum
        raised, why = None, "nothing left to raise in adaptive SMC"
    elif raised is not None and len(stages) == policy.max_pilots:
        raised, why = None, "pilots used up"
    if raised is not None:
        state = state.noted(f"pilot data not all ok: {why}")
        return Decision(state, Next("pilot", raised, PILOT_POPULATIONS * raised.population))
    # Sized for the largest pilot datum's SE.
    n, size = final_samples(plan, effort, pilot.record.max_stderr, n_pilot, policy.max_se)
    verdict = "pilot data ok" if ok else f"pilot data not all ok, {why}"
    state = state.noted(f"{verdict}: final run over every datum at this effort, {size}")
    return Decision(dataclasses.replace(state, phase="final", chosen=pilot.index), Next("final", effort, n))
