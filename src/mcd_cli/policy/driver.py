"""The default policy's driver: run the stage `decide` asks for, until it asks for none.

`execute(plan, policy, progress)` is a run of the default policy (`mcd estimate` with no option that
fixes the method): pilots of untrained adaptive SMC choose the effort, a final run with keys of its
own estimates (`policy.decide`, docs/policy.md). Every stage is a complete run (`run.execute` of
the stage's `RunPlan`); the stages share the start and the kernels a pilot trained. `drive` is the
loop, shared with a conditional target's runs (`policy.perdatum`).

Why pilots, not "stop at the first `ok` run": the decision where to stop is made on runs whose
random numbers the reported estimate does not share, so it selects an effort, never an estimate
(docs/policy.md). Without a time limit the stages are a pure function of the seed; with one, the
record lists the stages that ran.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Optional

from mcd_cli.runtime import compile_clock
from mcd_cli import run
from mcd_cli.errors import Interrupted, RunFailed, TooSlow
from mcd_cli.policy.decide import Decision, Next, State, begin, decide
from mcd_cli.policy import settings
from mcd_cli.policy.settings import Policy
from mcd_cli.policy.stages import Stage
from mcd_cli.run.plan import Progress, RunPlan


class StageProgress:
    """A `Progress` whose bars name the stage, the last estimate and the time left."""

    def __init__(self, progress: Progress, label: str):
        self.progress, self.label = progress, label

    def training(self, description: str, total: int, start: int = 0):
        return self.progress.training(f"{self.label}: {description}", total, start)

    def estimation(self, description: str, total: int):
        return self.progress.estimation(f"{self.label}: {description}", total)


def stage_plan(plan: RunPlan, next_: Next, index: int) -> RunPlan:
    """The plan of stage `index`: `plan`'s target and sizes at the stage's effort, with its own keys;
    a final run with trained kernels trains as its pilot `train_stage` did (the same kernels: the
    pilot's verdict then chose them, and given them the final run is an ordinary, unbiased one)."""
    effort = next_.effort
    # A pilot tunes its moves from its own particles, unless it may be the answer (tuned as a final run).
    particle_tuned = next_.role == "pilot" and not settings.ANSWER_FROM_PILOT
    sconf, tconf = effort.configs(plan.sconf, plan.tconf, particle_tuned)
    return dataclasses.replace(
        plan, sconf=sconf, tconf=tconf, num_samples=next_.num_samples, particles=effort.population, stage=index,
        train_stage=next_.train_stage if effort.trained else None, repeats=1,
    )


def drive(
    first: Decision, decide_next: Callable[..., Decision], run_stage: Callable[[Next, State], Any],
    clock: Callable[[], float], keep_finished: bool = True,
) -> tuple[State, str]:
    """Runs the stages the decisions ask for; the last state and why it stopped.

    A learning pilot that stops without a record (`TooSlow`, `RunFailed`) is a decision's input.
    With `keep_finished`, Ctrl-C (`Interrupted`) or a failure during a stage after another has
    finished stops the policy there (`interrupted`, `failed: ...`), the finished stages kept."""
    began, decision = clock(), first
    state = decision.state
    try:
        while decision.next is not None:
            state, step = decision.state, decision.next
            t0, compiled_since = clock(), compile_clock.now()
            try:
                record = run_stage(step, state)
            except (TooSlow, RunFailed) as err:
                if not step.learning:
                    raise
                decision = decide_next(state, _left(state.policy, clock() - began), err)
                continue
            compiling = compile_clock.compile_seconds(compiled_since)
            stage = Stage(len(state.stages), step.role, step.effort, step.num_samples, record, clock() - t0,
                          compile_seconds=compiling)
            state = dataclasses.replace(state, stages=(*state.stages, stage))
            decision = decide_next(state, _left(state.policy, clock() - began))
        return decision.state, decision.stopped
    except Interrupted:
        if not state.stages or not keep_finished:
            raise
        return state, "interrupted"
    except RunFailed as err:
        if not state.stages or not keep_finished:
            raise
        return state, f"failed: {err}"


def _left(policy: Policy, spent: float) -> float:
    return math.inf if policy.time_limit is None else policy.time_limit - spent


def account(state: State, stopped: str, seconds: float) -> dict:
    """The record's `policy` section (docs/json.md): the aim, why it stopped, every stage."""
    policy = state.policy
    return {
        "max_se": policy.max_se,
        "time_limit": policy.time_limit,
        "learn": policy.learn,
        "stopped": stopped,
        "reported_stage": state.stages[-1].index,
        "seconds": round(seconds, 3),
        "compile_seconds": _total(s.compile_seconds for s in state.stages),
        "stages": [s.as_dict() for s in state.stages],
    }


def _total(values) -> Optional[float]:
    """The sum of the stages' compile seconds (they do not overlap); None where one was not measured."""
    values = list(values)
    return None if any(v is None for v in values) else round(sum(values), 3)


def execute(
    plan: RunPlan,
    policy: Policy,
    progress: Optional[Progress] = None,
    execute_stage: Optional[Callable[[RunPlan, Progress], Any]] = None,
    clock: Callable[[], float] = time.monotonic,
) -> Any:
    """Pilots, then the final run (the module docstring); the reported stage's record with the
    policy's account (`RunRecord.policy`).

    `execute_stage` runs one stage's plan (default: `run.execute`, the stages sharing what they
    make). Ctrl-C or a failure during a stage after another has finished returns the finished
    stages, the last one reported; so does a time limit that leaves too little for the next stage.
    """
    progress = progress or run.NoProgress()
    if execute_stage is None:
        made: dict = {}
        execute_stage = lambda stage, shown: run.execute(stage, shown, made)  # noqa: E731
    began = clock()

    def run_stage(step: Next, state: State) -> Any:
        label = f"stage {len(state.stages) + 1} ({step.role})"
        if state.stages:
            last = state.stages[-1].record
            se = "" if last.log_z_stderr is None else f" ± {last.log_z_stderr:.3g}"
            label += f", last {last.log_z:.4g}{se} {last.status}"
        if policy.time_limit is not None:
            label += f", {max(_left(policy, clock() - began), 0):.0f} s left"
        return execute_stage(stage_plan(plan, step, len(state.stages)), StageProgress(progress, label))

    state, stopped = drive(begin(plan, policy), decide, run_stage, clock)
    if state.stages[-1].role != "final":
        before = state.stages[-1].decision
        state = state.noted((before + "; " if before else "") + f"reported: stopped ({stopped}) before a final run")
    return dataclasses.replace(state.stages[-1].record, policy=account(state, stopped, clock() - began))


__all__ = ["StageProgress", "account", "drive", "execute", "stage_plan"]
