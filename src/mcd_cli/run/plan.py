"""What one run does (`RunPlan`), its keys, its files' metadata, and the sizes it runs with.

Keys come from one root seed: the root key is `key(seed)`, or `fold_in(key(seed), i)` for model
`i` of a comparison (`RunPlan.model_index`); repeat `r` uses `fold_in(root, r)`, split into an
initialisation key and an estimation key, so a run that loads saved parameters estimates with
exactly the random numbers of the run that trained them, and a benchmark cell that calls
`execute` is the run `mcd estimate --seed s` makes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import jax

from mcd_cli.io import checkpoint
from mcd_cli.runtime import devices
from mcd_cli.record import messages
from mcd_cli._version import __version__
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import UsageError
from mcd_cli.kernels import registry
from mcd_cli.run.defaults import DEFAULT_CHUNK, DEFAULT_SAMPLES, population_size

NUMERICS_ONLY = ("unroll",)

class Progress(Protocol):
    """What `execute` reports while it works (the CLI draws progress bars from it)."""

    def training(self, description: str, total: int, start: int = 0) -> Callable[[int, float], None]:
        """A callback `(iteration, elbo)` called after every training update."""

    def estimation(self, description: str, total: int) -> Callable[[int, int], None]:
        """A callback `(done, total)` called after every chunk of importance samples."""


class NoProgress:
    """A `Progress` that shows nothing."""

    def training(self, description: str, total: int, start: int = 0) -> Callable[[int, float], None]:
        return lambda iteration, elbo: None

    def estimation(self, description: str, total: int) -> Callable[[int, int], None]:
        return lambda done, total: None

@dataclasses.dataclass(frozen=True)
class RunPlan:
    """Everything one `mcd estimate` run (or one `mcd compare` cell) does."""

    target: Any
    sconf: SamplerConfig
    tconf: TrainConfig
    num_samples: int = DEFAULT_SAMPLES
    seed: int = 0
    repeats: int = 1
    chunk_size: int = DEFAULT_CHUNK
    load: Optional[Path] = None
    save: Optional[Path] = None
    output: Optional[Path] = None
    checkpoint_dir: Optional[Path] = None
    checkpoint_every: int = 0
    resume: bool = False
    x64: bool = False
    saved: Optional[SavedRun] = None  # `read_saved(load, target)`, when the caller has read it
    target_spec: Optional[str] = None  # how the target was named (a path, a bundled name, "-")
    target_text: Optional[str] = None  # the YAML text, when it was read from stdin
    target_args: Optional[dict] = None  # the --param values the target was loaded with
    target_model: Optional[str] = None  # the NumPyro model's name (--model)
    target_data: Optional[str] = None  # the --data file bound to the target's data arguments
    devices: Optional[int] = None  # devices per process to shard particles over (None: all)
    model_index: Optional[int] = None  # model i of a comparison: root key fold_in(key(seed), i)
    particles: Optional[int] = None  # SMC population size (None: one population of num_samples)
    stage: Optional[int] = None  # stage s of a default-policy run (`mcd_cli.policy`): keys from fold_in(root, STAGE_STREAM + s)
    train_stage: Optional[int] = None  # a policy run's final stage trains as this (pilot) stage did (None: `stage`)
    draws: bool = False  # keep the SMC populations' posterior draws (`run.draws`; --posterior)

    @property
    def population(self) -> int:
        """SMC particles per population: `particles`; by default `num_samples / DEFAULT_POPULATIONS`
        when that divides evenly into populations of at least `MIN_DEFAULT_POPULATION`, else all
        `num_samples` in one population."""
        return population_size(self.num_samples, self.particles, self.target.dim)

    def state_path(self, repeat: int, directory: Optional[Path] = None) -> Path:
        return Path(directory or self.checkpoint_dir) / f"state-r{repeat}.npz"


def root_key(seed: int, model_index: Optional[int] = None) -> jax.Array:
    """The root key of a run: `key(seed)`, or `fold_in(key(seed), i)` for model i of a comparison.

    Models of one comparison therefore draw independent random numbers from one seed, and
    `mcd estimate --seed s --model-index i` reproduces model i alone.
    """
    key = jax.random.key(seed)
    return key if model_index is None else jax.random.fold_in(key, model_index)


STAGE_STREAM = 0x57A0  # fold_in(root key, STAGE_STREAM + s): the root of a policy run's stage s


def estimation_root(plan: "RunPlan", stage: Optional[int] = None) -> jax.Array:
    """The key the repeats of `plan` fold their index into: the root key, or for stage s of a
    policy run (`stage`, default `plan.stage`) `fold_in(root, STAGE_STREAM + s)`, so that no two
    stages share random numbers. The start (initial distribution, curvature run) keeps the root
    key: it is the same for every stage."""
    stage = plan.stage if stage is None else stage
    root = root_key(plan.seed, plan.model_index)
    return root if stage is None else jax.random.fold_in(root, STAGE_STREAM + stage)


def version() -> str:
    """The installed mcd-cli version (recorded in every result and file)."""
    return __version__


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """What a --save file says about the run that wrote it (read once, checked against the target)."""

    path: Path
    meta: dict
    sconf: SamplerConfig


def read_saved(path: Path, target: Any) -> SavedRun:
    """Reads a parameter file's settings and checks it was fitted to `target` (one-line errors)."""
    meta = checkpoint.read_meta(path)
    checkpoint.check_target(meta, target, str(path))
    return SavedRun(Path(path), meta, sampler_config_from_file(meta, path))


