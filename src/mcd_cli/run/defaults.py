"""The library's defaults: sizes by device, the SMC population split, and the estimation method.

Every default a run takes that is not a field default of `SamplerConfig`/`TrainConfig` lives here,
so `mcd estimate`, `mcd compare`, the library's `execute` and the benchmark cells run the same
thing; the command line's help texts read these values.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax

DEFAULT_CHUNK = 1024
CPU_BATCH = 128  # --batch-size auto on a CPU: the paper's batch
ACCELERATOR_BATCH = 1024  # --batch-size auto on a GPU/TPU (see auto_batch_size)
ACCELERATOR_UNROLL = 4  # lax.scan unroll of the steps on a GPU/TPU (see auto_unroll)
DEFAULT_SAMPLES = 16_384

# SMC's particles run by default as this many independent populations: their spread is a standard
# error that survives the collapse of each population's genealogy (stats.merge_runs).
DEFAULT_POPULATIONS = 8
MIN_DEFAULT_POPULATION = 128
# Small populations carry more of the adaptive choices' bias, which grows with the dimension, so the
# default split keeps at least this many particles per dimension in each population (docs/method.md,
# "Several populations"; benchmarks/results/peers.md).
POPULATION_PER_DIM = 10


def population_size(num_samples: int, particles: Optional[int], dim: int = 0) -> int:
    """SMC particles per population: `particles` (at most `num_samples`); by default
    `num_samples / DEFAULT_POPULATIONS` when that divides evenly into populations of at least
    `max(MIN_DEFAULT_POPULATION, POPULATION_PER_DIM · dim)`, else all `num_samples` in one population.

    Example:
        >>> population_size(16384, None), population_size(512, None), population_size(512, 128)
        (2048, 512, 128)
        >>> population_size(4096, None, dim=50), population_size(4096, None, dim=200)
        (512, 4096)
    """
    if particles is not None:
        return min(particles, num_samples)
    share, rest = divmod(num_samples, DEFAULT_POPULATIONS)
    smallest = max(MIN_DEFAULT_POPULATION, POPULATION_PER_DIM * dim)
    return share if rest == 0 and share >= smallest else num_samples


def auto_batch_size(platform: Optional[str] = None) -> int:
    """`--batch-size auto`: `CPU_BATCH` on a CPU, `ACCELERATOR_BATCH` on a GPU or TPU.

    On a CPU the update's time grows in proportion to the batch, so the paper's batch is kept. On an
    accelerator a small batch's update is bound by kernel launches, not arithmetic, so a batch 8×
    larger costs far less than 8× the time and gives gradients with 8× less variance (measured:
    benchmarks/results/scaling.md). `validate` refuses the run when that batch does not fit in memory.
    """
    platform = platform or jax.devices()[0].platform
    return CPU_BATCH if platform == "cpu" else ACCELERATOR_BATCH


def auto_unroll(platform: Optional[str] = None) -> int:
    """Steps fused per iteration of the annealing scan: 1 on a CPU, `ACCELERATOR_UNROLL` on a GPU or TPU.

    On an accelerator fusing steps saves kernel launches for some compile time; on a CPU it made the
    update slower (benchmarks/results/scaling.md, the training-step rows).
    """
    platform = platform or jax.devices()[0].platform
    return 1 if platform == "cpu" else ACCELERATOR_UNROLL



# The estimation method of `mcd estimate` when an option fixes the method but leaves these unset
# (and of per-datum runs): SMC with the kernels (resampling when ESS/N falls below SMC_RESAMPLE,
# SMC_REFINE_STEPS HMC moves after each resampling), or, with the adaptive schedule,
# ADAPTIVE_REFINE_STEPS moves per temperature. Why these values: docs/method.md, "Refinement" and
# "Adaptive tempering". `SamplerConfig()` alone is the paper's importance sampling (resample 0), as
# are `mcd compare`'s estimator grid and `--preset paper`. With no method option at all, `mcd
# estimate` runs the policy below.
SMC_RESAMPLE = 0.5
SMC_REFINE = "hmc"
SMC_REFINE_STEPS = 5
ADAPTIVE_REFINE_STEPS = 15


def method_defaults(values: dict) -> None:
    """Fills the estimation method's unset fields (None) of `values` in place: `resample` defaults
    to `SMC_RESAMPLE`, `refine` to `SMC_REFINE` when the run resamples or tempers adaptively, and
    `refine_steps` to `SMC_REFINE_STEPS` when it refines on a fixed schedule, `ADAPTIVE_REFINE_STEPS`
    on the adaptive one. `resample` 0 alone is plain importance sampling.

    Example:
        >>> v = {"resample": None, "refine": None, "refine_steps": None}
        >>> method_defaults(v); v
        {'resample': 0.5, 'refine': 'hmc', 'refine_steps': 5}
    """
    if values.get("resample") is None:
        values["resample"] = SMC_RESAMPLE
    adaptive = values.get("schedule") == "adaptive" or bool(values.get("adaptive"))
    if values.get("refine") is None and (values["resample"] > 0 or adaptive):
        values["refine"] = SMC_REFINE
    if values.get("refine_steps") is None and values.get("refine") not in (None, "none"):
        values["refine_steps"] = ADAPTIVE_REFINE_STEPS if adaptive else SMC_REFINE_STEPS


@dataclasses.dataclass(frozen=True)
class Method:
    """The sampler and training settings of one kind of run, applied over a run's sizes: untrained
    adaptive tempered SMC (`ADAPTIVE_SMC`, which the tempered schedule's start also runs), MCD
    kernels trained on the fixed schedule inside SMC (`TRAINED_MCD`), or learned by the clock as an
    importance sampler from adaptive SMC's temperatures (`LEARNED_MCD`). The default policy's rungs
    (`mcd_cli.policy`); why these: docs/policy.md."""

    backward: str
    iterations: int
    adaptive: bool
    refine_steps: int
    resample: float = SMC_RESAMPLE
    refine: str = SMC_REFINE
    target_ess: float = 0.5
    train_with: Optional[str] = None
    learn_schedule: bool = False
    schedule_start: str = "linear"

    def sampler_fields(self) -> dict:
        """The `SamplerConfig` fields this method sets."""
        fields = dataclasses.asdict(self)
        for name in ("iterations", "train_with"):
            del fields[name]
        if not self.learn_schedule:
            del fields["learn_schedule"], fields["schedule_start"]
        return fields


ADAPTIVE_SMC = Method(backward="ais", iterations=0, adaptive=True, refine_steps=ADAPTIVE_REFINE_STEPS)
TRAINED_MCD = Method(backward="mcd", iterations=1000, adaptive=False, refine_steps=SMC_REFINE_STEPS)
LEARNED_MCD = dataclasses.replace(TRAINED_MCD, train_with="is", learn_schedule=True, schedule_start="tempered")
