"""The default estimation policy: pilots of untrained adaptive tempered SMC choose the effort, a
final run with keys of its own estimates (docs/policy.md).

It sits above the run layer: every stage is a complete run (`run.execute` of a `RunPlan`), and the
policy reads the stages' typed records to decide what runs next.

Modules: `settings` (`Policy`, what it aims at and may spend; the ladder's constants), `effort`
(`Effort`, and how a pilot's reasons raise it: `escalate`), `forecasts` (what a pilot predicts of
the final run: margins and stalls), `stages` (`Stage`, sizes and times), `decide` (the pure
decision), `driver` (the loop, and `execute`), `perdatum` (the policy over a conditional target's
data).
"""

from mcd_cli.policy import perdatum
from mcd_cli.policy.decide import Decision, Next, State, begin, decide, decide_data
from mcd_cli.policy.driver import drive, execute, stage_plan
from mcd_cli.policy.effort import Effort, escalate, first_effort
from mcd_cli.policy.settings import DEFAULT_MAX_SE, PILOT_POPULATIONS, Policy, parse_duration
from mcd_cli.policy.stages import Stage, final_samples

__all__ = [
    "DEFAULT_MAX_SE", "PILOT_POPULATIONS", "Decision", "Effort", "Next", "Policy", "Stage", "State", "begin", "decide",
    "decide_data", "drive", "escalate", "execute", "final_samples", "first_effort", "parse_duration", "perdatum",
    "stage_plan",
]
