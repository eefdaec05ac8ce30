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
on that datum's target (`amortised.smc_population`): `num_samples` particles in populations of
`particles` (default: `run.population_size`), from the datum's `initial(x)`, with the trained (or initial) kernels on
a fixed schedule, or adaptive tempering with no training at all. Only one population is held at a
time, so memory is bounded by the population, whatever the number of data.

Keys: `fold_in(key(seed), 0)` is split into an initialisation and an estimation key; datum `i`
(its index in the full data set) estimates with `fold_in(estimation key, i)` and, when trained
separately, initialises with `fold_in(initialisation key, i)`. A datum's estimate therefore does
not depend on which other data were selected (`--data-index`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli import amortised, run
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import Interrupted, RunFailed, UsageError
from mcd_cli.record import SCHEMA_VERSION, TargetInfo, datum_record, finite
from mcd_cli.run import NoProgress, Progress, device_name, version
from mcd_cli.stats import Estimate, summarize, summarize_data
from mcd_cli.targets.conditional import ConditionalTarget, datum_target
from mcd_cli.training import TrainingInterrupted, fit, init_train_state


@dataclasses.dataclass(frozen=True)
class PerDatumPlan:
    """Everything a per-datum run does."""

    target: ConditionalTarget
    sconf: SamplerConfig
    tconf: TrainConfig
    amortise: bool
    num_samples: int = 1024
    seed: int = 0
    chunk_size: int = 1024
    data_batch: int = amortised.DEFAULT_DATA_BATCH
    x64: bool = False
    target_spec: Optional[str] = None
    target_args: Optional[dict] = None
    target_data: Optional[str] = None
    particles: Optional[int] = None  # SMC particles per population (None: all num_samples in one)

    @property
    def population(self) -> int:
        """SMC particles per population: `particles`, or the default of `run.population_size`."""
        return run.population_size(self.num_samples, self.particles, self.target.dim)


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
        run.validate_populations(plan.num_samples, plan.particles, plan.population, per=" per datum")
    elif plan.particles is not None:
        raise UsageError("--particles sets the SMC population size; add --resample, --refine or --schedule adaptive, or drop it")
    if plan.amortise and s.context_dim != plan.target.context_dim:
        raise UsageError(
            f"context_dim {s.context_dim} does not match the target's features ({plan.target.context_dim}); "
            "drop context_dim from the settings"
        )


def _fit(plan: PerDatumPlan, key: jax.Array, data: np.ndarray, progress: Progress, label: str):
    one = datum_target(plan.target, data[0])
    state = init_train_state(key, one, plan.sconf, plan.tconf)
    if plan.tconf.iterations == 0:
        return state.params, 0.0, 0, 0
    update = amortised.make_train_chunk(plan.target, plan.sconf, plan.tconf, data, plan.data_batch)
    callback = progress.training(label, total=plan.tconf.iterations)
    try:
        result = fit(state, one, plan.sconf, plan.tconf, callback=callback, update=update)
    except TrainingInterrupted as interrupted:
        raise Interrupted(None, interrupted.state.iteration, plan.tconf.iterations, "per-datum runs are not checkpointed") from None
    return result.state.params, result.seconds, result.skipped, result.recoveries


def _estimate_datum(plan: PerDatumPlan, params, key: jax.Array, x: np.ndarray) -> tuple[Estimate, Optional[dict]]:
    """One datum's estimate: importance sampling, or SMC with its diagnostics (None for IS)."""
    s = plan.sconf
    t0 = time.perf_counter()
    if not s.smc:
        log_w = amortised.sample_datum_log_weights(key, params, plan.target, s, x, plan.num_samples, plan.chunk_size)
        return summarize(log_w, seconds=time.perf_counter() - t0), None
    population = amortised.smc_population(plan.target, s, plan.population)
    xj = jnp.asarray(x)

    def importance() -> np.ndarray:
        return amortised.sample_datum_log_weights(key, params, plan.target, s, x, plan.num_samples, plan.chunk_size)

    est, diagnostics = run.estimate_populations(
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
            **run.smc_settings(s, population, populations),
            "mean_steps": mean(self.steps, self.count),
            "mean_resamplings": mean(self.resamplings, self.count),
            "mean_final_ess": mean(self.final_ess, self.count),
            "mean_acceptance": mean(self.accept, self.accept_count),
            "mean_log_z_is": mean(self.log_z_is, self.is_count) if self.is_count == self.count else None,
        }


def execute(
    plan: PerDatumPlan, on_datum: Callable[[dict], None], progress: Optional[Progress] = None
) -> dict:
    """Fits and estimates every datum of `plan.target`; returns the summary record (docs/json.md).

    With adaptive tempering nothing is trained (its moves are Metropolis moves): `iterations` is
    taken as 0.
    """
    progress = progress or NoProgress()
    target, s, t = plan.target, plan.sconf, plan.tconf
    if s.adaptive and t.iterations:
        t = dataclasses.replace(t, iterations=0)
        plan = dataclasses.replace(plan, tconf=t)
    key_init, key_estimate = jax.random.split(jax.random.fold_in(jax.random.key(plan.seed), 0))
    train_seconds, estimate_seconds, skipped, recoveries = 0.0, 0.0, 0, 0
    params = None
    if plan.amortise or t.iterations == 0:
        params, train_seconds, skipped, recoveries = _fit(plan, key_init, target.data, progress, "training (amortised)")
    log_z, stderr, counts, known = [], [], {"ok": 0, "warn": 0, "unreliable": 0, "failed": 0}, []
    smc_totals = _SMCTotals()
    known_fn = None if target.log_z is None else jax.jit(target.log_z)
    callback = progress.estimation("estimating", total=target.num_data)
    for done, (index, x) in enumerate(zip(target.indices, target.data)):
        index = int(index)
        if params is None:
            datum_params, seconds, sk, rec = _fit(
                plan, jax.random.fold_in(key_init, index), x[None], progress, f"training datum {index}"
            )
            train_seconds, skipped, recoveries = train_seconds + seconds, skipped + sk, recoveries + rec
        else:
            datum_params = params
        known_i = None if known_fn is None else float(known_fn(x))
        t0 = time.perf_counter()
        try:
            est, diagnostics = _estimate_datum(plan, datum_params, jax.random.fold_in(key_estimate, index), x)
            rec = datum_record(index, est, known_i, smc=diagnostics)
            if diagnostics is not None:
                smc_totals.add(diagnostics)
        except RunFailed as err:  # includes AllWeightsNonFinite
            est, rec = None, datum_record(index, None, known_i, str(err))
        estimate_seconds += time.perf_counter() - t0
        counts[rec["status"]] += 1
        if est is not None and math.isfinite(est.log_z):
            log_z.append(est.log_z)
            stderr.append(est.log_z_stderr if est.log_z_stderr is not None else est.delta_stderr)
            if known_i is not None:
                known.append(known_i)
        on_datum(rec)
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
        "version": version(),
    }
