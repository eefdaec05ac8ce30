"""The policy's decision as a pure function (`policy.decide`): hand-made records in, the next stage
out, no sampler run and no clock read (the driver's tests are in test_policy.py)."""

from __future__ import annotations

import dataclasses
import math

from test_policy import _Combined, _plan, _Record

from mcd_cli import policy as pol
from mcd_cli.policy import settings
from mcd_cli.stats.reasons import Reason


def _record(status, se=0.01, *codes):
    return _Record(0.0, se, status, _Combined(tuple(Reason(c, {}) for c in codes)))


def _ran(decision: pol.Decision, record, seconds=1.0) -> pol.State:
    """The state after the stage `decision` asked for ran and gave `record`."""
    state, step = decision.state, decision.next
    stage = pol.Stage(len(state.stages), step.role, step.effort, step.num_samples, record, seconds)
    return dataclasses.replace(state, stages=(*state.stages, stage))


def test_the_first_decision_is_a_pilot_at_the_first_effort():
    first = pol.begin(_plan(), pol.Policy())
    effort = pol.first_effort(_plan())
    assert first.next == pol.Next("pilot", effort, settings.PILOT_POPULATIONS * effort.population)
    assert first.state.stages == () and first.state.phase == "pilot"


def test_under_the_fresh_final_rule_an_ok_pilot_chooses_the_final_run_at_its_effort(monkeypatch):
    """The rule before the answer from the pilot (`calibration.py --fresh-final`)."""
    monkeypatch.setattr(settings, "ANSWER_FROM_PILOT", False)
    first = pol.begin(_plan(), pol.Policy(max_se=0.1))
    decision = pol.decide(_ran(first, _record("ok", 0.05)), math.inf)
    assert decision.next == pol.Next("final", first.next.effort, 16384, train_stage=0)
    assert decision.state.phase == "final" and decision.state.chosen == 0
    assert decision.state.stages[0].decision.startswith("pilot ok: final run at this effort, 16384 particles")


def test_moves_that_did_not_mix_raise_the_moves_for_another_pilot():
    first = pol.begin(_plan(), pol.Policy())
    decision = pol.decide(_ran(first, _record("warn", 0.05, "moves_barely_move")), math.inf)
    assert decision.next.role == "pilot" and decision.next.effort.moves == 2 * first.next.effort.moves
    assert decision.state.stages[0].decision == "pilot warn: the moves did not mix: more moves"


def test_no_time_for_the_next_pilot_stops_the_policy():
    first = pol.begin(_plan(), pol.Policy(time_limit=10.0))
    decision = pol.decide(_ran(first, _record("warn", 0.05, "moves_barely_move"), seconds=8.0), left=2.0)
    assert decision.next is None and decision.stopped == "time_limit"


def test_an_ok_final_run_after_an_unreliable_pilot_is_capped_at_warn_and_reported():
    first = pol.begin(_plan(), pol.Policy(max_pilots=1))
    chose = pol.decide(_ran(first, _record("unreliable", None, "pareto_k_high")), math.inf)
    assert chose.next.role == "final"
    done = pol.decide(_ran(chose, _record("ok", 0.01)), math.inf)
    assert done.next is None and done.stopped == "plan"
    final = done.state.stages[-1]
    assert final.decision == "reported" and final.record.status == "warn"
    assert "effort_unreliable" in {r.code for r in final.record.combined.reasons}


def test_the_decision_is_a_function_of_its_inputs():
    """The same state and time left give the same decision (nothing else is read)."""
    first = pol.begin(_plan(), pol.Policy(time_limit=100.0))
    state = _ran(first, _record("warn", 0.05, "pareto_k_warn"))
    assert pol.decide(state, 50.0) == pol.decide(state, 50.0)


def test_an_ok_pilot_within_max_se_is_the_answer():
    """`settings.ANSWER_FROM_PILOT`, the default: no fresh final run after an `ok` pilot within
    --max-se; one above it, or not `ok`, decides as the rule before did."""
    assert settings.ANSWER_FROM_PILOT
    first = pol.begin(_plan(), pol.Policy(max_se=0.1))
    decision = pol.decide(_ran(first, _record("ok", 0.05)), math.inf)
    assert decision.next is None and decision.stopped == "plan" and decision.state.chosen == 0
    assert decision.state.stages[0].decision == "pilot ok, SE 0.05 within --max-se 0.1: reported"
    above = pol.decide(_ran(first, _record("ok", 0.2)), math.inf)
    assert above.next.role == "final" and above.next.num_samples > first.next.num_samples
    warn = pol.decide(_ran(first, _record("warn", 0.05, "moves_barely_move")), math.inf)
    assert warn.next.role == "pilot"


