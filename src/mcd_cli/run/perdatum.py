"""Per-datum evidence of a conditional target, as a library call: fit, then estimate every datum.

`execute(plan, on_datum, progress)` returns the summary record and hands each datum's record to
`on_datum` as soon as it is made (the command line prints it and appends it to `--output`), so the
memory used does not grow with the number of data: the weights of one datum are reduced to its
record before the next datum starts, and only the per-datum log Ẑ and standard errors (two numbers
each) are kept for the summary.

Two ways to fit:

* amortised (`plan.amortise`): one sampler for all the data, its score network conditioned on the
  datum's features; trained once on batches that draw data and particles together;
* separate: each datum is its own run (trained, then estimated), with the datum-free sampler;
  fine for a handful of data. With `--iterations 0` (plain AIS) the two are the same.

With SMC settings (`--resample`, `--refine`, `--schedule adaptive`) each datum's estimate is SMC
on that datum's target (`datum_population`): `num_samples` particles in populations of
`particles` (default: `run.population_size`), from the datum's `initial(x)`, with the trained (or initial) kernels on
a fixed schedule, or adaptive tempering with no training at all. Only one population is held at a
time, so memory is bounded by the population, whatever the number of data.

Keys: `fold_in(key(seed), 0)` is split into an initialisation and an estimation key; datum `i`
(its index in the full data set) estimates with `fold_in(estimation key, i)` and, when trained
separately, initialises with `fold_in(initialisation key, i)`. A datum's estimate therefore does
not depend on which other data were selected (`--data-index`).

Checkpoints (`--checkpoint DIR`) work as for any run: the amortised training state is saved every
`checkpoint_every` iterations (and on Ctrl-C), and each finished datum's record is appended to
`DIR/data.jsonl`; `--resume` continues the training and skips the data already estimated (their
records count in the summary and are not emitted again), so an interrupted run and its resumption
give the records of an uninterrupted one. A datum trained separately restarts its short training.

The file's reference `log_z(x)` is called eagerly on each concrete datum (it may use numpy, scipy
or `float()`); an exception in it is reported as an error in the target's file.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli import amortised, annealing, checkpoint, devices, smc
from mcd_cli._version import __version__
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import RunFailed, UsageError
from mcd_cli.record import SCHEMA_VERSION, TargetInfo, datum_record, finite
from mcd_cli.run.defaults import DEFAULT_CHUNK, population_size
from mcd_cli.run.estimate import estimate_populations, smc_settings
from mcd_cli.run.fit import Checkpoints, saved_on_interrupt
from mcd_cli.run.plan import NoProgress, Progress, device_name
from mcd_cli.run.smc_kernels import run_smc
from mcd_cli.run.validate import validate_populations
from mcd_cli.stats import Estimate, summarize, summarize_data
from mcd_cli.targets.conditional import ConditionalTarget, datum_target
from mcd_cli.training import fit, init_train_state

DATA_LOG = "data.jsonl"  # the finished data's records, in a checkpoint directory


@dataclasses.dataclass(frozen=True)
class PerDatumPlan:
    """Everything a per-datum run does."""

    target: ConditionalTarget
    sconf: SamplerConfig
    tconf: TrainConfig
    amortise: bool
    num_samples: int = 1024
    seed: int = 0
    chunk_size: int = DEFAULT_CHUNK
    data_batch: int = amortised.DEFAULT_DATA_BATCH
    x64: bool = False
    target_spec: Optional[str] = None
    target_args: Optional[dict] = None
    target_data: Optional[str] = None
    particles: Optional[int] = None  # SMC particles per population (None: the default split)
    checkpoint_dir: Optional[Path] = None
    checkpoint_every: int = 0
    resume: bool = False
    devices: Optional[int] = None  # devices per process to shard particles over (None: all)

    @property
    def population(self) -> int:
        """SMC particles per population: `particles`, or the default of `population_size`."""
        return population_size(self.num_samples, self.particles, self.target.dim)

    def state_path(self, repeat: int = 0, directory: Optional[Path] = None) -> Path:
        return Path(directory or self.checkpoint_dir) / f"state-r{repeat}.npz"

    @property
    def model_index(self) -> None:  # the checkpoint metadata of `run.plan.file_meta`
        return None

    @property
    def repeats(self) -> int:
        return 1

def parse_index(text: str, num_data: int) -> tuple[int, int]:
    """`--data-index` (`i:j`, `i:`, `:j` or `i`, Python slice rules, no step) -> `(start, stop)`.

    Example:
        >>> parse_index("2:5", 10), parse_index("-3:", 10), parse_index("4", 10)
        ((2, 5), (7, 10), (4, 5))
    """
    parts = text.split(":")
    try:
        if len(parts) == 1:
            i = int(parts[0])
            start, stop = (i, i + 1) if i >= 0 else (num_data + i, num_data + i + 1)
        elif len(parts) == 2:
            start, stop, _ = slice(*(int(p) if p.strip() else None for p in parts)).indices(num_data)
        else:
            raise ValueError
    except ValueError:
        raise UsageError(f"--data-index expects i:j (e.g. 0:100), i: or a single index, got {text!r}") from None
    if not 0 <= start < stop <= num_data:
        raise UsageError(
            f"--data-index {text} selects no datum of the {num_data} in the data set; use indices in 0:{num_data}"
        )
    return start, stop


def validate(plan: PerDatumPlan) -> None:
    """Settings a conditional target cannot take, as one-line usage errors (before any work)."""
    s = plan.sconf
    if plan.num_samples < 1:
        raise UsageError(f"--samples must be at least 1, got {plan.num_samples}")
    if s.init not in ("auto", "target"):
        raise UsageError(
            f"--init {s.init} fits one initial distribution, but a conditional target has one per datum; "
            "use --init target or auto (both: the file's initial(x))"
        )
    if s.step_size != "fixed":
        raise UsageError(
            "the step-size pilot fits one target; a conditional target's step sizes start at "
            "--step-size NUMBER and are learned over the data: give a number"
        )
    if s.smc:
        validate_populations(plan.num_samples, plan.particles, plan.population, per=" per datum")
    elif plan.particles is not None:
        raise UsageError("--particles sets the SMC population size; add --resample, --refine or --schedule adaptive, or drop it")
    if plan.amortise and s.context_dim != plan.target.context_dim:
        raise UsageError(
            f"context_dim {s.context_dim} does not match the target's features ({plan.target.context_dim}); "
            "drop context_dim from the settings"
        )
    devices.particle_layout(plan.devices)  # enough devices?
    if plan.resume and plan.checkpoint_dir is None:
        raise UsageError("--resume needs --checkpoint DIR (the directory the run saved to)")
    if plan.checkpoint_dir is not None:
        checkpoint.ensure_directory(plan.checkpoint_dir, "--checkpoint directory")
        saved = [p for p in (plan.state_path(), Path(plan.checkpoint_dir) / DATA_LOG) if p.exists()]
        if saved and not plan.resume:
            raise UsageError(
                f"'{plan.checkpoint_dir}' already holds a checkpoint ({saved[0].name}); add --resume to continue "
                "it, or choose an empty --checkpoint directory"
            )


def _fit(plan: PerDatumPlan, key: jax.Array, data: np.ndarray, progress: Progress, label: str, saver: Checkpoints):
    one = datum_target(plan.target, data[0])
    state = saver.resume(init_train_state(key, one, plan.sconf, plan.tconf), plan.resume)
    if plan.tconf.iterations == 0:
        return state.params, 0.0, 0, 0
    update = amortised.make_train_chunk(plan.target, plan.sconf, plan.tconf, data, plan.data_batch)
    callback = progress.training(label, total=plan.tconf.iterations, start=state.iteration)
    with saved_on_interrupt(plan, 0, total=plan.tconf.iterations):
        result = fit(
            state, one, plan.sconf, plan.tconf, callback=callback, update=update, checkpoint_every=saver.every,
            on_checkpoint=saver.on_checkpoint,
        )
    return result.state.params, result.seconds, result.skipped, result.recoveries


@functools.lru_cache(maxsize=16)
def datum_population(target: ConditionalTarget, sconf: SamplerConfig, num: int, sharding: Any = None) -> Callable:
    """Compiled `(params, key, x) -> smc.SMCOutput`: one SMC run of `num` particles on the datum `x`'s
    target, started from `initial(x)`, the score network (amortised) conditioned on the datum's
    features. One compilation serves every datum."""

    @jax.jit
    def population(params, key, x):
        one, ctx = annealing.datum(target, sconf, x)
        return smc.replicate(run_smc(key, params, one, sconf, num, context=ctx, sharding=sharding), sharding)

    return population


def known_log_z(target: ConditionalTarget, x: np.ndarray) -> Optional[float]:
    """The file's reference `log_z(x)`, called eagerly on the concrete datum; an exception in it is
    the target file's error (`RunFailed` naming the file), not an internal one."""
    if target.log_z is None:
        return None
    try:
        return float(target.log_z(np.asarray(x)))
    except Exception as err:  # noqa: BLE001 - the user's code: any failure is theirs
        where = target.source or target.name
        raise RunFailed(f"error in {where}, function log_z: {type(err).__name__}: {' '.join(str(err).split())}") from None


