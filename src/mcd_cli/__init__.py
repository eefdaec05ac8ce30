"""mcd-cli: evidence (log Z) estimation with Monte Carlo Diffusion and annealed importance sampling.

The command line is `mcd` (see `mcd_cli.cli`); the library's public names are below. The
estimation function is `mcd_cli.estimate.estimate` (the package attribute `estimate` is the module).

Example:
    >>> import jax
    >>> import mcd_cli
    >>> target = mcd_cli.load_target("gmm8", {"dim": "2"})
    >>> sconf = mcd_cli.SamplerConfig(steps=4, backward="ais")
    >>> state = mcd_cli.init_train_state(jax.random.key(0), target, sconf, mcd_cli.TrainConfig(iterations=0))
    >>> est = mcd_cli.estimate.estimate(jax.random.key(1), state.params, target, sconf, num_samples=256)
    >>> est.num_samples
    256
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mcd-cli")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

from mcd_cli.config import PRESETS, Backward, Sampler, SamplerConfig, TrainConfig
from mcd_cli.estimate import AllWeightsNonFinite, Estimate
from mcd_cli.targets import Target, TargetError, bundled_targets, check, load_target
from mcd_cli.training import TrainingDiverged, TrainResult, TrainState, fit, init_train_state

__all__ = [
    "__version__",
    "PRESETS",
    "Backward",
    "Sampler",
    "SamplerConfig",
    "TrainConfig",
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
    "AllWeightsNonFinite",
]
