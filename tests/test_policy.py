"""The default estimation policy (`mcd_cli.policy`): pilots choose the effort; an `ok` pilot within
--max-se is the answer, and otherwise a fresh run estimates.

The decisions are tested with a stand-in for `execute` that returns scripted verdicts (no JAX), so
every branch is exact; one end-to-end run checks the record and its reproducibility. The ladder's
tests run under the rule of a fresh final run after every usable pilot (`_policy_run`'s
`answer_from_pilot=False`, `settings.ANSWER_FROM_PILOT`), so that each ends in a final run whose
plan they can read; the ladder is the same under both rules.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Optional
from unittest import mock

import pytest
from conftest import records

from mcd_cli import run
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import Interrupted, RunFailed, TooSlow
from mcd_cli import policy as pol
from mcd_cli.policy import forecasts, settings
from mcd_cli.run import ADAPTIVE_SMC
from mcd_cli.stats.reasons import Reason


@dataclasses.dataclass(frozen=True)
class _Combined:
    reasons: tuple
    status: Any = None  # set by the policy (`policy.capped`), as on a RunRecord's `combined`


@dataclasses.dataclass(frozen=True)
class _Record:
    """The parts of a RunRecord the policy reads (`status` from `combined` once the policy set it)."""

    log_z: float
    log_z_stderr: Optional[float]
    verdict: str
    combined: _Combined
    plan: Any = None
    policy: Optional[dict] = None
    smc: tuple = ()
    iterations_run: int = 0
    train_seconds: float = 0.0
    estimate_seconds: float = 0.0

    @property
    def status(self) -> str:
        return self.verdict if self.combined.status is None else self.combined.status.value


class _Target:
    dim = 2


def _plan() -> run.RunPlan:
    return run.RunPlan(target=_Target(), sconf=SamplerConfig(), tconf=TrainConfig(), num_samples=16384)


def _policy_run(execute_stage, clock=time.monotonic, answer_from_pilot=False, **policy):
    """The default policy on `_plan()` with `pol.Policy(**policy)`, its stages run by `execute_stage`,
    under the rule `answer_from_pilot` (`settings.ANSWER_FROM_PILOT`; the module docstring)."""
    with mock.patch.object(settings, "ANSWER_FROM_PILOT", answer_from_pilot):
        return pol.execute(_plan(), pol.Policy(**policy), run.NoProgress(), execute_stage, clock)


def _script(*verdicts, seconds=1.0, clock=None, start=0.0):
    """An `execute_stage` returning the scripted `(status, se, codes)` in turn (a fourth item: the
    updates a learning pilot made, each taking 0.1 s of the clock, beside `start` seconds of its
    start that are neither training nor estimating), and its calls."""
    calls = []

    def execute_stage(plan, progress):
        status, se, codes, *updates = verdicts[len(calls)]
        calls.append(plan)
        trained = 0.1 * updates[0] if updates else 0.0
        if clock is not None:
            clock.now += seconds * plan.num_samples / 8192 + trained + (start if updates else 0.0)
        if status == "interrupt":
            raise Interrupted("stopped", 0, 0)
        if status == "failed":
            raise RunFailed("training diverged")
        if status == "slow":
            raise TooSlow(120, 60.0, plan.tconf.min_updates, plan.tconf.max_seconds)
        return _Record(
            0.0, se, status, _Combined(tuple(Reason(c, {}) for c in codes)), plan,
            iterations_run=updates[0] if updates else 0, train_seconds=trained,
            estimate_seconds=seconds * plan.num_samples / 8192,
        )

    return execute_stage, calls


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_by_default_an_ok_pilot_within_max_se_is_the_answer_and_one_above_it_sizes_a_final_run():
    """The default rule: the pilot, tuned as a final run is (on a population of its own, not on its
    own particles), is reported where it is `ok` within --max-se; above --max-se a final run is
    grown to reach it, and a pilot that is not `ok` raises the effort as before."""
    assert settings.ANSWER_FROM_PILOT
    execute_stage, calls = _script(("ok", 0.05, ()))
    rec = _policy_run(execute_stage, answer_from_pilot=True, max_se=0.1)
    (pilot,) = calls
    assert rec.plan is pilot and rec.status == "ok" and pilot.sconf.refine_tuning == "pilot"
    assert rec.policy["reported_stage"] == 0 and [s["role"] for s in rec.policy["stages"]] == ["pilot"]
    assert rec.policy["stages"][0]["decision"].startswith("pilot ok, SE 0.05 within --max-se 0.1: reported")
    execute_stage, calls = _script(("ok", 0.2, ()), ("ok", 0.1, ()))
    rec = _policy_run(execute_stage, answer_from_pilot=True, max_se=0.1)
    assert [c.stage for c in calls] == [0, 1] and calls[1].num_samples > calls[0].num_samples
    assert rec.plan is calls[1] and rec.policy["reported_stage"] == 1
    execute_stage, calls = _script(("warn", 0.05, ("moves_barely_move",)), ("ok", 0.05, ()))
    rec = _policy_run(execute_stage, answer_from_pilot=True, max_se=0.1)
    assert [c.sconf.refine_steps for c in calls] == [15, 30] and rec.plan is calls[1]
    assert [s["role"] for s in rec.policy["stages"]] == ["pilot", "pilot"] and rec.policy["reported_stage"] == 1


def test_an_ok_pilot_is_followed_by_a_fresh_final_run_which_is_reported():
    execute_stage, calls = _script(("ok", 0.05, ()), ("warn", 0.03, ("ess_rough",)))
    rec = _policy_run(execute_stage)
    pilot, final = calls
    # Own keys for every stage; the final is reported with the verdict it earned, even if worse.
    assert (pilot.stage, final.stage) == (0, 1)
    assert rec.plan is final and rec.status == "warn"
    assert pilot.sconf.adaptive and pilot.sconf.backward == "ais" and pilot.tconf.iterations == 0
    assert pilot.num_samples == pol.PILOT_POPULATIONS * pilot.particles
    # the same effort; the final run replays a tuning population's temperatures (Ẑ unbiased),
    # the pilot adapts from its own particles
    assert dataclasses.replace(final.sconf, refine_tuning="particles") == pilot.sconf and final.num_samples == 16384
    assert (pilot.sconf.refine_tuning, final.sconf.refine_tuning) == ("particles", "pilot")
    account = rec.policy
    assert account["stopped"] == "plan" and account["reported_stage"] == 1
    assert [s["role"] for s in account["stages"]] == ["pilot", "final"]
    assert account["stages"][1]["decision"] == "reported"


def test_the_final_run_grows_until_the_pilots_standard_error_reaches_max_se():
    execute_stage, calls = _script(("ok", 0.2, ()), ("ok", 0.1, ()))
    _policy_run(execute_stage, max_se=0.1)
    pilot, final = calls
    need = pilot.num_samples * (0.2 / 0.1) ** 2  # SE falls as 1/sqrt(N)
    assert final.num_samples >= need and final.num_samples % pilot.particles == 0
    assert final.num_samples < need + pilot.particles
    # ...but never beyond the cap without a time limit.
    execute_stage, calls = _script(("ok", 5.0, ()), ("ok", 0.1, ()))
    _policy_run(execute_stage, max_se=0.1)
    assert calls[1].num_samples == settings.MAX_FINAL_FACTOR * 16384


def test_with_a_time_limit_the_final_run_grows_past_the_cap_as_far_as_the_time_left_allows():
    # The pilot's SE of 0.05 at 8,192 particles needs 204,800 for 0.01, past the cap of 8 × 16,384;
    # at 1 s per 8,192 particles they take 25 s, and 400 s leave room: no learning is tried.
    clock = _Clock()
    execute_stage, calls = _script(("ok", 0.05, ()), ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, time_limit=400.0, max_se=0.01)
    pilot, final = calls
    assert final.num_samples == 204800 > settings.MAX_FINAL_FACTOR * 16384 and final.sconf.adaptive
    assert "204800 particles for an SE of at most 0.01" in rec.policy["stages"][0]["decision"]
    # Where the time left does not reach max_se, the final run takes what fits (0.8 of the 399 s
    # left at 1 s per 8,192 particles), not a learning pilot: none measured beside an `ok` adaptive
    # pilot was used (docs/method.md, "The default policy", step 4).
    clock = _Clock()
    execute_stage, calls = _script(("ok", 0.05, ()), ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, time_limit=400.0, max_se=0.001)
    assert len(calls) == 2 and calls[1].sconf.adaptive
    fits = int(0.8 * 399.0 * 8192) // pilot.particles * pilot.particles
    assert calls[1].num_samples == fits and f"cut to {fits} particles" in rec.policy["stages"][0]["decision"]


def test_only_an_ok_pilot_sizes_the_final_run():
    """A last pilot that is not `ok` has a standard error nobody should trust: the final run is made
    at `--samples` (or the pilot's size), not grown towards max_se from it."""
    bad = ("warn", 5.0, ("pareto_k_warn",))
    execute_stage, calls = _script(*[bad] * 4, ("warn", 5.0, ()))
    _policy_run(execute_stage, max_se=0.1)
    stages = [c.stage for c in calls]
    assert stages == list(range(len(calls))) and calls[-1].num_samples == max(16384, calls[-2].num_samples)


@pytest.mark.parametrize(
    "codes, changed",
    [
        (("not_at_equilibrium",), {"moves"}),
        (("moves_barely_move",), {"moves"}),
        (("pareto_k_high",), {"target_ess", "population"}),
        (("genealogy_collapsed",), {"population"}),
        # Moves before particles: a population that did not mix is not grown until it does...
        (("ess_rough", "not_at_equilibrium"), {"moves"}),
        # ...but degenerate weights grow it alongside.
        (("pareto_k_warn", "not_at_equilibrium"), {"moves", "target_ess", "population"}),
    ],
)
def test_each_family_of_reasons_raises_its_own_part_of_the_effort(codes, changed):
    execute_stage, calls = _script(("warn", 0.05, codes), ("ok", 0.05, ()), ("ok", 0.05, ()))
    rec = _policy_run(execute_stage)
    first, second = (pol.Effort(**s["effort"]) for s in rec.policy["stages"][:2])
    differ = {f.name for f in dataclasses.fields(first) if getattr(first, f.name) != getattr(second, f.name)}
    assert differ == changed
    assert calls[1].sconf.refine_steps == second.moves and calls[1].sconf.target_ess == second.target_ess


def test_a_small_population_grows_once_its_moves_are_at_their_cap():
    """The moves double to their cap, then grow longer (the last rung); only then does the population grow."""
    codes = {"genealogy_collapsed", "not_at_equilibrium"}
    mixing = pol.Effort(settings.MAX_MOVES // 2, 0.5, 2048)
    raised, _ = pol.escalate(mixing, codes, _plan())
    assert (raised.moves, raised.leapfrog, raised.population) == (settings.MAX_MOVES, 3, 2048)
    raised, why = pol.escalate(raised, codes, _plan())
    assert (raised.moves, raised.leapfrog, raised.population) == (settings.LONG_MOVES, settings.LONG_LEAPFROG, 2048)
    assert "longer moves" in why
    raised, why = pol.escalate(raised, codes, _plan())
    assert (raised.moves, raised.leapfrog, raised.population) == (settings.LONG_MOVES, settings.LONG_LEAPFROG, 4096)
    assert "larger" in why


def test_stuck_particles_send_the_run_through_a_fitted_flow_first():
    """`moves_stuck` (a funnel's neck): from auto's start, the next pilot samples the target through
    a fitted flow (`--init flow`), from the first effort, whatever else the pilot asked for."""
    raised, why = pol.escalate(pol.Effort(30, 0.7, 4096), {"moves_stuck", "moves_barely_move", "pareto_k_warn"}, _plan())
    assert raised == dataclasses.replace(pol.first_effort(_plan()), transport=True) and "flow" in why
    sconf, _ = raised.configs(SamplerConfig(), TrainConfig())
    assert sconf.init == "flow" and raised.describe().startswith("adaptive SMC through a fitted flow, ")
    assert raised.as_dict()["transport"] is True and "transport" not in pol.Effort(15, 0.5, 2048).as_dict()


def test_stuck_particles_once_transported_raise_nothing_but_do_not_stop_the_other_reasons():
    """Once transported (or from a start the user chose), no rung of adaptive SMC or training moves
    stuck particles, so alone they end the escalation; with a reason that has something left to
    raise, that part is raised, in the same geometry; at the long rung they do not send the run to
    trained kernels."""
    first = pol.Effort(15, 0.5, 2048, transport=True)
    assert pol.escalate(first, {"moves_stuck"}, _plan())[0] is None
    chosen = dataclasses.replace(_plan(), sconf=SamplerConfig(init="laplace"))
    assert pol.escalate(pol.Effort(15, 0.5, 2048), {"moves_stuck"}, chosen)[0] is None
    assert pol.escalate(pol.Effort(15, 0.5, 2048), {"moves_stuck"}, _plan(), can_transport=False)[0] is None
    raised, _ = pol.escalate(first, {"moves_stuck", "moves_barely_move"}, _plan())
    assert (raised.moves, raised.trained, raised.transport) == (30, False, True)
    long = pol.Effort(15, 0.5, 2048, leapfrog=settings.LONG_LEAPFROG, transport=True)
    raised, why = pol.escalate(long, {"moves_stuck", "moves_barely_move"}, _plan())
    assert raised is None and "stuck" in why


def test_the_effort_carries_the_leapfrog_steps_into_the_run_and_its_description():
    """The first effort takes the run's --leapfrog; an adaptive effort sets it on the stage's sampler
    and says it; the long rung costs its gradients in the time prediction."""
    plan = dataclasses.replace(_plan(), sconf=SamplerConfig(leapfrog=5))
    first = pol.first_effort(plan)
    assert first.leapfrog == 5 and pol.first_effort(_plan()).leapfrog == SamplerConfig().leapfrog
    long = pol.Effort(15, 0.5, 2048, leapfrog=15)
    sconf, _ = long.configs(SamplerConfig(), TrainConfig())
    assert (sconf.refine_steps, sconf.leapfrog) == (15, 15)
    assert long.describe() == "adaptive SMC, 15 moves of 15 leapfrog steps, ESS 0.5, populations of 2048"
    assert long.gradients() == 225 and dataclasses.replace(long, trained=True).gradients() == 1
    # Moves already long (--leapfrog at least settings.LONG_LEAPFROG) are the last rung: trained kernels next.
    raised, why = pol.escalate(long, {"moves_barely_move"}, _plan())
    assert raised.trained and "trained kernels" in why


def test_a_time_limit_counts_the_gradients_of_longer_moves():
    """A pilot of 30 moves of 3 steps took 10 s; the long rung (15 of 15: 2.5 times the gradients)
    would take 25 s, which 20 s left cannot hold: the run stops before it."""
    clock = _Clock()
    bad = ("warn", 0.05, ("moves_barely_move",))
    execute_stage, calls = _script(bad, bad, bad, clock=clock, seconds=10.0)
    # (the stand-in takes 10 s per 8192 particles whatever the effort: 40 s hold the first two pilots)
    rec = _policy_run(execute_stage, clock=clock, time_limit=40.0)
    assert [(c.sconf.refine_steps, c.sconf.leapfrog) for c in calls] == [(15, 3), (30, 3)]
    assert rec.policy["stopped"] == "time_limit"


def _barely(correlation: float) -> _Record:
    return _Record(0.0, 0.05, "warn", _Combined((Reason("moves_barely_move", {"correlation": correlation}),)))


@pytest.mark.parametrize("second, then", [(0.45, "trained"), (0.2, "longer moves")])
def test_moves_that_stop_mixing_better_go_to_trained_kernels(second, then):
    """Doubling the moves took the correlation from 0.5 to `second`: geometric mixing would give
    0.25 (half of that, in logarithms, 0.35), so 0.45 means the moves are stuck (the next pilot
    trains) and 0.2 that they mix (the moves, at their cap, grow longer: the last rung)."""
    calls, verdicts = [], [_barely(0.5), _barely(second), _Record(0.0, 0.05, "ok", _Combined(()))]

    def execute_stage(plan, progress):
        calls.append(plan)
        return dataclasses.replace(verdicts[min(len(calls), 3) - 1], plan=plan)

    _policy_run(execute_stage)
    moves = [c.sconf.refine_steps for c in calls[:3]]
    assert moves[:2] == [ADAPTIVE_SMC.refine_steps, 2 * ADAPTIVE_SMC.refine_steps]
    if then == "trained":
        assert calls[2].sconf.backward == "mcd" and not calls[2].sconf.adaptive
    else:
        assert calls[2].sconf.adaptive and (moves[2], calls[2].sconf.leapfrog) == (settings.LONG_MOVES, settings.LONG_LEAPFROG)


@pytest.mark.parametrize("third, stuck", [(0.45, True), (0.1, False)])
def test_moves_that_twice_as_many_would_leave_barely_moving_grow_longer_at_once(third, stuck):
    """A first pilot's correlation 0.64: twice the moves would leave 0.64² = 0.41 > 0.3 (the
    warning), so the next pilot makes them longer (15 of 15 leapfrog steps) instead. Barely moving
    there too, the next one trains; the decision says whether 5 times the gradients lowered the
    correlation as mixing would (0.64³ = 0.26: 0.45 is stuck, 0.1 is not)."""
    ok = _Record(0.0, 0.05, "ok", _Combined(()))
    calls, verdicts = [], [_barely(0.64), _barely(third), ok, ok]

    def execute_stage(plan, progress):
        calls.append(plan)
        return dataclasses.replace(verdicts[len(calls) - 1], plan=plan)

    rec = _policy_run(execute_stage)
    assert [(c.sconf.refine_steps, c.sconf.leapfrog) for c in calls[:2]] == [
        (ADAPTIVE_SMC.refine_steps, 3), (settings.LONG_MOVES, settings.LONG_LEAPFROG),
    ]
    assert "longer moves (15 of 15 leapfrog steps)" in rec.policy["stages"][0]["decision"]
    assert rec.policy["stages"][1]["method"] == "adaptive SMC, 15 moves of 15 leapfrog steps, ESS 0.5, populations of 2048"
    assert calls[2].sconf.backward == "mcd" and not calls[2].sconf.adaptive
    assert ("more moves stopped helping" in rec.policy["stages"][1]["decision"]) == stuck
    # 0.5 (0.25 after doubling) doubles the moves, as the test above shows.
    assert forecasts.doubling_too_short(_barely(0.64)) and not forecasts.doubling_too_short(_barely(0.5))


@pytest.mark.parametrize("z, escalated", [(2.0, True), (1.6, False)])
def test_an_ok_pilot_whose_drift_the_final_size_would_show_raises_the_moves(z, escalated):
    """The final run has twice the pilot's particles, so the pilot's stationarity |z| is judged
    times √2, against the margin 2.5: 2.0 → 2.83 is past it (more moves, another pilot); 1.6 →
    2.26 is not."""
    calls = []
    ok = _Record(0.0, 0.05, "ok", _Combined(()))

    def execute_stage(plan, progress):
        calls.append(plan)
        return dataclasses.replace(ok, plan=plan, smc=({"stationarity_z": z if len(calls) == 1 else 0.1},))

    rec = _policy_run(execute_stage)
    roles = [s["role"] for s in rec.policy["stages"]]
    assert roles == (["pilot", "pilot", "final"] if escalated else ["pilot", "final"])
    if escalated:
        assert calls[1].sconf.refine_steps == 2 * calls[0].sconf.refine_steps
        assert "stationarity z at the final run's 16384 particles would be 2.8" in rec.policy["stages"][0]["decision"]


def test_heavy_tails_at_their_caps_go_to_the_final_run_not_to_trained_kernels():
    """k̂ warnings raise the conditional ESS (0.5 → 0.7 → 0.9) and the population (to its cap);
    after that the final run is made at that effort: training is no rung for heavy tails."""
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, warn, warn, warn)
    rec = _policy_run(execute_stage)
    assert [s["role"] for s in rec.policy["stages"]] == ["pilot", "pilot", "pilot", "final"]
    assert [c.sconf.target_ess for c in calls] == [0.5, 0.7, 0.9, 0.9]
    assert all(c.sconf.adaptive for c in calls)
    assert "trained kernels do not lighten tails" in rec.policy["stages"][2]["decision"]


def test_tails_that_more_temperatures_do_not_lighten_stop_the_escalation():
    """k̂ near 0.45 in every population, at ESS 0.5 and again at 0.7: more temperatures did not
    thin the tail (`tails_stalled`), so the final run is made at the second pilot's effort."""
    calls = []
    ok = _Record(0.0, 0.05, "ok", _Combined(()))

    def execute_stage(plan, progress):
        calls.append(plan)
        return dataclasses.replace(ok, plan=plan, smc=({"pareto_k_populations": [0.45, 0.44, 0.46, 0.45]},))

    rec = _policy_run(execute_stage)
    assert [s["role"] for s in rec.policy["stages"]] == ["pilot", "pilot", "final"]
    assert [c.sconf.target_ess for c in calls] == [0.5, 0.7, 0.7]
    assert "nothing left to raise in adaptive SMC" in rec.policy["stages"][1]["decision"]


@pytest.mark.parametrize("pilot, reported", [("unreliable", "warn"), ("warn", "ok")])
def test_an_ok_final_run_at_an_effort_whose_pilot_was_unreliable_is_not_ok(pilot, reported):
    """The pilots run out at an effort whose pilot was `unreliable`; the final run at that effort
    comes out `ok`: it is reported `warn`, with the reason `effort_unreliable` and its SE. A pilot
    that was only `warn` leaves the final run's verdict as it is."""
    execute_stage, calls = _script((pilot, None, ("pareto_k_high",)), ("ok", 0.05, ()))
    rec = _policy_run(execute_stage, max_pilots=1)
    assert rec.status == reported and rec.log_z_stderr == 0.05
    assert ("effort_unreliable" in {r.code for r in rec.combined.reasons}) == (pilot == "unreliable")
    assert rec.policy["stages"][-1]["status"] == reported


def test_a_margin_never_sends_an_ok_pilot_to_trained_kernels():
    """An `ok` pilot whose drift stays past the margin raises the moves to their cap and makes
    them longer; then the final run is made at that effort (an `ok` pilot is no reason to change
    the method)."""
    calls = []
    ok = _Record(0.0, 0.05, "ok", _Combined(()))

    def execute_stage(plan, progress):
        calls.append(plan)
        return dataclasses.replace(ok, plan=plan, smc=({"stationarity_z": 2.0},))

    rec = _policy_run(execute_stage)
    assert [s["role"] for s in rec.policy["stages"]] == ["pilot", "pilot", "pilot", "final"]
    assert [(c.sconf.refine_steps, c.sconf.leapfrog) for c in calls] == [(15, 3), (30, 3), (15, 15), (15, 15)]
    assert all(c.sconf.adaptive and c.tconf.iterations == 0 for c in calls)
    assert "nothing left to raise in adaptive SMC: final run at this effort" in rec.policy["stages"][2]["decision"]


@pytest.mark.parametrize("ks, escalated", [((0.42, 0.35, 0.4, 0.38), True), ((0.15, 0.1, 0.2, 0.12), False)])
def test_an_ok_pilot_whose_tails_predict_a_warning_raises_the_temperatures(ks, escalated):
    """An `ok` pilot's populations all have k̂ ≤ 0.5, but at a mean of 0.39 the final run's four
    populations would all stay there only about half the time: the conditional ESS (more
    temperatures) and the populations are raised and another pilot measures; at 0.14 it is taken."""
    calls = []
    ok = _Record(0.0, 0.05, "ok", _Combined(()))

    def execute_stage(plan, progress):
        calls.append(plan)
        return dataclasses.replace(ok, plan=plan, smc=({"pareto_k_populations": list(ks) if len(calls) == 1 else [0.1] * 4},))

    rec = _policy_run(execute_stage)
    roles = [s["role"] for s in rec.policy["stages"]]
    assert roles == (["pilot", "pilot", "final"] if escalated else ["pilot", "final"])
    if escalated:
        assert calls[1].sconf.target_ess > calls[0].sconf.target_ess and calls[1].particles == 2 * calls[0].particles
        assert "chance of all ≤ 0.5" in rec.policy["stages"][0]["decision"]
    p = forecasts.tail_pass_probability(dataclasses.replace(ok, smc=({"pareto_k_populations": list(ks)},)), 4, 4096)
    assert (p < settings.TAIL_PASS) == escalated
    # A perfect proposal's equal weights (k̂ −inf) count as k = 0; nothing finite: no prediction.
    perfect = dataclasses.replace(ok, smc=({"pareto_k_populations": [float("-inf")] * 4},))
    assert forecasts.tail_pass_probability(perfect, 8, 2048) == pytest.approx(1.0)
    assert forecasts.tail_pass_probability(ok, 4, 2048) is None


def test_reasons_nothing_can_raise_lead_to_trained_kernels_and_then_to_the_final_run():
    execute_stage, calls = _script(("warn", 0.05, ("few_populations",)), ("warn", 0.05, ()), ("warn", 0.05, ()))
    rec = _policy_run(execute_stage)
    assert calls[0].sconf.adaptive
    assert calls[1].sconf.backward == "mcd" and calls[1].tconf.iterations > 0 and not calls[1].sconf.adaptive
    # Nothing left after trained kernels: the final run is made at that effort, and reported.
    assert len(calls) == 3 and calls[2].sconf == calls[1].sconf
    # ...with the kernels that pilot trained (its training keys), estimated with its own keys.
    assert (calls[2].train_stage, calls[2].stage) == (1, 2) and calls[1].train_stage is None
    assert rec.policy["stages"][-1]["role"] == "final"


def test_the_pilots_are_capped_and_the_last_effort_is_used_for_the_final_run():
    bad = ("unreliable", None, ("not_at_equilibrium",))
    execute_stage, calls = _script(*[bad] * 3, ("ok", 0.05, ()))
    rec = _policy_run(execute_stage, max_pilots=3)
    assert [s["role"] for s in rec.policy["stages"]] == ["pilot"] * 3 + ["final"]
    assert calls[3].sconf == dataclasses.replace(calls[2].sconf, refine_tuning="pilot")


def test_a_time_limit_stops_between_stages_and_reports_the_finished_ones():
    clock = _Clock()
    bad = ("warn", 0.05, ("not_at_equilibrium",))
    execute_stage, calls = _script(bad, bad, bad, clock=clock, seconds=10.0)
    # The first pilot (8192 particles, 15 moves) takes 10 s; the second would take twice that.
    rec = _policy_run(execute_stage, clock=clock, time_limit=25.0)
    assert len(calls) == 1
    assert rec.policy["stopped"] == "time_limit" and rec.policy["reported_stage"] == 0
    assert "stopped (time_limit) before a final run" in rec.policy["stages"][0]["decision"]


def test_a_time_limit_cuts_the_final_run_to_what_fits():
    clock = _Clock()
    execute_stage, calls = _script(("ok", 0.05, ()), ("ok", 0.05, ()), clock=clock, seconds=10.0)
    rec = _policy_run(execute_stage, clock=clock, time_limit=30.0)
    final = calls[1]
    # 20 s left at 10 s per 8192 particles, with a 20 % margin: 13,107 particles, in whole populations.
    assert final.num_samples == 13107 // final.particles * final.particles < 16384
    assert "cut to" in rec.policy["stages"][0]["decision"] and rec.policy["stopped"] == "plan"


def test_time_to_spare_goes_to_learned_kernels_where_adaptive_smc_is_not_ok_and_their_pilot_is():
    clock = _Clock()
    # The one adaptive pilot allowed is `warn`; the learned pilot is `ok`, its SE 0.02 at 8,192.
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, ("ok", 0.02, (), 600), ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, learn=True, time_limit=400.0, max_se=0.01, max_pilots=1)
    adaptive, learning, final = calls
    # The adaptive pilot took 1 s and predicts 2 s for its final run (16,384 particles: a pilot that
    # is not `ok` does not size it): 397 s to spare, half of it to train.
    assert adaptive.sconf.adaptive and learning.tconf.max_seconds == pytest.approx(0.5 * 397.0)
    assert not learning.sconf.adaptive and learning.sconf.backward == "mcd" and learning.tconf.train_with == "is"
    assert learning.sconf.resample > 0 and learning.tconf.iterations == settings.LEARN_MAX_ITERATIONS
    # Its schedule starts where adaptive tempered SMC put its temperatures, and is learned from there.
    assert learning.sconf.schedule == "tempered" and learning.sconf.learn_schedule
    # The final run reuses the learning pilot's kernels and names the updates they had: its config
    # trains exactly those, with no clock in it; the learned pilot's SE sizes it.
    assert final.train_stage == 1 and final.stage == 2 and final.tconf.max_seconds is None and final.tconf.min_updates is None
    assert final.tconf.iterations == 600 and final.tconf.train_with == "is" and final.sconf == learning.sconf
    assert final.num_samples == 32768  # 8192 · (0.02 / 0.01)²
    stages = rec.policy["stages"]
    assert [s["role"] for s in stages] == ["pilot", "pilot", "final"] and rec.policy["reported_stage"] == 2
    assert "final run at this effort, 16384 particles; adaptive SMC's pilot is warn; time to spare" in stages[0]["decision"]
    assert "pilot ok after 600 updates: final run with these kernels, 32768 particles" in stages[1]["decision"]
    assert stages[1]["effort"]["train_seconds"] == pytest.approx(198.5) and stages[2]["effort"]["train_iterations"] == 600
    assert "train_seconds" not in stages[0]["effort"] and "learned by importance sampling" in stages[2]["method"]