def _estimate_datum(plan: PerDatumPlan, params, key: jax.Array, x: np.ndarray, sharding: Any) -> tuple[Estimate, Optional[dict]]:
    """One datum's estimate: importance sampling, or SMC with its diagnostics (None for IS)."""
    s = plan.sconf
    t0 = time.perf_counter()

    def importance() -> np.ndarray:
        return annealing.sample_log_weights(
            key, params, plan.target, s, plan.num_samples, plan.chunk_size, sharding=sharding, x=x
        )

    if not s.smc:
        return summarize(importance(), seconds=time.perf_counter() - t0), None
    count = 1 if sharding is None else sharding.mesh.devices.size
    population = datum_population(plan.target, s, devices.round_up(plan.population, count), sharding)
    xj = jnp.asarray(x)
    est, diagnostics = estimate_populations(
        s, plan.population, plan.num_samples, lambda j: population(params, jax.random.fold_in(key, j), xj),
        None if s.adaptive else importance, lambda done, total: None,
    )
    return dataclasses.replace(est, seconds=time.perf_counter() - t0), diagnostics


class _SMCTotals:
    """Running means over the data of the SMC diagnostics (constant memory in the number of data)."""

    def __init__(self) -> None:
        self.count, self.steps, self.resamplings, self.final_ess = 0, 0.0, 0.0, 0.0
        self.accept, self.accept_count, self.log_z_is, self.is_count = 0.0, 0, 0.0, 0

    def add(self, d: dict) -> None:
        self.count += 1
        self.steps += float(np.mean(d["steps"]))
        self.resamplings += float(np.mean(d["resamplings"]))
        self.final_ess += float(np.mean(d["final_ess"]))
        if d["mean_acceptance"] is not None:
            self.accept, self.accept_count = self.accept + d["mean_acceptance"], self.accept_count + 1
        if d["log_z_is"] is not None and math.isfinite(d["log_z_is"]):
            self.log_z_is, self.is_count = self.log_z_is + d["log_z_is"], self.is_count + 1

    def section(self, s: SamplerConfig, population: int, populations: int) -> dict:
        mean = lambda total, n: finite(total / n) if n else None  # noqa: E731
        return {
            **smc_settings(s, population, populations),
            "mean_steps": mean(self.steps, self.count),
            "mean_resamplings": mean(self.resamplings, self.count),
            "mean_final_ess": mean(self.final_ess, self.count),
            "mean_acceptance": mean(self.accept, self.accept_count),
            "mean_log_z_is": mean(self.log_z_is, self.is_count) if self.is_count == self.count else None,
        }


