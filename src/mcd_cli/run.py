"""One run, start to finish, as a library call: check the plan, fit (or load), estimate, record.

`validate(plan)` fails fast on everything that can be known before training (paths that cannot be
written, files that do not match, memory that is not there); `execute(plan, progress)` does the
work and returns a `RunRecord`. Nothing here imports the command line or the renderer: progress
goes through the small `Progress` protocol, which the CLI implements with rich.

Keys come from one root seed: the root key is `key(seed)`, or `fold_in(key(seed), i)` for model
`i` of a comparison (`RunPlan.model_index`); repeat `r` uses `fold_in(root, r)`, split into an
initialisation key and an estimation key, so a run that loads saved parameters estimates with
exactly the random numbers of the run that trained them, and a benchmark cell that calls
`execute` is the run `mcd estimate --seed s` makes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import jax

import numpy as np

from mcd_cli import annealing, checkpoint, devices, objectives, smc
from mcd_cli.config import ESTIMATION_FIELDS, SamplerConfig, TrainConfig
from mcd_cli.errors import Interrupted, RunFailed, UsageError
from mcd_cli.stats import (
    combine_estimates, merge_runs, mixing_verdict, population_verdict, smc_estimate, stationarity_verdict, summarize,
    summarize_weights,
)
from mcd_cli.kernels import registry
from mcd_cli.record import RunRecord, TargetInfo
from mcd_cli.training import TrainingInterrupted, fit, init_train_state, make_train_chunk

DEFAULT_CHUNK = 1024
INIT_STREAM = 0x1D1  # fold_in(root key, INIT_STREAM): the key of the initial-distribution fit
PILOT_STREAM = 0x2D2  # fold_in(root key, PILOT_STREAM): the key of the step-size pilot
SCALE_STREAM = 0x2D3  # fold_in(root key, SCALE_STREAM): the key of the pilot's AIS check (`pilot_scale`)
SCALE_SAMPLES = 512  # particles of each untrained ULA-AIS run of the check
SCALE_GAIN = 1.0  # nats of ELBO a halving of the sizes must gain to be taken
SCALE_HALVINGS = 4  # the smallest factor the check can choose is 2**-SCALE_HALVINGS
CPU_BATCH = 128  # --batch-size auto on a CPU: the paper's batch
ACCELERATOR_BATCH = 1024  # --batch-size auto on a GPU/TPU (see auto_batch_size)
ACCELERATOR_UNROLL = 4  # lax.scan unroll of the steps on a GPU/TPU (see auto_unroll)
DEFAULT_SAMPLES = 16_384
# Settings that change how the computation is laid out, not what it computes: a file saved with
# one value is used with another (e.g. trained on a CPU, loaded on a GPU).
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


# SMC's particles run by default as this many independent populations: their spread is a standard
# error that survives the collapse of each population's genealogy (stats.merge_runs).
DEFAULT_POPULATIONS = 8
MIN_DEFAULT_POPULATION = 128
# Small populations carry more of the adaptive choices' bias, which grows with the dimension: on
# gmm8 at d = 200, 8 populations of 512 came out 0.4 to 3.4 nats high (6 seeds), 8 of 2,048 within
# 0.5; at d = 50, 8 of 512 were unbiased (docs/benchmarks.md). So the default split keeps at least
# this many particles per dimension in each population.
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


def version() -> str:
    """The installed mcd-cli version (recorded in every result and file)."""
    from mcd_cli import __version__

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


def available_memory() -> Optional[int]:
    """Bytes the run may still allocate on its device (host RAM on CPU), or None if unknown."""
    device = jax.devices()[0]
    if device.platform != "cpu":
        try:
            stats = device.memory_stats() or {}
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        except Exception:
            return None
    return host_memory()


def host_memory() -> Optional[int]:
    """Available host RAM: MemAvailable, capped by a cgroup (container, batch job) limit."""
    candidates = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        try:
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            candidates.append(int(limit) - usage)
    return min(candidates) if candidates else None


def format_bytes(n: float) -> str:
    """`n` bytes in a readable unit, e.g. `1.5 GiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def memory_needed(plan: RunPlan) -> dict[str, float]:
    """A generous estimate, in bytes, of the largest allocations of the run.

    Training keeps every step of every particle of the batch for backpropagation (the paper's
    stated limitation): about `batch × (K + 1) × state × 6` numbers, plus the score network's
    activations; `remat` reduces the stored steps to about `2√K`. Parameters (roughly counted:
    the score network's layers and the per-step schedules) are counted with their gradients,
    Adam moments and the recovery snapshot.
    """
    target, s, t = plan.target, plan.sconf, plan.tconf
    est = registry.estimator(s.sampler, s.backward)
    itemsize = 8 if plan.x64 else 4
    state = est.forward.state_size(target.dim)
    # The per-step schedules and the kernels' own parameters (a generous count of both).
    param_count = 4.0 * target.dim + 40.0 * s.steps
    param_count += est.backward.param_count(est.forward.score_input_dim(target.dim), target.dim, s)
    stored_steps = 2 * math.ceil(math.sqrt(s.steps)) if s.remat else s.steps
    per_step = 6 * state + est.backward.activations(s)
    training = 0.0
    if plan.load is None and t.iterations > 0:
        training = float(t.batch_size) * (stored_steps + 1) * per_step * itemsize
    chunk = sharded_population(plan) if s.smc else min(plan.chunk_size, plan.num_samples)
    estimation = float(chunk) * per_step * itemsize * 2
    # Particles are sharded: each device holds its share of the batch, of the chunk and of an SMC
    # population; resampling gathers the whole population's states on every device for a moment.
    count = devices.particle_layout(plan.devices).count
    training /= count
    estimation /= count
    if s.smc and count > 1:  # the kernel's state and the cached log γ, ∇log γ of every particle
        estimation += float(chunk) * (state + target.dim + 1) * itemsize
    return {
        "training": training,
        "estimation": estimation,
        "parameters": 8.0 * param_count * itemsize,
        "host": 8.0 * plan.num_samples + 8.0 * t.iterations,
    }


def check_memory(plan: RunPlan, available: Optional[int]) -> None:
    """Raises UsageError when the run clearly cannot fit in memory (before anything starts)."""
    if available is None:
        return
    need = memory_needed(plan)
    total = max(need["training"], need["estimation"]) + need["parameters"] + need["host"]
    if total <= available:
        return
    s, t = plan.sconf, plan.tconf
    have = f"about {format_bytes(max(available, 0))} is available"
    if need["host"] > available / 2:
        raise UsageError(
            f"not enough memory: {plan.num_samples} samples and {t.iterations} iterations need about "
            f"{format_bytes(need['host'])} but {have}; lower --samples or --iterations"
        )
    if need["training"] >= need["estimation"] and need["training"] > need["parameters"]:
        raise UsageError(
            f"not enough memory: training needs about {format_bytes(need['training'])} (batch "
            f"{t.batch_size} × {s.steps + 1} steps × d = {plan.target.dim}) but {have}; lower "
            "--batch-size or --steps, add --remat, or use a smaller dimension"
        )
    if need["parameters"] >= need["estimation"]:
        raise UsageError(
            f"not enough memory: the sampler's parameters need about {format_bytes(need['parameters'])} "
            f"(K = {s.steps} steps, hidden {s.hidden}, d = {plan.target.dim}) but {have}; lower "
            "--steps, --hidden or the dimension"
        )
    raise UsageError(
        f"not enough memory: estimation needs about {format_bytes(need['estimation'])} (K = {s.steps} "
        f"steps, d = {plan.target.dim}) but {have}; lower --steps or use a smaller dimension"
    )


# --------------------------------------------------------------------------------------------
# Validation before any work


def _file_meta(plan: RunPlan) -> dict:
    return {
        "target": checkpoint.target_identity(plan.target),
        "sampler_config": dataclasses.asdict(plan.sconf),
        "train_config": dataclasses.asdict(plan.tconf),
        "seed": int(plan.seed),
        "model_index": plan.model_index,
        "x64": bool(plan.x64),
        "mcd_cli_version": version(),
    }


def check_state_meta(plan: RunPlan, meta: dict, path: Path, repeat: int) -> None:
    """Raises CheckpointError unless the checkpoint at `path` belongs to this run."""
    checkpoint.check_target(meta, plan.target, str(path))
    differences = checkpoint.config_differences(
        meta.get("sampler_config", {}), plan.sconf, ignore=NUMERICS_ONLY + ESTIMATION_FIELDS
    )
    differences += checkpoint.config_differences(
        meta.get("train_config", {}), plan.tconf, ignore=("iterations", "chunk", "stop")
    )
    if meta.get("seed") != plan.seed:
        differences.append(f"seed={meta.get('seed')!r} (this run: {plan.seed!r})")
    if meta.get("model_index") != plan.model_index:
        differences.append(f"model_index={meta.get('model_index')!r} (this run: {plan.model_index!r})")
    if meta.get("repeat", repeat) != repeat:
        differences.append(f"repeat={meta.get('repeat')!r} (this run: {repeat})")
    if differences:
        raise checkpoint.CheckpointError(
            f"checkpoint '{path}' was written by a run with {', '.join(differences[:3])}; "
            "resume with the same settings or use another --checkpoint directory"
        )


def validate_populations(num_samples: int, particles: Optional[int], population: int, per: str = "") -> None:
    """`--samples` split into whole SMC populations of at least 2 particles, or one clear error.
    `per` qualifies the sample count in the message (" per datum")."""
    if particles is not None and particles < 2:
        raise UsageError(f"--particles must be at least 2 (an SMC population), got {particles}")
    if population < 2:
        raise UsageError(f"SMC needs at least 2 particles{per}, got --samples {num_samples}")
    if num_samples % population:
        raise UsageError(
            f"--samples {num_samples} is not a multiple of --particles {population}: SMC "
            "runs whole populations; make --samples a multiple of --particles"
        )


def validate(plan: RunPlan, *, available: Optional[int] = None, check_mem: bool = True) -> None:
    """Everything that can fail before training, checked before training.

    Raises:
        UsageError / CheckpointError: one line naming the problem and the fix.
    """
    if plan.num_samples < 1:
        raise UsageError(f"--samples must be at least 1, got {plan.num_samples}")
    devices.particle_layout(plan.devices)  # enough devices?
    if plan.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {plan.repeats}")
    if plan.model_index is not None and not 0 <= plan.model_index < 2**31:
        raise UsageError(f"--model-index must be a model's position, 0 or more (below 2^31), got {plan.model_index}")
    if plan.sconf.init == "prior":
        from mcd_cli.targets.numpyro_model import is_model_target

        if not is_model_target(plan.target):
            raise UsageError(
                f"--init prior needs a NumPyro model target, and '{plan.target.name}' is not one; "
                "use --init target, laplace or vi"
            )
    if plan.sconf.smc:
        validate_populations(plan.num_samples, plan.particles, plan.population)
        if plan.sconf.adaptive and plan.load is not None:
            raise UsageError("--schedule adaptive uses no trained kernels, so --load does not apply; drop one")
    objective = objectives.OBJECTIVES.get(plan.tconf.objective)
    forward = registry.FORWARD[plan.sconf.sampler]
    if objective is not None and objective.detach and not forward.detachable and plan.tconf.iterations > 0:
        raise UsageError(
            f"--loss {plan.tconf.objective} holds the trajectories fixed, which needs a forward kernel with a "
            f"density at fixed points; {forward.label}'s leapfrog move has none: use --sampler ula or --loss elbo"
        )
    if plan.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be >= 0, got {plan.checkpoint_every}")
    if plan.save is not None and plan.repeats > 1:
        raise UsageError(
            "--save stores one trained sampler: use --repeats 1 with --save (then --load it "
            "with --repeats R to estimate R times)"
        )
    if plan.load is not None and (plan.checkpoint_dir is not None or plan.resume):
        raise UsageError("--load skips training, so --checkpoint/--resume do not apply; drop one")
    if plan.resume and plan.checkpoint_dir is None:
        raise UsageError("--resume needs --checkpoint DIR (the directory the run saved to)")
    if plan.output is not None:
        checkpoint.ensure_writable(plan.output, "--output file")
    if plan.save is not None:
        checkpoint.ensure_writable(plan.save, "--save file")
    if plan.load is not None:
        saved = plan.saved if plan.saved is not None else read_saved(plan.load, plan.target)
        differences = checkpoint.config_differences(
            saved.meta.get("sampler_config", {}), plan.sconf, ignore=NUMERICS_ONLY + ESTIMATION_FIELDS
        )
        if differences:
            raise checkpoint.CheckpointError(
                f"'{plan.load}' was trained with {', '.join(differences[:3])}; drop those options "
                "(the file's settings are used) or refit"
            )
    if plan.checkpoint_dir is not None:
        plan = sharded_plan(plan)  # a checkpoint records the batch size as run
        checkpoint.ensure_directory(plan.checkpoint_dir, "--checkpoint directory")
        for repeat in range(plan.repeats):
            path = plan.state_path(repeat)
            if not path.exists():
                continue
            meta = checkpoint.read_meta(path)
            if not plan.resume:
                raise UsageError(
                    f"'{plan.checkpoint_dir}' already holds a checkpoint (iteration "
                    f"{meta.get('iteration')}); add --resume to continue it, or choose an empty "
                    "--checkpoint directory"
                )
            check_state_meta(plan, meta, path, repeat)
    if check_mem:
        check_memory(plan, available if available is not None else available_memory())


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
    return list(est.backward.warnings(plan.target.dim, plan.sconf)) + rounding_notes(plan)


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


@dataclasses.dataclass
class _Totals:
    estimates: list = dataclasses.field(default_factory=list)
    train_seconds: float = 0.0
    estimate_seconds: float = 0.0
    smc: list = dataclasses.field(default_factory=list)
    skipped: int = 0
    recoveries: int = 0
    iterations_run: int = 0


def default_interrupt_dir(plan: RunPlan) -> Path:
    """Where Ctrl-C saves training when no --checkpoint directory was given."""
    return Path(f"mcd-checkpoint-{plan.target.name}-seed{plan.seed}")


def _save_interrupted(plan: RunPlan, state: Any, repeat: int) -> tuple[Optional[Path], str]:
    directory = plan.checkpoint_dir or default_interrupt_dir(plan)
    if not devices.is_primary():
        return Path(directory), ""
    try:
        checkpoint.ensure_directory(directory, "checkpoint directory")
        path = plan.state_path(repeat, directory)
        checkpoint.save_state(path, state, {**_file_meta(plan), "repeat": repeat})
        return Path(directory), ""
    except (OSError, checkpoint.CheckpointError) as err:
        return None, str(err)


def _train(plan: RunPlan, target: Any, key: jax.Array, repeat: int, progress: Progress, update, step_sizes):
    s, t = plan.sconf, plan.tconf
    state = init_train_state(key, target, s, t, step_sizes=step_sizes)
    path = plan.state_path(repeat) if plan.checkpoint_dir is not None else None
    if path is not None and plan.resume and path.exists():
        state, _ = checkpoint.load_state(path, state)
    meta = {**_file_meta(plan), "repeat": repeat} if path is not None else None

    def save_checkpoint(st):
        if devices.is_primary():
            checkpoint.save_state(path, st, meta)

    on_checkpoint = save_checkpoint if path is not None else None

    label = "training" if plan.repeats == 1 else f"training {repeat + 1}/{plan.repeats}"
    callback = progress.training(label, total=t.iterations, start=state.iteration)
    start = state.iteration
    try:
        result = fit(
            state,
            target,
            s,
            t,
            callback=callback,
            checkpoint_every=plan.checkpoint_every if path is not None else 0,
            on_checkpoint=on_checkpoint,
            update=update,
        )
    except TrainingInterrupted as interrupted:
        saved, reason = _save_interrupted(plan, interrupted.state, repeat)
        raise Interrupted(saved, interrupted.state.iteration, t.iterations, reason) from None
    return result, result.state.iteration - start


@dataclasses.dataclass(frozen=True)
class Start:
    """How a run started: the initial distribution chosen and the pilot's step sizes."""

    target: Any  # the target with its initial distribution (whitened for a full covariance)
    method: str  # the initial distribution used: target, auto:target, auto:vi, laplace-diag, ...
    warnings: tuple[str, ...] = ()
    step_sizes: Optional[Any] = None  # δ_1 … δ_K from the pilot (None: fixed or not needed)
    seconds: float = 0.0
    step_scale: Optional[float] = None  # the factor `pilot_scale` applied to the pilot's sizes


def pilot_scale(
    target: Any,
    step_sizes: Any,
    sconf: SamplerConfig,
    key: jax.Array,
    *,
    samples: int = SCALE_SAMPLES,
    gain: float = SCALE_GAIN,
    halvings: int = SCALE_HALVINGS,
) -> float:
    """The factor c ∈ {1, ½, …, 2^-halvings} by which to scale the curvature pilot's step sizes.

    The pilot sees curvature only; a target with kinks (a Laplace density, an L1 penalty) has none
    away from them, so every δ_k goes to the cap, where ULA's departure from invariance is large.
    The untrained ULA-AIS ELBO (mean log weight, `samples` particles, the same key for every c, so
    the particles are paired) measures what the sizes cost: the check halves c while the ELBO
    gains more than `gain` nats and more than 3 standard errors of the paired difference. On a
    smooth target sizes below the stability limit only slow the path down, so halving loses ELBO
    and c stays 1 (the sizes are unchanged); on `laplace` c becomes ¼
    (`benchmarks/results/pilot_scale_cpu.json`). A non-finite ELBO counts as −∞; when no scale
    gives a finite one, c stays 1 and training's own checks take over.
    """
    config = SamplerConfig(
        sampler="ula", backward="ais", steps=sconf.steps, step_size="pilot", max_step_size=sconf.max_step_size,
        unroll=sconf.unroll,
    )
    sizes = np.asarray(step_sizes, dtype=np.float64)

    def log_weights(c: float) -> np.ndarray:
        params = annealing.init_params(jax.random.key(0), target, config, step_sizes=sizes * c)
        return annealing.sample_log_weights(key, params, target, config, num_samples=samples, chunk_size=samples)

    def elbo(w: np.ndarray) -> float:
        value = float(np.mean(w))
        return value if np.isfinite(value) else -math.inf

    c, current = 1.0, log_weights(1.0)
    for _ in range(halvings):
        halved = log_weights(c / 2)
        if elbo(current) == -math.inf:
            better = elbo(halved) > -math.inf
        else:
            diff = halved - current
            se = float(np.std(diff) / math.sqrt(diff.size)) if np.all(np.isfinite(diff)) else math.inf
            better = elbo(halved) - elbo(current) > max(gain, 3 * se)
        if not better:
            break
        c, current = c / 2, halved
    return c if elbo(current) > -math.inf else 1.0


def initial_target(
    target: Any, sconf: SamplerConfig, seed: int, model_index: Optional[int] = None
) -> tuple[Any, str, tuple[str, ...]]:
    """The target with the initial distribution `sconf.init` asks for, its method, and the fit's warnings.

    The fit is made once per run from its own key, so a run that `--load`s parameters fits the
    same distribution as the run that trained them. log Z is unchanged (a full-covariance fit
    whitens the target, adding `log|det L|` to its log density). "auto" keeps a declared initial
    distribution (`Target.initial_declared`) and otherwise fits one by VI
    (`initialization.fit_initial`).
    """
    if sconf.init == "target":
        return target, "target", ()
    key = jax.random.fold_in(root_key(seed, model_index), INIT_STREAM)
    if sconf.init == "auto" and target.initial_declared:
        return target, "auto:target", ()
    if sconf.init == "prior":
        from mcd_cli.targets.numpyro_model import prior_initial

        mean, scale = prior_initial(target, key)
        return target.with_initial(mean=mean, scale=scale), "prior", ()
    from mcd_cli import initialization

    try:
        fit = initialization.fit_initial(
            target, key, sconf.init, cov=sconf.init_cov, explicit_initial=target.initial_declared
        )
    except ValueError as err:
        if sconf.init != "auto":
            raise RunFailed(f"--init {sconf.init} failed: {err}") from None
        # A target whose density is not finite where the fit looks cannot be fitted; the run can
        # still go on from the fallback, and training's own checks take over.
        return target, "auto:target-fallback", (
            f"auto: the VI fit failed ({err}); starting from the target's N(0, I) fallback",
        )
    # A diagonal fit whitens the target by its scales, so the samplers' isotropic steps see unit
    # conditional scales (a diagonal preconditioner); a full one whitens by its Cholesky factor.
    return initialization.apply_initial(target, fit, precondition=True), fit.method, tuple(fit.warnings)


def start(plan: RunPlan, *, pilot: bool = True) -> Start:
    """The initial distribution, then (with `sconf.step_size == "pilot"` and `pilot`) the step sizes.

    The pilot (`initialization.pilot_step_sizes`, its own key) measures the curvature along the
    linear path from the chosen initial distribution to the target and sets δ_k = 0.5 / λ_k,
    capped at `max_step_size`; `pilot_scale` (its own key) then halves the sizes while that buys
    the untrained ULA-AIS ELBO more than a nat (targets with kinks). Training starts from these
    sizes and goes on learning them.
    """
    t0 = time.perf_counter()
    target, method, warnings = initial_target(plan.target, plan.sconf, plan.seed, plan.model_index)
    step_sizes = scale = None
    if pilot and plan.sconf.step_size == "pilot":
        import numpy as np

        from mcd_cli import initialization

        root = root_key(plan.seed, plan.model_index)
        betas = np.linspace(0.0, 1.0, plan.sconf.steps + 1)
        step_sizes = initialization.pilot_step_sizes(
            target, betas, key=jax.random.fold_in(root, PILOT_STREAM), max_step_size=plan.sconf.max_step_size
        )
        scale = pilot_scale(target, step_sizes, plan.sconf, jax.random.fold_in(root, SCALE_STREAM))
        if scale != 1.0:
            step_sizes = step_sizes * scale
    return Start(target, method, warnings, step_sizes, time.perf_counter() - t0, scale)


def auto_batch_size(platform: Optional[str] = None) -> int:
    """`--batch-size auto`: 128 on a CPU, 1024 on a GPU or TPU.

    On a CPU the update's time grows in proportion to the batch, so the paper's 128 is kept. On
    an accelerator an update at K = 64, batch 128 is bound by kernel launches, not arithmetic
    (measured on an H200 at d = 200, chunks of 50, unroll 4: batch 1024 costs 2.0× batch 128 for
    ULA and 2.6× for ULA-MCD, 2.79 → 7.29 ms; benchmarks/results/training_step_gpu_h200*.json),
    so a batch 8× larger costs far less than 8× the time and gives gradients with 8× less variance. `validate`
    refuses the run when that batch does not fit in memory (lower it with --batch-size).
    """
    platform = platform or jax.devices()[0].platform
    return CPU_BATCH if platform == "cpu" else ACCELERATOR_BATCH


def auto_unroll(platform: Optional[str] = None) -> int:
    """Steps fused per iteration of the annealing scan: 1 on a CPU, 4 on a GPU or TPU.

    Measured on an H200 (gmm8, d = 200, K = 64, batch 128, chunks of 50 updates;
    benchmarks/results/training_step_gpu_h200_unroll.json): unroll 1 / 4 / 8 take the ULA update
    3.23 / 1.93 / 1.75 ms, ULA-MCD 4.33 / 2.80 / 2.64 ms and UHA-MCD 5.50 / 4.07 / 4.07 ms; 4 gains
    26–40 %, 8 another 0–9 %, for 3–59 % more compile time. On a CPU unrolling by 4 made the
    update 13–52 % slower (benchmarks/results/training_step_cpu.json).
    """
    platform = platform or jax.devices()[0].platform
    return 1 if platform == "cpu" else ACCELERATOR_UNROLL


def device_name() -> str:
    """The JAX device used, e.g. `cpu` or `gpu:NVIDIA H100 80GB HBM3`."""
    device = jax.devices()[0]
    kind = str(getattr(device, "device_kind", "") or "")
    platform = str(device.platform)
    return platform if not kind or kind.lower() == platform else f"{platform}:{kind}"


def execute(plan: RunPlan, progress: Optional[Progress] = None) -> RunRecord:
    """Fits (or loads) and estimates `plan.repeats` times; returns the record.

    Raises:
        Interrupted: Ctrl-C during training (the state was saved).
        RunFailed: the estimate could not be made (training diverged, no finite weight).
    """
    progress = progress or NoProgress()
    s, t = plan.sconf, plan.tconf
    layout = devices.particle_layout(plan.devices)
    _, _, chunk_size = sharded_sizes(plan)
    plan = sharded_plan(plan)
    t = plan.tconf
    if s.adaptive:
        t = dataclasses.replace(t, iterations=0)  # nothing to train: the moves are Metropolis moves
    begin = start(plan, pilot=plan.load is None and t.iterations > 0)
    target = begin.target
    root = root_key(plan.seed, plan.model_index)
    totals = _Totals()
    loaded = None
    if plan.load is not None:
        template = annealing.init_params(root, target, s)
        loaded, meta = checkpoint.load_params(plan.load, template)
        t = dataclasses.replace(t, iterations=int(meta.get("train_config", {}).get("iterations", 0)))
    update = make_train_chunk(target, s, t, sharding=layout.particles) if loaded is None and t.iterations > 0 else None
    histories, weights = [], []
    stop_reasons = []
    for repeat in range(plan.repeats):
        key_init, key_estimate = jax.random.split(jax.random.fold_in(root, repeat))
        result = None
        if loaded is not None:
            params = loaded
        elif s.adaptive:
            params = annealing.init_params(key_init, target, s)  # only the initial distribution is used
        else:
            result, ran = _train(plan, target, key_init, repeat, progress, update, begin.step_sizes)
            params = result.state.params
            histories.append(result.elbo_history)
            stop_reasons.append(result.stop_reason)
            totals.train_seconds += result.seconds
            totals.skipped += result.skipped
            totals.recoveries += result.recoveries
            totals.iterations_run += ran
            if plan.save is not None and devices.is_primary():
                checkpoint.save_params(plan.save, params, _file_meta(plan))
        label = "estimating" if plan.repeats == 1 else f"estimating {repeat + 1}/{plan.repeats}"
        callback = progress.estimation(label, total=plan.num_samples)
        t0 = time.perf_counter()
        try:
            if s.smc:
                est, diagnostics = estimate_smc(
                    plan, target, params, key_estimate, callback, sharding=layout.particles
                )
                totals.smc.append(diagnostics)
            else:
                log_w = annealing.sample_log_weights(
                    key_estimate, params, target, s, plan.num_samples, chunk_size, callback=callback,
                    sharding=layout.particles,
                )
        except KeyboardInterrupt:
            if result is None:
                raise
            # Interrupted while estimating: keep the finished training, so a resume only estimates.
            saved, reason = _save_interrupted(plan, result.state, repeat)
            raise Interrupted(saved, result.state.iteration, t.iterations, reason) from None
        seconds = time.perf_counter() - t0
        est = dataclasses.replace(est, seconds=seconds) if s.smc else summarize(log_w, seconds=seconds)
        totals.estimate_seconds += seconds
        if not math.isfinite(est.log_z):
            raise RunFailed(
                f"the log Z estimate is {est.log_z}: the weights are degenerate; train longer, use "
                "more steps, or check the target with `mcd check`"
            )
        totals.estimates.append(est)
        if not s.smc:  # SMC's weights are spread over resampled generations: no one histogram
            weights.append(summarize_weights(log_w))
    return RunRecord(
        target=TargetInfo.of(target, plan.target_spec, plan.target_text, plan.target_args, plan.target_model, plan.target_data),
        sampler=s,
        training=t,
        combined=combine_estimates(totals.estimates),
        seed=plan.seed,
        num_samples=plan.num_samples,
        repeats=plan.repeats,
        x64=plan.x64,
        iterations_run=totals.iterations_run,
        skipped_steps=totals.skipped,
        recoveries=totals.recoveries,
        train_seconds=totals.train_seconds,
        estimate_seconds=totals.estimate_seconds,
        device=device_name(),
        devices=layout.count,
        processes=devices.process_count(),
        version=version(),
        loaded_from=str(plan.load) if plan.load is not None else None,
        elbo_history=tuple(histories),
        init_warnings=begin.warnings,
        init_method=begin.method,
        start_seconds=begin.seconds,
        initial_step_sizes=None if begin.step_sizes is None else tuple(float(v) for v in begin.step_sizes),
        initial_step_scale=begin.step_scale,
        stop_reasons=tuple(stop_reasons),
        model_index=plan.model_index,
        weights=tuple(weights),
        smc=tuple(totals.smc),
        particles=plan.particles,
    )


def smc_settings(s: SamplerConfig, population: int, populations: int) -> dict:
    """The SMC settings as run, the head of a record's `smc` section."""
    return {
        "schedule": s.schedule,
        "resample": s.resample,
        "resampling": s.resampling,
        "refine": s.refine,
        "refine_steps": s.refine_steps,
        "leapfrog": s.leapfrog,
        "refine_every": "step" if s.adaptive else s.refine_every,
        "target_ess": s.target_ess if s.adaptive else None,
        "particles": population,
        "populations": populations,
    }


def estimate_smc(
    plan: RunPlan, target: Any, params: Any, key: jax.Array, callback, sharding: Optional[Any] = None
) -> tuple[Any, dict]:
    """The SMC estimate of one repeat and its diagnostics (the record's `smc` section).

    `num_samples` particles run as `num_samples / population` independent SMC runs (population `j`
    uses `fold_in(key, j)`), merged by averaging their Ẑ (`stats.merge_runs`). On a fixed schedule
    the importance-sampling estimate of the same kernels (the per-particle loop, the estimation
    key's own particles) is computed too, as `log_z_is`: what resampling and refinement bought.

    With `sharding` (the particle axis over several devices) each population is split over the
    devices and resampled globally (`smc.run`): the estimate is the single-device one. The
    population is rounded up to a multiple of the device count (`sharded_population`).
    """
    s = plan.sconf
    runs = plan.num_samples // plan.population
    population = sharded_population(plan)
    if sharding is not None and sharding.mesh.devices.size == 1:
        sharding = None  # one device: the unconstrained program, bit for bit the same
    compiled = smc.compiled(target, s, population, True, sharding)

    def importance() -> np.ndarray:
        return annealing.sample_log_weights(
            key, params, target, s, plan.num_samples, plan.chunk_size, sharding=sharding
        )

    return estimate_populations(
        s, population, runs * population, lambda j: compiled(params, jax.random.fold_in(key, j)),
        None if s.adaptive else importance, callback,
    )


def stationarity_of(outputs: Sequence[Any]) -> Optional[tuple[float, float]]:
    """The populations' stationarity tests (`smc.stationarity`) pooled: the mean drift of log γ
    over the populations and its z score (their standard errors combined as independent); None
    when the runs made no refinement moves."""
    if outputs[0].drift is None:
        return None
    m = np.array([float(o.drift[0]) for o in outputs])
    z = np.array([float(o.drift[1]) for o in outputs])
    se = np.where(z != 0, np.abs(m / np.where(z != 0, z, 1.0)), 0.0)
    pooled_se = math.sqrt(float(np.sum(se * se))) / len(m)
    mean = float(np.mean(m))
    return mean, (mean / pooled_se if pooled_se > 0 else 0.0)


def estimate_populations(
    s: SamplerConfig,
    population: int,
    num_samples: int,
    run_population: Callable[[int], Any],
    importance: Optional[Callable[[], np.ndarray]],
    callback: Callable[[int, int], None],
) -> tuple[Any, dict]:
    """`num_samples / population` SMC runs merged into one estimate, and their diagnostics.

    Args:
        s: the sampler (its SMC fields).
        population: particles per run.
        num_samples: particles in all (a multiple of `population`).
        run_population: `j -> SMCOutput` of run j (its own key).
        importance: `() -> log weights` of the same kernels by importance sampling (`log_z_is`), or
            None (adaptive tempering has no kernels of its own).
        callback: `(done, total)` after each run.

    Raises:
        RunFailed: every weight vanished, or adaptive tempering did not reach β = 1.
    """
    runs = num_samples // population
    estimates, outputs = [], []
    for j in range(runs):
        out = jax.device_get(run_population(j))
        estimates.append(
            smc_estimate(
                float(out.log_z), out.log_w, out.eve, int(out.resamplings),
                multinomial=s.resampling == "multinomial",
            )
        )
        outputs.append(out)
        callback((j + 1) * population, num_samples)
    merged = merge_runs(estimates)
    if not math.isfinite(merged.log_z):
        raise RunFailed(
            f"the SMC log Z estimate is {merged.log_z}: every particle's weight vanished; use more "
            "--samples, a higher --target-ess, or check the target with `mcd check`"
        )
    first = outputs[0]
    k = int(first.steps)
    if s.adaptive and float(first.trace.beta[k - 1]) < 1.0:
        raise RunFailed(
            f"adaptive tempering reached β = {float(first.trace.beta[k - 1]):.4g} in --max-steps "
            f"{s.max_steps} steps, not 1; raise --max-steps or lower --target-ess"
        )
    mixing = None
    if s.adaptive:  # the moves are the only mixing: judge them (stats.mixing_verdict)
        corr = np.concatenate([np.asarray(o.trace.correlation[: int(o.steps)]) for o in outputs])
        corr = corr[np.isfinite(corr)]
        mixing = float(np.median(corr)) if corr.size else None
        merged = mixing_verdict(merged, mixing)
    merged = population_verdict(merged, runs)
    drift = stationarity_of(outputs)
    extra_moves = None if drift is None else smc.stationarity_moves(s)
    if drift is not None:
        merged = stationarity_verdict(merged, *drift, extra_moves)
    acceptance = np.concatenate([np.asarray(o.trace.acceptance[: int(o.steps)]) for o in outputs])
    acceptance = acceptance[np.isfinite(acceptance)]
    diagnostics = {
        **smc_settings(s, population, runs),
        "steps": [int(o.steps) for o in outputs],
        "resamplings": [int(o.resamplings) for o in outputs],
        "final_ess": [float(e.ess / e.num_samples) for e in estimates],
        "mean_acceptance": float(acceptance.mean()) if acceptance.size else None,
        "log_z_populations": [float(e.log_z) for e in estimates],
        "genealogy_stderr": [float(e.delta_stderr) for e in estimates],
        "beta": [float(v) for v in first.trace.beta[:k]],
        "ess": [float(v) for v in first.trace.ess[:k]],
        "acceptance": [float(v) for v in first.trace.acceptance[:k]],
        "step_size": [float(v) for v in first.trace.step_size[:k]],
        "move_correlation": [float(v) for v in first.trace.correlation[:k]] if s.adaptive else None,
        "median_move_correlation": mixing,
        "stationarity_drift": None if drift is None else drift[0],
        "stationarity_z": None if drift is None else drift[1],
        "stationarity_moves": extra_moves,
        "resampled_steps": [i + 1 for i in range(k) if bool(first.trace.resampled[i])],
        "log_z_is": None,
        "log_z_is_stderr": None,
        "log_z_is_status": None,
    }
    if importance is not None:
        try:
            log_w = importance()
            plain = summarize(log_w)
            diagnostics.update(
                log_z_is=plain.log_z, log_z_is_stderr=plain.log_z_stderr, log_z_is_status=plain.status.value
            )
        except RunFailed:
            diagnostics["log_z_is_status"] = "unreliable"
    return merged, diagnostics