def test_without_learn_the_time_to_spare_is_not_spent_and_the_decision_says_what_learn_would_spend():
    """The default policy learns nothing: the shortfall and time to spare of the test above give the
    adaptive final run at once, and its pilot's decision names what `--learn` would have spent."""
    assert not pol.Policy().learn
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, time_limit=400.0, max_se=0.01, max_pilots=1)
    adaptive, final = calls
    assert adaptive.sconf.adaptive and final.sconf.adaptive and final.tconf.max_seconds is None and final.stage == 1
    stages = rec.policy["stages"]
    assert [s["role"] for s in stages] == ["pilot", "final"] and rec.policy["reported_stage"] == 1
    assert stages[0]["decision"].endswith(
        "adaptive SMC's pilot is warn; --learn would spend up to 198 s of the time to spare learning MCD kernels"
    )


@pytest.mark.parametrize(
    "learning, why",
    [
        (("ok", 0.02, (), settings.LEARN_MIN_UPDATES - 50), "fewer than"),
        (("warn", 0.02, ("pareto_k_warn",), 900), "pilot warn after 900 updates (not ok)"),
        (("failed", None, ()), "learning failed"),
    ],
)
def test_learned_kernels_are_used_only_after_enough_updates_and_an_ok_pilot(learning, why):
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, learning, ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, learn=True, time_limit=400.0, max_se=0.01, max_pilots=1)
    final = calls[-1]
    # The adaptive final run is the one a run without time to spare would make (the same size).
    assert final.sconf.adaptive and final.train_stage is None and final.num_samples == 16384
    assert rec.policy["stages"][-1]["role"] == "final" and why in json.dumps(rec.policy["stages"], ensure_ascii=False)