def test_a_pilot_the_forecasts_doubt_is_not_the_answer(monkeypatch):
    """An `ok` pilot within --max-se is the answer only where a final run would have been made from
    it: one whose stationarity z at the final run's size passes the margin (funnel seed 8 at 33bb012:
    z −2.2 at 8,192, 0.41 low) raises the effort as before, and one just inside it is reported."""
    monkeypatch.setattr(settings, "ANSWER_FROM_PILOT", True)
    first = pol.begin(_plan(), pol.Policy(max_se=0.1))
    drifting = dataclasses.replace(_record("ok", 0.03), smc=({"stationarity_z": -2.2},))
    decision = pol.decide(_ran(first, drifting), math.inf)
    assert decision.next is not None and decision.next.role == "pilot"
    assert "stationarity z at the final run's 16384 particles would be 3.1" in decision.state.stages[0].decision
    steady = dataclasses.replace(_record("ok", 0.03), smc=({"stationarity_z": -1.7},))  # 2.4 at 16,384
    answered = pol.decide(_ran(first, steady), math.inf)
    assert answered.next is None and answered.state.chosen == 0


def test_the_tail_margin_is_not_asked_of_a_pilot_that_is_the_answer(monkeypatch):
    """An `ok` pilot within --max-se whose populations' k̂ (mean 0.39) give a final run's eight only a
    small chance of all ≤ 0.5 is the answer (`settings.ANSWER_TAIL_MARGIN` off, the default): its own
    verdict judged its tails, and the final run the margin forecasts is not made. The rule before
    raised the effort; a pilot a final run follows (SE above --max-se) is still asked."""
    monkeypatch.setattr(settings, "ANSWER_FROM_PILOT", True)
    assert not settings.ANSWER_TAIL_MARGIN
    first = pol.begin(_plan(), pol.Policy(max_se=0.1))
    tails = {"pareto_k_populations": [0.42, 0.35, 0.4, 0.38]}
    heavy = dataclasses.replace(_record("ok", 0.05), smc=(tails,))
    answered = pol.decide(_ran(first, heavy), math.inf)
    assert answered.next is None and answered.state.chosen == 0
    assert answered.state.stages[0].decision == "pilot ok, SE 0.05 within --max-se 0.1: reported"
    sized = pol.decide(_ran(first, dataclasses.replace(_record("ok", 0.2), smc=(tails,))), math.inf)
    assert sized.next.role == "pilot" and "chance of all ≤ 0.5" in sized.state.stages[0].decision
    monkeypatch.setattr(settings, "ANSWER_TAIL_MARGIN", True)
    before = pol.decide(_ran(first, heavy), math.inf)
    assert before.next.role == "pilot" and before.next.effort.target_ess > first.next.effort.target_ess
    assert "chance of all ≤ 0.5" in before.state.stages[0].decision


def test_a_pilot_with_stuck_weight_near_the_verdicts_threshold_is_not_the_answer(monkeypatch):
    """Funnel seed 19 (6c700d5): an `ok` pilot whose stuck particles carried 0.42 % of its weight,
    below the verdict's 0.5 % (`STUCK_WARN`), was reported 0.35 nats (7 SE) low. Above the policy's
    margin (`STUCK_MARGIN`, 0.25 %) a pilot that would be the answer asks for what `moves_stuck` asks
    for, the flow transport; below it the pilot is the answer."""
    monkeypatch.setattr(settings, "ANSWER_FROM_PILOT", True)
    first = pol.begin(_plan(), pol.Policy(max_se=0.1))
    stuck = dataclasses.replace(_record("ok", 0.05), smc=({"stuck_particles": 0.0042},))
    decision = pol.decide(_ran(first, stuck), math.inf)
    assert decision.next is not None and decision.next.role == "pilot" and decision.next.effort.transport
    assert "its stuck particles carry 0.42% of its weight" in decision.state.stages[0].decision
    clear = dataclasses.replace(_record("ok", 0.05), smc=({"stuck_particles": 0.002},))
    answered = pol.decide(_ran(first, clear), math.inf)
    assert answered.next is None and answered.state.chosen == 0
    # A pilot a fresh final run follows (SE above --max-se) is not asked: that run's verdict is its own.
    sized = dataclasses.replace(_record("ok", 0.2), smc=({"stuck_particles": 0.0042},))
    final = pol.decide(_ran(first, sized), math.inf)
    assert final.next.role == "final" and not final.next.effort.transport


def test_a_pilot_that_may_be_the_answer_is_tuned_as_a_final_run(monkeypatch):
    """A pilot's populations tune their moves from their own particles (biased, cheaper), unless the
    pilot may be the answer; a final run always tunes on a population of its own."""
    from mcd_cli.policy.driver import stage_plan

    first = pol.begin(_plan(), pol.Policy())
    assert stage_plan(_plan(), first.next, 0).sconf.refine_tuning == "pilot"  # the default rule
    monkeypatch.setattr(settings, "ANSWER_FROM_PILOT", False)
    assert stage_plan(_plan(), first.next, 0).sconf.refine_tuning == "particles"


def test_a_target_whose_gradient_is_not_finite_raises_no_effort():
    """`gradient_nonfinite` is the target's code to mend: no more pilots and no final run, the pilot's
    `unreliable` verdict is reported."""
    first = pol.begin(_plan(), pol.Policy())
    decision = pol.decide(_ran(first, _record("unreliable", None, "gradient_nonfinite")), math.inf)
    assert decision.next is None and decision.stopped == "plan" and decision.state.chosen == 0
    assert "not finite where its density is: reported" in decision.state.stages[0].decision
