"""One run, start to finish: start, fit (or load), estimate, record."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

import jax

from mcd_cli import annealing, checkpoint, devices
from mcd_cli._version import __version__
from mcd_cli.errors import Interrupted, RunFailed
from mcd_cli.record import RunRecord, TargetInfo
from mcd_cli.run.estimate import estimate_smc
from mcd_cli.run.fit import save_interrupted, train
from mcd_cli.run.plan import NoProgress, Progress, RunPlan, device_name, file_meta, root_key, sharded_plan, sharded_sizes
from mcd_cli.run.start import start
from mcd_cli.stats import combine_estimates, summarize, summarize_weights
from mcd_cli.training import make_train_chunk


@dataclasses.dataclass
class _Totals:
    estimates: list = dataclasses.field(default_factory=list)
    train_seconds: float = 0.0
    estimate_seconds: float = 0.0
    smc: list = dataclasses.field(default_factory=list)
    skipped: int = 0
    recoveries: int = 0
    iterations_run: int = 0


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
            result, ran = train(plan, target, key_init, repeat, progress, update, begin.step_sizes)
            params = result.state.params
            histories.append(result.elbo_history)
            stop_reasons.append(result.stop_reason)
            totals.train_seconds += result.seconds
            totals.skipped += result.skipped
            totals.recoveries += result.recoveries
            totals.iterations_run += ran
            if plan.save is not None and devices.is_primary():
                checkpoint.save_params(plan.save, params, file_meta(plan))
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
            saved, reason = save_interrupted(plan, result.state, repeat)
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
        version=__version__,
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