def test_learning_too_slow_to_make_its_updates_stops_early_and_the_final_run_is_adaptive():
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, ("slow", None, ()), ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, learn=True, time_limit=400.0, max_pilots=1)
    adaptive, learning, final = calls
    # The learning pilot is asked for the updates its kernels need to be used, and stops without an
    # estimate when its rate says it cannot make them: no stage of it, the adaptive final run.
    assert learning.tconf.min_updates == settings.LEARN_MIN_UPDATES and learning.tconf.max_seconds > 0
    assert adaptive.tconf.min_updates is None and final.tconf.min_updates is None
    assert final.sconf.adaptive and final.train_stage is None and final.num_samples == 16384
    stages = rec.policy["stages"]
    assert [s["role"] for s in stages] == ["pilot", "final"]
    assert stages[0]["decision"].endswith(
        "learning stopped early (120 updates in 60 s: at that rate fewer than 400 in the 198 s allowed): "
        "the final run is the adaptive one"
    )


def test_the_rate_rule_stops_training_that_cannot_make_its_updates():
    """`stopping.too_slow`: the updates made plus the chunks the rate since the end of the first
    chunk adds until the clock stops training (the chunk running at the deadline completes),
    against those needed (at most the iterations asked)."""
    from mcd_cli.train.stopping import too_slow as _too_slow

    # 20 updates at t = 2 s, 10 of them since the first chunk ended at 1 s: 10 per second, 8 s left.
    assert not _too_slow(20, (10, 1.0), 2.0, 10.0, 100, 1000, 10)  # 20 + 8 chunks of 10 = 100: just enough
    assert _too_slow(20, (10, 1.0), 2.0, 10.0, 101, 1000, 10)
    # 7.5 s left: the eighth chunk is running at the deadline and completes, so 100 are made.
    assert not _too_slow(20, (10, 1.0), 2.0, 9.5, 100, 1000, 10)
    # 6.5 s left: 7 more chunks of 10 (90 in all, short of 100), or 4 of 20 (100).
    assert _too_slow(20, (10, 1.0), 2.0, 8.5, 100, 1000, 10) and not _too_slow(20, (10, 1.0), 2.0, 8.5, 100, 1000, 20)
    assert not _too_slow(20, (10, 1.0), 2.0, 10.0, 101, 100, 10)  # never more than the iterations asked
    assert not _too_slow(10, (10, 1.0), 2.0, 10.0, 10**6, 10**6, 10)  # no update since: no rate yet
    assert _too_slow(20, (10, 1.0), 12.0, 10.0, 21, 1000, 10)  # past the deadline, nothing more comes


