"""One run, start to finish: plan → start → fit → estimate → record.

`execute` reads as those steps; what differs between runs is in the values they are handed: the
`Fit` (training with its checkpoints, a --load file, or nothing to train) and the `Estimator`
(importance sampling or SMC). Each repeat `r` draws its keys from `fold_in(root, r)`, split into an
initialisation key and an estimation key.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Optional, Sequence

import jax

from mcd_cli.io import checkpoint
from mcd_cli.runtime import compile_clock, devices
from mcd_cli._version import __version__
from mcd_cli.config import TrainConfig
from mcd_cli.errors import FileFailed, RunFailed, defer, os_advice
from mcd_cli.record import RunRecord, TargetInfo
from mcd_cli.run.draws import concatenate
from mcd_cli.run.estimate import Estimation, Estimator, estimator
from mcd_cli.run.fit import Fit, Fitted, fitter, saved_on_interrupt, trained_config
from mcd_cli.run.plan import NoProgress, Progress, RunPlan, device_name, estimation_root, file_meta, sharded_plan
from mcd_cli.run.start import Start, start
from mcd_cli.stats import combine_estimates


def execute(plan: RunPlan, progress: Optional[Progress] = None, made: Optional[dict] = None) -> RunRecord:
    """Fits (or loads) and estimates `plan.repeats` times; returns the record. `made` keeps what the
    runs given the same one share, each exactly what making it again would give: the start (its
    keys are the root's, the same for every stage of a default-policy run) and the kernels a stage
    trained, which a later stage training as it did uses (`RunPlan.train_stage`).

    Raises:
        Interrupted: Ctrl-C during training or the estimate that follows it (the state was saved).
        RunFailed: the estimate could not be made (training diverged, no finite weight).
    """
    return _execute(plan, progress or NoProgress(), {} if made is None else made)


def _execute(plan: RunPlan, progress: Progress, made: dict) -> RunRecord:
    """`execute` of one plan, sharing what `made` holds."""
    compile_clock.install()
    began = compile_clock.now()
    layout = devices.particle_layout(plan.devices)
    plan = sharded_plan(plan)
    sizes = plan.load is None and trained_config(plan).iterations > 0  # initial step sizes to measure
    # A policy's stages share the start, one per initial distribution and schedule start.
    shared = (sizes, plan.sconf.init, plan.sconf.schedule_start)
    begin = made[shared] if shared in made else made.setdefault(shared, start(plan, measure_steps=sizes))
    fit, tconf = fitter(plan, begin.target, begin.step_sizes, layout.particles, begin.betas)
    if plan.stage is not None:  # the key leaves out the update count: a final run names the count its
        # pilot's time-bounded training reached (`TrainConfig.max_seconds`), so that its config reproduces it
        trains_as = plan.train_stage if plan.train_stage is not None else plan.stage
        budget = dataclasses.replace(tconf, iterations=0, max_seconds=None, min_updates=None)
        fit = _shared(fit, made, (trains_as, plan.sconf, budget))
    estimate = estimator(plan, layout.particles)
    repeats = [one_repeat(plan, begin.target, fit, estimate, r, progress) for r in range(plan.repeats)]
    record = run_record(plan, begin, tconf, repeats, layout.count)
    return dataclasses.replace(
        record, compile_seconds=compile_clock.compile_seconds(began), import_seconds=compile_clock.import_seconds(),
    )


def _shared(fit: Fit, made: dict, key: tuple) -> Fit:
    """`fit`, made once per stage that trains: a later stage with the same training reuses it."""

    def shared(key_init, repeat, progress):
        if (key, repeat) not in made:
            made[key, repeat] = fit(key_init, repeat, progress)
        return made[key, repeat]

    return shared


def one_repeat(plan: RunPlan, target: Any, fit: Fit, estimate: Estimator, repeat: int, progress: Progress):
    """Repeat `repeat`: fit (and --save), then estimate; `(Fitted, Estimation, seconds)`."""
    key_init, key_estimate = jax.random.split(jax.random.fold_in(estimation_root(plan), repeat))
    if plan.train_stage is not None:  # a policy's final run with the kernels its pilot trained
        key_init, _ = jax.random.split(jax.random.fold_in(estimation_root(plan, plan.train_stage), repeat))
    fitted = fit(key_init, repeat, progress)
    if fitted.state is not None and plan.save is not None and devices.is_primary():
        _save(plan, fitted, repeat)
    label = "estimating" if plan.repeats == 1 else f"estimating {repeat + 1}/{plan.repeats}"
    callback = progress.estimation(label, total=plan.num_samples)
    t0 = time.perf_counter()
    with saved_on_interrupt(plan, repeat, fitted.state, plan.tconf.iterations):
        result = estimate(fitted.params, target, key_estimate, callback)
    seconds = time.perf_counter() - t0
    if not math.isfinite(result.estimate.log_z):
        raise RunFailed(
            f"the log Z estimate is {result.estimate.log_z}: the weights are degenerate; train longer, use "
            "more steps, or check the target with `mcd check`"
        )
    result = result._replace(estimate=dataclasses.replace(result.estimate, seconds=seconds))
    return fitted, result, seconds


def _save(plan: RunPlan, fitted: Fitted, repeat: int) -> None:
    """--save: the trained parameters. A file that cannot be written does not throw the training
    away: the failure is deferred, so the estimate is still made, printed and recorded, and then
    the command exits 1 with one line naming the file (docs/reliability.md, "When --save fails")."""
    try:
        checkpoint.save_params(plan.save, fitted.params, file_meta(plan))
    except OSError as err:
        kept = plan.checkpoint_dir is not None and fitted.checkpoint_failures == 0 and plan.checkpoint_every > 0
        again = (
            f"'{plan.state_path(repeat)}' holds the same parameters (use it with --load)" if kept
            else "rerun with the same --seed to train the same parameters"
        )
        defer(FileFailed(
            plan.save, "write --save file", err,
            f"the estimate was still printed and recorded; {os_advice(err)}; {again}",
        ))


def run_record(
    plan: RunPlan, begin: Start, tconf: TrainConfig, repeats: Sequence[tuple[Fitted, Estimation, float]], count: int
) -> RunRecord:
    """The record of a run from its start and its repeats."""
    trained = [f for f, _, _ in repeats if f.state is not None]
    estimations = [e for _, e, _ in repeats]
    return RunRecord(
        target=TargetInfo.of(
            begin.target, plan.target_spec, plan.target_text, plan.target_args, plan.target_model, plan.target_data
        ),
        sampler=plan.sconf,
        training=tconf,
        combined=combine_estimates([e.estimate for e in estimations]),
        seed=plan.seed,
        num_samples=plan.num_samples,
        repeats=plan.repeats,
        x64=plan.x64,
        iterations_run=sum(f.iterations_run for f in trained),
        skipped_steps=sum(f.skipped for f in trained),
        recoveries=sum(f.recoveries for f in trained),
        checkpoint_failures=sum(f.checkpoint_failures for f in trained),
        train_seconds=sum(f.seconds for f in trained),
        estimate_seconds=sum(s for _, _, s in repeats),
        device=device_name(),
        devices=count,
        processes=devices.process_count(),
        version=__version__,
        loaded_from=str(plan.load) if plan.load is not None else None,
        elbo_history=tuple(f.history for f in trained),
        init_warnings=begin.warnings,
        init_method=begin.method,
        start_seconds=begin.seconds,
        start_compile_seconds=begin.compile_seconds,
        initial_step_sizes=None if begin.step_sizes is None else tuple(float(v) for v in begin.step_sizes),
        initial_step_scale=begin.step_scale,
        stop_reasons=tuple(f.stop_reason for f in trained),
        model_index=plan.model_index,
        weights=tuple(e.weights for e in estimations if e.weights is not None),
        smc=tuple(e.smc for e in estimations if e.smc is not None),
        particles=plan.particles,
        stage=plan.stage,
        train_stage=plan.train_stage,
        draws=concatenate([e.draws for e in estimations]),
    )
