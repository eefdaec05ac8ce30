"""Per-datum evidence of a conditional target, as a library call: fit, then estimate every datum.

`execute(plan, on_datum, progress)` returns the summary record (`record.DataRecord`) and hands each
datum's record (`record.DatumRecord`) to `on_datum` as soon as it is made (the command line prints
it and appends it to `--output`), so the memory used does not grow with the number of data: the
weights of one datum are reduced to its record before the next datum starts, and only the per-datum
log Ẑ and standard errors (two numbers each) are kept for the summary.

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

The default policy (`mcd estimate` with no method option) runs over data by stages
(`mcd_cli.policy.perdatum`): pilots of untrained adaptive SMC on the first `PILOT_DATA` data, then a
final run over every datum; each stage is an `execute` of its plan.

Keys: `fold_in(key(seed), 0)` (for stage s of a policy run, then `fold_in(·, STAGE_STREAM + s)`) is
split into an initialisation and an estimation key; datum `i` (its index in the full data set)
estimates with `fold_in(estimation key, i)` and, when trained separately, initialises with
`fold_in(initialisation key, i)`. A datum's estimate therefore does not depend on which other data
were selected (`--data-index`).

Checkpoints (`--checkpoint DIR`) work as for any run: the amortised training state is saved every
`checkpoint_every` iterations (and on Ctrl-C), and each finished datum's record is appended to
`DIR/data.jsonl`; `--resume` continues the training and skips the data already estimated (their
records count in the summary and are not emitted again), so an interrupted run and its resumption
give the records of an uninterrupted one. A datum trained separately restarts its short training.
With a policy the log is the final run's; a resumed run makes its (deterministic) pilots again.

The file's reference `log_z(x)` is called eagerly on each concrete datum (it may use numpy, scipy
or `float()`); an exception in it is reported as an error in the target's file.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli import smc
from mcd_cli.train import amortised
from mcd_cli.path import annealing
from mcd_cli.runtime import devices
from mcd_cli.io import files
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import RunFailed, UsageError, os_reason
from mcd_cli.record import DataRecord, DatumRecord, TargetInfo, finite
from mcd_cli.run.defaults import DEFAULT_CHUNK, population_size
from mcd_cli.run.estimate import TUNING_STREAM, estimate_populations, tuned_refinement
from mcd_cli.run.fit import Checkpoints, saved_on_interrupt, trained_config
from mcd_cli.run.plan import STAGE_STREAM, NoProgress, Progress, device_name
from mcd_cli.run.smc_kernels import run_smc
from mcd_cli.run.tally import Tally
from mcd_cli.run.validate import validate_populations
from mcd_cli.stats import Estimate, summarize, summarize_data
from mcd_cli.targets.conditional import ConditionalTarget, datum_target
from mcd_cli.train.loop import fit, init_train_state

DATA_LOG = "data.jsonl"  # the finished data's records, in a checkpoint directory
# A policy's pilot estimates this many data (the first selected): enough that a datum whose verdict
# differs shows up, few enough that the pilots cost less than the final run over many data.
PILOT_DATA = 4


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
    stage: Optional[int] = None  # stage s of a policy run: keys from fold_in(root, STAGE_STREAM + s)

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
            "the curvature run of --step-size auto fits one target; a conditional target's step sizes start at "
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
        files.ensure_directory(plan.checkpoint_dir, "--checkpoint directory")
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
            on_checkpoint=saver.on_checkpoint, history=saver.history,
        )
    return result.state.params, result.seconds, result.skipped, result.recoveries


@functools.lru_cache(maxsize=16)
def datum_population(target: ConditionalTarget, sconf: SamplerConfig, num: int, sharding: Any = None) -> Callable:
    """Compiled `(params, key, x) -> smc.SMCOutput`: one SMC run of `num` particles on the datum `x`'s
    target, started from `initial(x)`, the score network (amortised) conditioned on the datum's
    features. One compilation serves every datum."""

    @jax.jit
    def population(params, key, x, frozen=None):
        one, ctx = annealing.datum(target, sconf, x)
        out = run_smc(key, params, one, sconf, num, context=ctx, sharding=sharding, frozen=frozen)
        return smc.replicate(out, sharding)

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
    frozen = tuned_refinement(s, lambda: population(params, jax.random.fold_in(key, TUNING_STREAM), xj))
    est, diagnostics = estimate_populations(
        s, plan.population, plan.num_samples, lambda j: population(params, jax.random.fold_in(key, j), xj, frozen),
        None if s.adaptive else importance, lambda done, total: None,
    )
    return dataclasses.replace(est, seconds=time.perf_counter() - t0), diagnostics


def _finished(plan: PerDatumPlan) -> dict[int, DatumRecord]:
    """The records of the data a resumed run already estimated (from `DIR/data.jsonl`)."""
    if plan.checkpoint_dir is None or not plan.resume:
        return {}
    path = Path(plan.checkpoint_dir) / DATA_LOG
    if not path.exists():
        return {}
    records = {}
    for line in path.read_text().splitlines():
        try:
            rec = DatumRecord.from_dict(json.loads(line))
            records[rec.datum] = rec
        except (ValueError, KeyError, TypeError):
            continue  # the fragment of a line cut short by a crash: that datum is estimated again
    return records


def _datum(
    plan: PerDatumPlan, params: Any, keys: tuple[jax.Array, jax.Array], index: int, x: np.ndarray, sharding: Any,
    progress: Progress, tally: Tally,
) -> DatumRecord:
    """Datum `index`'s record: its own training first when nothing was trained for all the data
    (`params` None), then its estimate; appended to the checkpoint's data log."""
    key_init, key_estimate = keys
    if params is None:
        params = tally.trained(*_fit(
            plan, jax.random.fold_in(key_init, index), x[None], progress, f"training datum {index}",
            Checkpoints(None, 0, None),
        ))
    known = known_log_z(plan.target, x)
    t0 = time.perf_counter()
    try:
        with saved_on_interrupt(plan, 0):
            est, diagnostics = _estimate_datum(plan, params, jax.random.fold_in(key_estimate, index), x, sharding)
        rec = DatumRecord.of(index, est, known, smc=diagnostics)
    except RunFailed as err:  # includes AllWeightsNonFinite
        rec = DatumRecord.of(index, None, known, str(err))
    tally.estimate_seconds += time.perf_counter() - t0
    if plan.checkpoint_dir is not None and devices.is_primary():
        _log_datum(Path(plan.checkpoint_dir) / DATA_LOG, rec, tally)
    return rec