def test_a_training_too_slow_for_its_updates_stops_after_its_second_chunk(monkeypatch):
    """`fit`'s `min_updates` through `execute`: with a clock that advances 1 s per reading, chunks of
    10 updates run at 10 per second after the first; a 3-s budget then reaches 30 updates."""
    import types

    from mcd_cli.train import loop as training
    from mcd_cli.targets import load_target

    target = load_target("gmm8", {"dim": "2"})
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, step_size="pilot", unroll=1)
    base = run.RunPlan(target=target, sconf=sconf, num_samples=1024, seed=3, stage=0,
                       tconf=TrainConfig(iterations=40, batch_size=16, chunk=10, max_seconds=3.0))

    def ticking():
        now = [-1.0]

        def perf_counter():
            now[0] += 1.0
            return now[0]

        return types.SimpleNamespace(perf_counter=perf_counter)

    # At the second chunk's end (t = 2 s) 20 updates and 10 more by the 3-s budget: 30 < 40 needed.
    monkeypatch.setattr(training, "time", ticking())
    with pytest.raises(TooSlow) as err:
        run.execute(dataclasses.replace(base, tconf=dataclasses.replace(base.tconf, min_updates=40)))
    assert (err.value.updates, err.value.needed, err.value.allowed) == (20, 40, 3.0)
    # 30 needed: the rate reaches them, and the run stops by the clock at 30, as without the rule.
    monkeypatch.setattr(training, "time", ticking())
    record = run.execute(dataclasses.replace(base, tconf=dataclasses.replace(base.tconf, min_updates=30)))
    assert record.iterations_run == 30 and record.stop_reasons == ("time",)