def _finished(plan: PerDatumPlan) -> dict[int, dict]:
    """The records of the data a resumed run already estimated (from `DIR/data.jsonl`)."""
    if plan.checkpoint_dir is None or not plan.resume:
        return {}
    path = Path(plan.checkpoint_dir) / DATA_LOG
    if not path.exists():
        return {}
    records = {}
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
            records[int(rec["datum"])] = rec
        except (ValueError, KeyError, TypeError):
            continue  # the fragment of a line cut short by a crash: that datum is estimated again
    return records


def execute(
    plan: PerDatumPlan, on_datum: Callable[[dict], None], progress: Optional[Progress] = None
) -> dict:
    """Fits and estimates every datum of `plan.target`; returns the summary record (docs/json.md).

    With adaptive tempering nothing is trained (its moves are Metropolis moves): `iterations` is
    taken as 0. `on_datum` receives each datum's record as it is made (not the records of data a
    resumed run had finished).
    """
    progress = progress or NoProgress()
    target, s, t = plan.target, plan.sconf, plan.tconf
    if s.adaptive and t.iterations:
        t = dataclasses.replace(t, iterations=0)
        plan = dataclasses.replace(plan, tconf=t)
    layout = devices.particle_layout(plan.devices)
    sharding = layout.particles if layout.count > 1 else None
    key_init, key_estimate = jax.random.split(jax.random.fold_in(jax.random.key(plan.seed), 0))
    train_seconds, estimate_seconds, skipped, recoveries = 0.0, 0.0, 0, 0
    params = None
    if plan.amortise or t.iterations == 0:
        params, train_seconds, skipped, recoveries = _fit(
            plan, key_init, target.data, progress, "training (amortised)", Checkpoints.of(plan, 0)
        )
    log_z, stderr, counts, known = [], [], {"ok": 0, "warn": 0, "unreliable": 0, "failed": 0}, []
    smc_totals = _SMCTotals()
    finished = _finished(plan)
    data_log = None if plan.checkpoint_dir is None else Path(plan.checkpoint_dir) / DATA_LOG
    callback = progress.estimation("estimating", total=target.num_data)
    for done, (index, x) in enumerate(zip(target.indices, target.data)):
        index = int(index)
        rec = finished.get(index)
        if rec is None:
            if params is None:
                datum_params, seconds, sk, rc = _fit(
                    plan, jax.random.fold_in(key_init, index), x[None], progress, f"training datum {index}",
                    Checkpoints(None, 0, None),
                )
                train_seconds, skipped, recoveries = train_seconds + seconds, skipped + sk, recoveries + rc
            else:
                datum_params = params
            known_i = known_log_z(target, x)
            t0 = time.perf_counter()
            try:
                with saved_on_interrupt(plan, 0):
                    est, diagnostics = _estimate_datum(
                        plan, datum_params, jax.random.fold_in(key_estimate, index), x, sharding
                    )
                rec = datum_record(index, est, known_i, smc=diagnostics)
            except RunFailed as err:  # includes AllWeightsNonFinite
                rec = datum_record(index, None, known_i, str(err))
            estimate_seconds += time.perf_counter() - t0
            if data_log is not None and devices.is_primary():
                checkpoint.append_line(data_log, json.dumps(rec, allow_nan=False))
            on_datum(rec)
        if rec.get("smc") is not None:
            smc_totals.add(rec["smc"])
        counts[rec["status"]] += 1
        if rec["log_z"] is not None:
            log_z.append(rec["log_z"])
            stderr.append(rec["log_z_stderr"] if rec["log_z_stderr"] is not None else rec["delta_stderr"])
            if rec["known_log_z"] is not None:
                known.append(rec["known_log_z"])
        callback(done + 1, target.num_data)
    if not log_z:
        raise RunFailed(
            f"no datum of '{target.name}' gave a finite estimate; train longer, use more steps, or check "
            "the target's log_density(z, x)"
        )
    summary = summarize_data(log_z, stderr)
    info = TargetInfo.of(target, plan.target_spec, None, plan.target_args, None, plan.target_data)
    return {
        "record": "summary",
        "schema_version": SCHEMA_VERSION,
        "target": info.name,
        "dim": info.dim,
        "target_info": dataclasses.asdict(info),
        "label": s.label,
        "sampler": s.sampler,
        "backward": s.backward,
        "steps": None if s.adaptive else s.steps,
        "amortise": bool(plan.amortise),
        "data_index": [int(target.indices[0]), int(target.indices[-1]) + 1],
        "num_data": target.num_data,
        "num_estimated": summary.num_data,
        "mean_log_z": finite(summary.mean),
        "mc_stderr": finite(summary.mc_stderr),
        "data_stderr": finite(summary.data_stderr),
        "known_mean_log_z": finite(float(np.mean(known))) if len(known) == summary.num_data else None,
        "counts": counts,
        "not_ok": counts["warn"] + counts["unreliable"] + counts["failed"],
        "num_samples": plan.num_samples,
        "smc": smc_totals.section(s, plan.population, plan.num_samples // plan.population) if s.smc else None,
        "iterations": t.iterations,
        "batch_size": t.batch_size,
        "data_batch": amortised.batch_shape(target.num_data if plan.amortise else 1, t.batch_size, plan.data_batch)[0],
        "lr": t.lr,
        "skipped_steps": skipped,
        "recoveries": recoveries,
        "train_seconds": round(train_seconds, 3),
        "estimate_seconds": round(estimate_seconds, 3),
        "seed": plan.seed,
        "sampler_config": dataclasses.asdict(s),
        "train_config": dataclasses.asdict(t),
        "device": device_name(),
        "precision": "float64" if plan.x64 else "float32",
        "version": __version__,
    }
