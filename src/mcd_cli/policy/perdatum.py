"""The default policy over the data of a conditional target.

Pilots of untrained adaptive SMC estimate the first `run.perdatum.PILOT_DATA` data at an effort;
when they are not all `ok`, the union of their reason codes raises it (`effort.escalate`); a final
run, with keys no pilot used, estimates every datum at the chosen effort (`decide.decide_data`).
No rung trains (training per datum is the cost the policy avoids), and there is no time limit (the
final run estimates every datum). Only the final run's records are emitted; the summary's `policy`
lists every stage. The loop is the single run's (`driver.drive`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional

from mcd_cli.errors import UsageError
from mcd_cli.policy.decide import Next, State, begin, decide_data
from mcd_cli.policy.driver import StageProgress, account, drive
from mcd_cli.policy.settings import Policy
from mcd_cli.record import DataRecord, DatumRecord, finite
from mcd_cli.run.perdatum import PILOT_DATA, PerDatumPlan, data_record, estimate_all
from mcd_cli.run.plan import NoProgress, Progress
from mcd_cli.run.tally import Tally


@dataclasses.dataclass(frozen=True)
class DataStage:
    """What a stage over data measured: the plan it ran and its tally of the data."""

    plan: PerDatumPlan
    tally: Tally

    @property
    def all_ok(self) -> bool:
        return self.tally.counts["ok"] == sum(self.tally.counts.values())

    @property
    def codes(self) -> set:
        return self.tally.codes

    @property
    def max_stderr(self) -> Optional[float]:
        return self.account_fields()["max_log_z_stderr"]

    def account_fields(self) -> dict:
        indices = self.plan.target.indices
        return {
            "data_index": [int(indices[0]), int(indices[-1]) + 1], "counts": dict(self.tally.counts),
            "reason_codes": sorted(self.tally.codes),
            "max_log_z_stderr": finite(max(self.tally.stderr, default=math.nan)),
        }


def validate(policy: Policy) -> None:
    """What the policy cannot do over data, refused before any work."""
    if policy.time_limit is not None:
        raise UsageError(
            "--time-limit is not available for a conditional target (its final run estimates every datum); "
            "bound the work with --data-index or --samples"
        )


def stage_plan(plan: PerDatumPlan, next_: Next, index: int) -> PerDatumPlan:
    """Stage `index`: untrained adaptive SMC at the stage's effort, with its own keys; a pilot
    estimates the first `PILOT_DATA` data and keeps no checkpoint (a resumed run makes it again)."""
    pilot = next_.role == "pilot"
    sconf, tconf = next_.effort.configs(plan.sconf, plan.tconf, pilot)
    target = plan.target.select(0, min(PILOT_DATA, plan.target.num_data)) if pilot else plan.target
    return dataclasses.replace(
        plan, target=target, sconf=dataclasses.replace(sconf, context_dim=0), tconf=tconf, amortise=False,
        num_samples=next_.num_samples, particles=next_.effort.population, stage=index,
        checkpoint_dir=None if pilot else plan.checkpoint_dir, resume=plan.resume and not pilot,
    )


def execute(
    plan: PerDatumPlan, policy: Policy, on_datum: Callable[[DatumRecord], None], progress: Optional[Progress] = None,
) -> DataRecord:
    """Pilots on the first data, then the final run over every datum (the module docstring); the
    final run's summary, with the policy's account (`DataRecord.policy`)."""
    progress = progress or NoProgress()
    began = time.monotonic()

    def run_stage(step: Next, state: State) -> DataStage:
        shown = StageProgress(progress, f"stage {len(state.stages) + 1} ({step.role})")
        stage = stage_plan(plan, step, len(state.stages))
        return DataStage(stage, estimate_all(stage, on_datum if step.role == "final" else lambda rec: None, shown))

    state, stopped = drive(begin(plan, policy), decide_data, run_stage, time.monotonic, keep_finished=False)
    final = state.stages[-1].record
    return dataclasses.replace(
        data_record(final.plan, final.tally), policy=account(state, stopped, time.monotonic() - began)
    )