def test_an_ok_learned_pilot_replaces_an_adaptive_effort_that_is_not_ok():
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, ("ok", 0.08, (), 900), ("ok", 0.05, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, learn=True, time_limit=200.0, max_pilots=1)
    final = calls[-1]
    assert not final.sconf.adaptive and final.train_stage == 1 and final.tconf.iterations == 900
    assert rec.policy["stages"][0]["decision"].endswith("adaptive SMC's pilot is warn; time to spare: first MCD "
                                                        "kernels learned for at most 98 s")


@pytest.mark.parametrize("ks, used", [((0.42, 0.35, 0.4, 0.38), True), ((0.5, 0.4, 0.47, 0.45), False)])
def test_a_learned_pilots_tails_are_judged_by_the_verdicts_rule(ks, used):
    """A learned pilot's populations' k̂ predict its final run by the verdict's rule, the mean of the
    final populations' k̂ at or below 0.5 (`forecasts.mean_tail_pass_probability`), not by the adaptive
    effort's stricter one (every population): at a mean of 0.39 the final run's 8 populations of
    2,048 would keep every k̂ at or below 0.5 17 % of the time, and their mean 94 %; at a mean of
    0.455 their mean passes 72 % of the time, under the 80 % margin."""
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, ("ok", 0.05, (), 900), ("ok", 0.05, ()), clock=clock)

    def with_tails(plan, progress):
        record = execute_stage(plan, progress)
        return dataclasses.replace(record, smc=({"pareto_k_populations": list(ks)},)) if len(calls) == 2 else record

    rec = _policy_run(with_tails, clock=clock, learn=True, time_limit=200.0, max_pilots=1)
    final, learned = calls[-1], dataclasses.replace(_Record(0.0, 0.05, "ok", _Combined(())), smc=({"pareto_k_populations": list(ks)},))
    populations = final.num_samples // final.particles
    assert (forecasts.mean_tail_pass_probability(learned, populations, final.particles) >= settings.TAIL_PASS) == used
    assert forecasts.tail_pass_probability(learned, populations, final.particles) < settings.TAIL_PASS
    assert (not final.sconf.adaptive and final.train_stage == 1) == used
    if not used:
        assert "chance of their mean ≤ 0.5" in rec.policy["stages"][1]["decision"]