def sampler_config_from_file(meta: dict, path: Path) -> SamplerConfig:
    """The `SamplerConfig` a parameter file was trained with."""
    saved = meta.get("sampler_config")
    if not isinstance(saved, dict):
        raise UsageError(f"'{path}' does not record its sampler settings; refit and --save again")
    known = {f.name for f in dataclasses.fields(SamplerConfig)}
    # Files written before a setting existed used what is now its non-default value.
    legacy = {"step_size": "fixed", "init": "target"}
    try:
        return SamplerConfig(**{**legacy, **{k: v for k, v in saved.items() if k in known}})
    except (TypeError, ValueError) as err:
        raise UsageError(f"'{path}' holds sampler settings this version cannot use ({err})") from None


# --------------------------------------------------------------------------------------------
# Memory

def file_meta(plan: RunPlan) -> dict:
    return {
        "target": checkpoint.target_identity(plan.target),
        "sampler_config": dataclasses.asdict(plan.sconf),
        "train_config": dataclasses.asdict(plan.tconf),
        "seed": int(plan.seed),
        "model_index": plan.model_index,
        "x64": bool(plan.x64),
        "mcd_cli_version": version(),
    }

def plan_warnings(plan: RunPlan) -> list[str]:
    """Settings that will run but are known to limit the result, one line each (shown before training).

    The score network's output is a linear map of its `hidden`-wide last layer, so it spans at most
    `hidden` of the target's `dim` directions: below the target's dimension, MCD can only correct
    the backward kernel in a subspace, and in high dimension it then falls far short of what it can
    reach (see docs/benchmarks.md, d = 200).
    """
    if plan.sconf.adaptive:
        if plan.tconf.iterations > 0:
            return [
                f"warning: --schedule adaptive moves the particles with --refine {plan.sconf.refine} "
                f"only: the {plan.tconf.iterations} training iterations are skipped (--iterations 0 "
                "says so)"
            ] + rounding_notes(plan)
        return rounding_notes(plan)
    est = registry.estimator(plan.sconf.sampler, plan.sconf.backward)
    return messages.texts(est.backward.warnings(plan.target.dim, plan.sconf)) + rounding_notes(plan)


def sharded_sizes(plan: RunPlan) -> tuple[int, int, int]:
    """`(devices, batch size, chunk size)` as run: both sizes rounded up to a multiple of the
    device count over all processes (the chunk's extra particles are dropped; the batch's are used)."""
    count = devices.particle_layout(plan.devices).count
    chunk = max(1, min(plan.chunk_size, plan.num_samples))
    return count, devices.round_up(plan.tconf.batch_size, count), devices.round_up(chunk, count)


def sharded_population(plan: RunPlan) -> int:
    """SMC particles per population as run: `plan.population` rounded up to a multiple of the
    device count over all processes (the population is one system: no particle can be dropped)."""
    return devices.round_up(plan.population, devices.particle_layout(plan.devices).count)


def sharded_plan(plan: RunPlan) -> RunPlan:
    """The plan with its training batch rounded up to a multiple of the device count."""
    _, batch, _ = sharded_sizes(plan)
    if batch == plan.tconf.batch_size or plan.load is not None:
        return plan
    return dataclasses.replace(plan, tconf=dataclasses.replace(plan.tconf, batch_size=batch))


def rounding_notes(plan: RunPlan) -> list[str]:
    """One line for each size rounded to a multiple of the device count."""
    count, batch, chunk = sharded_sizes(plan)
    notes = []
    s = plan.sconf
    if s.smc and sharded_population(plan) != plan.population:
        population = sharded_population(plan)
        notes.append(
            f"SMC populations rounded up to {population} particles, a multiple of the {count} devices the "
            f"particles are sharded over (the estimate then differs from a {plan.population}-particle one); "
            f"give --particles a multiple of {count} (and --samples a multiple of it) to keep it"
        )
    if s.adaptive:  # no training, and no importance-sampling chunks
        return notes
    if plan.load is None and plan.tconf.iterations > 0 and batch != plan.tconf.batch_size:
        notes.append(
            f"--batch-size {plan.tconf.batch_size} rounded up to {batch}, a multiple of the {count} devices "
            f"the particles are sharded over (the training then differs from a {plan.tconf.batch_size}-particle "
            f"one); give a multiple of {count} to keep it"
        )
    if chunk != min(plan.chunk_size, plan.num_samples):
        notes.append(
            f"estimation chunks rounded up to {chunk} particles, a multiple of the {count} devices; the "
            f"particles past --samples {plan.num_samples} are computed and dropped (the estimate is unchanged)"
        )
    return notes


# --------------------------------------------------------------------------------------------
# Execution

def device_name() -> str:
    """The JAX device used, e.g. `cpu` or `gpu:NVIDIA H100 80GB HBM3`."""
    device = jax.devices()[0]
    kind = str(getattr(device, "device_kind", "") or "")
    platform = str(device.platform)
    return platform if not kind or kind.lower() == platform else f"{platform}:{kind}"