def _log_datum(path: Path, rec: DatumRecord, tally: Tally) -> None:
    """Appends a datum's record to the data log. The log is insurance, not a failure mode: a line
    that cannot be written is not in it (`files.append_line` is all or nothing), the first
    failure is warned about on stderr, every one is counted, and the run goes on (a resume then
    estimates that datum again)."""
    try:
        files.append_line(path, json.dumps(rec.as_dict(), allow_nan=False))
    except OSError as err:
        tally.checkpoint_failures += 1
        if tally.checkpoint_failures == 1:
            print(
                f"warning: cannot append to the data log '{path}' ({os_reason(err)}); the run goes on (--resume "
                "would estimate the data missing from it again); failures are counted in the summary's "
                "checkpoint_failures", file=sys.stderr, flush=True,
            )


def data_record(plan: PerDatumPlan, tally: Tally) -> DataRecord:
    """The summary record of the data `tally` counted; `RunFailed` when none gave a finite estimate."""
    target, s, t = plan.target, plan.sconf, plan.tconf
    if not tally.log_z:
        raise RunFailed(
            f"no datum of '{target.name}' gave a finite estimate; train longer, use more steps, or check "
            "the target's log_density(z, x)"
        )
    summary = summarize_data(tally.log_z, tally.stderr)
    known = tally.known
    return DataRecord(
        target=TargetInfo.of(target, plan.target_spec, None, plan.target_args, None, plan.target_data),
        sampler=s,
        training=t,
        amortise=bool(plan.amortise),
        data_index=(int(target.indices[0]), int(target.indices[-1]) + 1),
        num_data=target.num_data,
        summary=summary,
        known_mean_log_z=finite(float(np.mean(known))) if len(known) == summary.num_data else None,
        counts=dict(tally.counts),
        num_samples=plan.num_samples,
        smc=tally.smc.section(s, plan.population, plan.num_samples // plan.population) if s.smc else None,
        data_batch=amortised.batch_shape(target.num_data if plan.amortise else 1, t.batch_size, plan.data_batch)[0],
        skipped_steps=tally.skipped,
        recoveries=tally.recoveries,
        checkpoint_failures=tally.checkpoint_failures,
        train_seconds=tally.train_seconds,
        estimate_seconds=tally.estimate_seconds,
        seed=plan.seed,
        device=device_name(),
        x64=plan.x64,
    )


def execute(
    plan: PerDatumPlan, on_datum: Callable[[DatumRecord], None], progress: Optional[Progress] = None
) -> DataRecord:
    """Fits and estimates every datum of `plan.target`; returns the summary record (docs/json.md).

    With adaptive tempering nothing is trained (its moves are Metropolis moves): `iterations` is
    taken as 0. `on_datum` receives each datum's record as it is made (not the records of data a
    resumed run had finished). The default policy runs it by stages (`mcd_cli.policy.perdatum`).
    """
    progress = progress or NoProgress()
    plan = dataclasses.replace(plan, tconf=trained_config(plan))
    return data_record(plan, estimate_all(plan, on_datum, progress))


def estimate_all(plan: PerDatumPlan, on_datum: Callable[[DatumRecord], None], progress: Progress) -> Tally:
    """Fits (once, or per datum) and estimates every datum of `plan.target`: what the summary keeps."""
    layout = devices.particle_layout(plan.devices)
    sharding = layout.particles if layout.count > 1 else None
    root = jax.random.fold_in(jax.random.key(plan.seed), 0)
    if plan.stage is not None:
        root = jax.random.fold_in(root, STAGE_STREAM + plan.stage)
    key_init, key_estimate = jax.random.split(root)
    tally, params = Tally(), None
    if plan.amortise or plan.tconf.iterations == 0:
        params = tally.trained(*_fit(
            plan, key_init, plan.target.data, progress, "training (amortised)", Checkpoints.of(plan, 0)
        ))
    finished = _finished(plan)
    callback = progress.estimation("estimating", total=plan.target.num_data)
    for done, (index, x) in enumerate(zip(plan.target.indices, plan.target.data)):
        rec = finished.get(int(index))
        if rec is None:
            rec = _datum(plan, params, (key_init, key_estimate), int(index), x, sharding, progress, tally)
            on_datum(rec)
        tally.add(rec)
        callback(done + 1, plan.target.num_data)
    return tally