@pytest.mark.parametrize("adaptive_ks, learns", [((0.42, 0.35, 0.4, 0.38), True), ((0.15, 0.1, 0.2, 0.12), False)])
def test_an_ok_adaptive_pilot_whose_tails_miss_the_margin_is_a_shortfall_to_learn_for(adaptive_ks, learns):
    """The last adaptive pilot is `ok`, but its populations' k̂ give its final run a small chance that
    every one stays at or below 0.5 (the effort's margin) and the pilots are used up: with time to
    spare, MCD kernels are learned, and used when their pilot is `ok` by the verdict's rule, in a
    final run sized for the standard error the adaptive one would have had. Tails inside the margin
    are not a shortfall: the final run is the adaptive one, and nothing is learned."""
    clock = _Clock()
    ok = ("ok", 0.05, ())
    execute_stage, calls = _script(ok, ("ok", 0.08, (), 900), ok, clock=clock)

    def with_tails(plan, progress):
        record = execute_stage(plan, progress)
        ks = adaptive_ks if len(calls) == 1 else (0.35, 0.3, 0.4, 0.33)
        return dataclasses.replace(record, smc=({"pareto_k_populations": list(ks)},))

    rec = _policy_run(with_tails, clock=clock, learn=True, time_limit=200.0, max_pilots=1)
    stages = rec.policy["stages"]
    if learns:
        assert [s["role"] for s in stages] == ["pilot", "pilot", "final"] and calls[1].tconf.max_seconds > 0
        assert "adaptive SMC's pilot is ok, but its tails miss the effort's margin; time to spare" in stages[0]["decision"]
        assert not calls[2].sconf.adaptive and calls[2].train_stage == 1
        # Sized for the SE the adaptive final run would have had (0.05 at 8,192, so 0.0354 at
        # 16,384), not for the default max_se of 0.1: 8,192 · (0.08 / 0.0354)² = 41,944 particles.
        assert calls[2].num_samples == 43008 and "for an SE of at most 0.0353553 " in stages[1]["decision"]
    else:
        assert [s["role"] for s in stages] == ["pilot", "final"] and calls[1].sconf.adaptive
    # Without a time limit nothing is learned, whatever the tails.
    execute_stage, calls = _script(ok, ok)
    _policy_run(with_tails, learn=True, max_pilots=1)
    assert len(calls) == 2 and calls[1].sconf.adaptive


def test_learned_kernels_that_leave_no_time_for_their_final_run_give_way_to_the_adaptive_one():
    """A learning pilot that ends with less time left than a pilot's worth of its particles takes:
    its kernels are not used, and the adaptive final run is cut to what the time fits, or, as here,
    where that is not a pilot's worth either, the policy stops and reports its last stage."""
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    # 1 s per 8,192 particles; the learning pilot's 3,975 updates take 397.5 s, and with its 1 s of
    # estimating leave 0.5 s of the 400 s limit: 3,276 particles with the 20 % margin, under 8,192.
    execute_stage, calls = _script(warn, ("ok", 0.02, (), 3975), ("ok", 0.01, ()), clock=clock)
    rec = _policy_run(execute_stage, clock=clock, learn=True, time_limit=400.0, max_pilots=1)
    stages = rec.policy["stages"]
    assert "no time left for a final run with these kernels: the final run is the adaptive one" in stages[1]["decision"]
    # Nor is there for the adaptive one: the policy stops, and reports what it has.
    assert len(calls) == 2 and rec.policy["stopped"] == "time_limit"


