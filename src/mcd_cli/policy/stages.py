"""A stage of the default policy (`Stage`) and the arithmetic of its sizes and times.

A stage is one complete run the policy made, a pilot or the final run, with what the policy
concluded from it. The final run's size follows the pilot's standard error (`final_samples`); the
time a stage will take is predicted from the last stage's time per particle and gradient
(`predicted`, `fits`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from mcd_cli.policy.effort import Effort
from mcd_cli.policy.settings import MAX_FINAL_FACTOR
from mcd_cli.stats.importance import Status
from mcd_cli.stats.reasons import Reason


@dataclasses.dataclass(frozen=True)
class Stage:
    """One run the policy made: a pilot, or the final run.

    `record` is the run's `RunRecord`, or for a conditional target the summary of the data it
    estimated (`policy.perdatum.DataStage`); either gives the stage's own fields of the account
    (`account_fields`)."""

    index: int
    role: str  # "pilot" or "final"
    effort: Effort
    num_samples: int
    record: Any
    seconds: float
    decision: str = ""  # what the policy concluded from it
    compile_seconds: Optional[float] = None  # of `seconds`, compiling (`runtime.compile_clock`)

    def as_dict(self) -> dict:
        rec = self.record
        if hasattr(rec, "account_fields"):
            head = {"stage": self.index, "role": self.role, "method": self.effort.describe(),
                    "effort": dataclasses.asdict(self.effort), "num_samples": self.num_samples}
            return {**head, **rec.account_fields(), **self._times(), "decision": self.decision}
        return {
            "stage": self.index,
            "role": self.role,
            "method": self.effort.describe(),
            "effort": self.effort.as_dict(),
            "num_samples": self.num_samples,
            "log_z": rec.log_z,
            "log_z_stderr": rec.log_z_stderr,
            "status": rec.status,
            "reason_codes": sorted(codes(rec)),
            **self._times(),
            "decision": self.decision,
        }

    def _times(self) -> dict:
        """The stage's wall time, and of it the seconds spent compiling (None where not measured)."""
        compiling = None if self.compile_seconds is None else round(self.compile_seconds, 3)
        return {"seconds": round(self.seconds, 3), "compile_seconds": compiling}


def codes(record: Any) -> set:
    """The reason codes of a run's verdict."""
    return {r.code for r in record.combined.reasons}


def final_samples(
    plan: Any, effort: Effort, se: Optional[float], pilot_n: int, max_se: float, capped: bool = True,
) -> tuple[int, str]:
    """Particles for the final run: `plan.num_samples` (at least a pilot's worth, the populations an
    `ok` verdict needs), or more when the pilot's standard error, scaled by √(n_pilot/N), would stay
    above `max_se`: `N = n_pilot (se/max_se)²`, in whole populations, at most
    `MAX_FINAL_FACTOR × plan.num_samples` when `capped` (the policy's bound without a time limit;
    with one, the time left bounds the final run instead: `fits`); and the decision's words."""
    need = 0 if se is None else math.ceil(pilot_n * (se / max_se) ** 2)
    n = max(plan.num_samples, pilot_n, need)
    n = -(-n // effort.population) * effort.population
    cap = MAX_FINAL_FACTOR * max(plan.num_samples, pilot_n) if capped else n
    if n > cap:
        return cap, f"the pilot's SE {se:.3g} needs {need} particles for {max_se:g}; capped at {cap}"
    if se is None:
        return n, f"{n} particles"
    return n, f"{n} particles for an SE of at most {max_se:g} (pilot SE {se:.3g} at {pilot_n})"


def final_se(pilot: Stage, n: int) -> Optional[float]:
    """The standard error a final run of `n` particles at `pilot`'s effort is predicted to have
    (its SE scaled by √(n_pilot/n)); None when the pilot has none."""
    se = pilot.record.log_z_stderr
    return None if se is None else se * math.sqrt(pilot.num_samples / n)


def capped(record: Any, stage: int) -> Any:
    """`record` at most `warn`, with the reason `effort_unreliable`: its pilot at the same effort
    (stage `stage`) was `unreliable`. Two independent runs of one effort are two measurements of it;
    when one says the effort fails, the other's `ok` may be luck (funnel seed 1 of the calibration:
    pilots `unreliable`, final run `ok` at −0.26 ± 0.022). Stricter, never looser, than the run's
    own verdict; its standard error is kept."""
    combined = record.combined
    reasons = (*combined.reasons, Reason("effort_unreliable", {"stage": int(stage)}))
    return dataclasses.replace(record, combined=dataclasses.replace(combined, status=Status.WARN, reasons=reasons))


def _per_particle_move(stage: Stage) -> float:
    """Seconds per particle and gradient of a move (per particle for trained kernels) of a finished
    stage. For trained kernels, the estimate's own time (`estimate_seconds`) where the record has
    it: neither their training nor their start is the final run's, which reuses both (on
    brownian_motion a learning pilot's time beside its training was about five times its final
    run's for as many particles)."""
    if stage.effort.trained:
        spent = getattr(stage.record, "estimate_seconds", None)
        if spent is None:
            spent = stage.seconds - (getattr(stage.record, "train_seconds", 0.0) or 0.0)
    else:
        spent = stage.seconds
    return max(spent, 0.0) / max(stage.num_samples * stage.effort.gradients(), 1)


def predicted(last: Stage, effort: Effort, n: int) -> float:
    """Seconds a stage of `n` particles at `effort` will take, from the last stage's time per
    particle and gradient (a higher conditional ESS adds temperatures this does not foresee)."""
    if effort.trained != last.effort.trained or effort.transport != last.effort.transport:
        return 0.0  # nothing measured yet for the other method: let it run
    return _per_particle_move(last) * n * effort.gradients()


def fits(last: Stage, effort: Effort, seconds: float) -> int:
    """How many particles at `effort` fit in `seconds`, with a 20 % margin."""
    if not math.isfinite(seconds):
        return 2**62
    per = _per_particle_move(last) * effort.gradients()
    return int(0.8 * seconds / max(per, 1e-12))
