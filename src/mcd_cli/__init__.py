"""mcd-cli: evidence (log Z) estimation with Monte Carlo Diffusion and annealed importance sampling.

The command line is `mcd` (see `mcd_cli.cli`); the library's public names are below. One run,
start to finish, is `mcd_cli.run.execute(plan)`, which returns a typed `RunRecord`.

Example:
    >>> import jax
    >>> import mcd_cli
    >>> target = mcd_cli.load_target("gmm8", {"dim": "2"})
    >>> plan = mcd_cli.RunPlan(target, mcd_cli.SamplerConfig(steps=4, backward="ais"),
    ...                        mcd_cli.TrainConfig(iterations=0), num_samples=256)
    >>> mcd_cli.execute(plan).num_samples
    256
"""

from mcd_cli.runtime import compile_clock  # noqa: F401 (first: the import's clock starts here)
from mcd_cli._version import __version__

from mcd_cli.config import PRESETS, SamplerConfig, TrainConfig
from mcd_cli.errors import Interrupted, McdError, RunFailed, Unreliable, UsageError
from mcd_cli.stats import AllWeightsNonFinite, Estimate, Status
from mcd_cli.kernels import BACKWARD, FORWARD, estimators
from mcd_cli.record import RunRecord
from mcd_cli.run import RunPlan, execute
from mcd_cli.targets import Target, TargetError, bundled_targets, check, load_target
from mcd_cli.train.loop import TrainingDiverged, TrainResult, TrainState, fit, init_train_state

__all__ = [
    "__version__",
    "PRESETS",
    "SamplerConfig",
    "TrainConfig",
    "McdError",
    "UsageError",
    "RunFailed",
    "Unreliable",
    "Interrupted",
    "FORWARD",
    "BACKWARD",
    "estimators",
    "RunPlan",
    "RunRecord",
    "execute",
    "Target",
    "TargetError",
    "load_target",
    "bundled_targets",
    "check",
    "TrainState",
    "TrainResult",
    "TrainingDiverged",
    "init_train_state",
    "fit",
    "Estimate",
    "Status",
    "AllWeightsNonFinite",
]