def test_a_learned_final_run_is_sized_by_the_learning_pilots_estimating_time_not_its_start():
    """A learning pilot's start (the tempered start's run, compilations) is neither training nor
    estimating, and its final run reuses it: the time a learned final run needs is predicted from
    the pilot's `estimate_seconds` alone. The pilot trains 2,400 updates (240 s), starts for 30 s
    and estimates 8,192 particles in 1 s; the 313 s limit then leaves 41 s, which fit the 262,144
    particles its SE asks for (0.8 · 41 · 8,192 = 268,698), where the pilot's 31 s beside training
    would fit 8,664, a pilot's worth."""
    clock = _Clock()
    warn = ("warn", 0.05, ("pareto_k_warn",))
    execute_stage, calls = _script(warn, ("ok", 0.2, (), 2400), ("ok", 0.01, ()), clock=clock, start=30.0)
    rec = _policy_run(execute_stage, clock=clock, learn=True, time_limit=313.0, max_pilots=1)
    final = calls[-1]
    assert not final.sconf.adaptive and final.train_stage == 1
    # The learned pilot's SE 0.2 at 8,192 asks 8,192 · (0.2 / 0.0354)² = 262,144 for the adaptive final run's SE.
    assert final.num_samples == 262144 and "cut to" not in rec.policy["stages"][1]["decision"]


def test_learning_needs_a_time_limit_with_time_to_spare_a_shortfall_and_no_flow():
    ok, tight = ("ok", 0.05, ()), {"max_se": 0.01}
    execute_stage, calls = _script(ok, ok)
    _policy_run(execute_stage, learn=True, **tight)
    assert len(calls) == 2 and calls[1].sconf.adaptive  # no limit: the policy's time is as before
    clock = _Clock()  # adaptive SMC reaches the default max_se: nothing to learn for
    execute_stage, calls = _script(ok, ok, clock=clock)
    _policy_run(execute_stage, clock=clock, learn=True, time_limit=600.0)
    assert len(calls) == 2 and calls[1].sconf.adaptive
    clock = _Clock()  # a standard error above max_se is grown into the time, not learned for
    execute_stage, calls = _script(ok, ok, clock=clock)
    _policy_run(execute_stage, clock=clock, learn=True, time_limit=600.0, max_se=0.001)
    assert len(calls) == 2 and calls[1].sconf.adaptive
    warn = ("warn", 0.05, ("pareto_k_warn",))
    clock = _Clock()  # 60 s: 57 to spare, 28.5 to train, less than settings.LEARN_MIN_SECONDS
    execute_stage, calls = _script(warn, ok, clock=clock)
    _policy_run(execute_stage, clock=clock, learn=True, time_limit=60.0, max_pilots=1)
    assert len(calls) == 2 and calls[1].sconf.adaptive
    clock = _Clock()  # 70 s: 67 to spare, 33.5 to train (400 updates of 0.1 s)
    execute_stage, calls = _script(warn, ("ok", 0.05, (), settings.LEARN_MIN_UPDATES), ok, clock=clock)
    _policy_run(execute_stage, clock=clock, learn=True, time_limit=70.0, max_pilots=1)
    assert len(calls) == 3 and calls[1].tconf.max_seconds == pytest.approx(33.5) and calls[2].train_stage == 1
    # Through a fitted flow the flow alone did better than kernels learned in it.
    clock = _Clock()
    stuck = ("warn", 0.05, ("moves_stuck",))
    execute_stage, calls = _script(stuck, warn, ok, clock=clock)
    _policy_run(execute_stage, clock=clock, learn=True, time_limit=600.0, max_pilots=2)
    assert len(calls) == 3 and calls[2].sconf.init == "flow" and calls[2].sconf.adaptive


def test_a_time_bounded_training_stops_at_a_chunk_and_its_count_reproduces_it():
    """`TrainConfig.max_seconds`: the updates a time-bounded training made are those of a training of
    that many updates, so a final run naming the count trains (or reuses) the same kernels."""
    import numpy as np

    from mcd_cli.targets import load_target

    target = load_target("gmm8", {"dim": "2"})
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, step_size="pilot", unroll=1)
    base = run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(iterations=40, batch_size=16, chunk=10),
                       num_samples=1024, seed=3)
    pilot = run.execute(dataclasses.replace(base, stage=0, tconf=dataclasses.replace(base.tconf, max_seconds=1e-9)))
    assert pilot.iterations_run == 10 and pilot.stop_reasons == ("time",)
    counted = dataclasses.replace(base, tconf=dataclasses.replace(base.tconf, iterations=10))
    final = run.execute(dataclasses.replace(counted, stage=1, train_stage=0))
    assert final.stop_reasons == ("iterations",) and final.config()["iterations"] == 10
    assert np.array_equal(final.elbo_history[0], pilot.elbo_history[0])


def test_a_learned_final_run_shares_its_pilots_tempered_start_and_kernels(monkeypatch):
    """The learning pilot's schedule starts where adaptive tempered SMC put its temperatures
    (`LEARNED_MCD`: `--schedule tempered`); its final run (`train_stage`) reuses that start (the
    stages share one per initial distribution and schedule start) and the kernels it trained.
    (`tempered_betas` itself: tests/test_tempered_start.py; here a stand-in counts its calls.)"""
    import importlib

    import numpy as np

    from mcd_cli.targets import load_target

    ex = importlib.import_module("mcd_cli.run.execute")  # the module (`run.execute` is its function)
    start = importlib.import_module("mcd_cli.run.start")
    calls = []

    def tempered(target, steps, key, num=start.TEMPER_PARTICLES):
        calls.append(steps)
        return np.array([0.0, 0.05, 0.2, 0.5, 1.0])[: steps + 1]

    monkeypatch.setattr(start, "tempered_betas", tempered)

    target = load_target("gmm8", {"dim": "2"})
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, unroll=1,
                          learn_schedule=True, schedule_start="tempered")
    base = run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(iterations=10, batch_size=16, chunk=10),
                       num_samples=256, seed=3)
    made: dict = {}
    pilot = ex._execute(dataclasses.replace(base, stage=0), run.NoProgress(), made)
    final = ex._execute(dataclasses.replace(base, stage=1, train_stage=0), run.NoProgress(), made)
    starts = [key for key in made if len(key) == 3 and key[2] == "tempered"]
    assert starts == [(True, sconf.init, "tempered")] and calls == [4]
    np.testing.assert_array_equal(made[starts[0]].betas, [0.0, 0.05, 0.2, 0.5, 1.0])
    # One training, made by the pilot and taken by the final run (not trained again).
    assert len([key for key in made if len(key) == 2]) == 1
    assert np.array_equal(final.elbo_history[0], pilot.elbo_history[0])
    assert final.log_z != pilot.log_z  # the final run estimates with its own key


def test_ctrl_c_after_a_finished_stage_keeps_it_and_says_so():
    execute_stage, calls = _script(("warn", 0.05, ("ess_rough",)), ("interrupt", None, ()))
    rec = _policy_run(execute_stage)
    assert rec.policy["stopped"] == "interrupted" and rec.status == "warn" and rec.plan is calls[0]
    # Before any stage finished there is nothing to keep: the interrupt goes on up.
    execute_stage, _ = _script(("interrupt", None, ()))
    with pytest.raises(Interrupted):
        _policy_run(execute_stage)


def test_durations_and_policy_values_are_checked():
    assert pol.parse_duration("1.5m") == 90.0 and pol.parse_duration("2h") == 7200.0
    for bad in ("", "ten minutes", "-5s", "0"):
        with pytest.raises(ValueError):
            pol.parse_duration(bad)
    with pytest.raises(ValueError):
        pol.Policy(max_se=0.0)


def test_estimate_without_method_options_runs_the_policy_and_a_seed_reproduces_it(mcd, gauss_yaml, tmp_path):
    args = ["estimate", gauss_yaml, "--samples", "2048", "--seed", "1", "--json"]
    code, out, err = mcd(args)
    assert code == 0, err
    rec = records(out)[0]
    stages = rec["policy"]["stages"]
    assert stages[0]["role"] == "pilot" and all(s["role"] in ("pilot", "final") for s in stages)
    assert rec["policy"]["reported_stage"] == stages[-1]["stage"] and rec["log_z"] == stages[-1]["log_z"]
    assert rec["status"] == stages[-1]["status"] and rec["schedule"] == "adaptive"
    assert abs(rec["error"]) < 4 * rec["log_z_stderr"]
    # Where the time went: each stage's compile seconds are part of its seconds, the run's their sum.
    assert all(0.0 <= s["compile_seconds"] <= s["seconds"] for s in stages)
    assert rec["policy"]["compile_seconds"] == pytest.approx(sum(s["compile_seconds"] for s in stages), abs=2e-3)
    assert rec["compile_seconds"] == pytest.approx(stages[-1]["compile_seconds"], abs=0.05)
    assert 0.0 <= rec["start_compile_seconds"] <= rec["start_seconds"] and rec["import_seconds"] is not None
    code, out, err = mcd(args)
    again = records(out)[0]
    assert [s["log_z"] for s in again["policy"]["stages"]] == [s["log_z"] for s in stages]
    # The reported stage's config reproduces it alone, bit for bit (its keys are the stage's).
    config = tmp_path / "final.json"
    config.write_text(json.dumps(rec["config"]))
    code, out, err = mcd(["estimate", "--config", str(config), "--json"])
    assert code == 0, err
    alone = records(out)[0]
    assert alone["policy"] is None and alone["log_z"] == rec["log_z"] and alone["status"] == rec["status"]
    # An explicit method option turns the policy off, and then --max-se has nothing to steer.
    code, out, err = mcd([*args, "--resample", "0", "--backward", "ais", "--iterations", "0", "--steps", "4"])
    assert code == 0 and records(out)[0]["policy"] is None
    code, out, err = mcd([*args, "--backward", "ais", "--max-se", "0.05"])
    assert code == 2 and "--max-se" in err and "--backward" in err and "Traceback" not in err
    code, out, err = mcd([*args, "--time-limit", "soon"])
    assert code == 2 and "--time-limit" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    # --learn spends the time a limit leaves: without one, or beside a fixed method, it is refused.
    code, out, err = mcd([*args, "--learn"])
    assert code == 2 and "--learn" in err and "--time-limit" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    code, out, err = mcd([*args, "--backward", "ais", "--learn"])
    assert code == 2 and "--learn" in err and "--backward" in err and "Traceback" not in err


def test_a_final_run_trains_as_its_pilot_did_and_estimates_with_its_own_keys():
    """`train_stage`: the kernels are the pilot's (the same training keys, so the same ELBO curve),
    the estimate is the final stage's own (other estimation keys)."""
    from mcd_cli.targets import load_target

    target = load_target("gmm8", {"dim": "2"})
    # The sampler, training and size of test_same_record's library plans (the golden case
    # smc_ula_mcd's), whose compiled programs the session's persistent compilation cache holds. The
    # estimate is importance sampling: a stage's estimation keys are its own whatever the method
    # (`run.execute.one_repeat`); the training is one chunk (one compilation).
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, step_size="pilot", unroll=1)
    tconf = TrainConfig(iterations=20, batch_size=16)
    base = run.RunPlan(target=target, sconf=sconf, tconf=tconf, num_samples=1024, seed=3)
    pilot = run.execute(dataclasses.replace(base, stage=0))
    final = run.execute(dataclasses.replace(base, stage=1, train_stage=0))
    alone = run.execute(dataclasses.replace(base, stage=1))
    import numpy as np

    assert np.array_equal(final.elbo_history[0], pilot.elbo_history[0])
    assert not np.array_equal(final.elbo_history[0], alone.elbo_history[0])
    assert final.log_z != pilot.log_z
    assert final.config()["train_stage"] == 0 and final.config()["stage"] == 1


def test_compare_runs_the_policy_per_model_and_estimate_reproduces_a_model(mcd, gauss_yaml, tmp_path):
    # The second model is a copy of the first (the file's name tells them apart): the policy's runs
    # of this target are compiled once per session (test_estimate_without_method_options...), and the
    # models differ by their keys only, so a model run with another model's key shows.
    other = tmp_path / "copy.yaml"
    other.write_text(gauss_yaml.read_text())
    args = ["--samples", "2048", "--seed", "1", "--json"]
    code, out, err = mcd(["compare", str(gauss_yaml), str(other), *args])
    assert code == 0, err
    models = [r for r in records(out) if r.get("kind") == "model"]
    assert len(models) == 2 and all(m["policy"] is not None for m in models)
    assert [m["target_spec"] for m in models] == [str(gauss_yaml), str(other)]
    assert models[0]["log_z"] != models[1]["log_z"]  # keys fold_in(key(seed), 0) and 1
    code, out, err = mcd(["estimate", str(other), "--model-index", "1", *args])
    assert code == 0, err
    alone = records(out)[0]
    timeless = lambda rec: [{k: v for k, v in st.items() if k not in ("seconds", "compile_seconds")} for st in rec["policy"]["stages"]]  # noqa: E731
    assert alone["log_z"] == models[1]["log_z"] and timeless(alone) == timeless(models[1])
    # A grid of estimators runs exactly its settings: the policy's options are refused there.
    code, out, err = mcd(["compare", str(gauss_yaml), "--max-se", "0.05"])
    assert code == 2 and "--max-se" in err and "Traceback" not in err
    code, out, err = mcd(["compare", str(gauss_yaml), "--learn"])
    assert code == 2 and "--learn" in err and "Traceback" not in err
