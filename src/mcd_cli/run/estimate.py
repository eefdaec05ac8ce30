"""Estimating log Z from a fitted sampler: SMC populations merged, with their diagnostics."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from mcd_cli.path import annealing
from mcd_cli.config import SamplerConfig
from mcd_cli.errors import RunFailed
from mcd_cli.run.draws import DRAWS_STREAM, posterior_draws
from mcd_cli.run.plan import RunPlan, sharded_population, sharded_sizes
from mcd_cli.run.smc_kernels import compiled as compiled_smc
from mcd_cli.record import finite
from mcd_cli.stats import (
    Estimate, WeightSummary, merge_runs, mixing_verdict, pooled_pareto_k, population_verdict, smc_estimate,
    stationarity_verdict, summarize, summarize_weights, tail_verdict, with_rounding,
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
        "refine_tuning": s.refine_tuning if s.refine != "none" else None,
        "target_ess": s.target_ess if s.adaptive else None,
        "particles": population,
        "populations": populations,
    }


# fold_in(estimation key, TUNING_STREAM): the key of the population that tunes a frozen refinement
TUNING_STREAM = 0x7E1E


def tuned_refinement(s: SamplerConfig, run_tuning: Callable[[], Any]) -> Optional[Any]:
    """The frozen refinement with `refine_tuning="pilot"`: the per-step parameters and resampling
    steps (`SMCOutput.tuning`, a `smc.FixedTuning`) of one tuning population, adapted from its own
    particles, run by `run_tuning` with a key no estimating population shares; with adaptive
    tempering also its temperatures and resamplings (a `smc.Tempering`, replayed by
    `smc.run_replay`). None (each population adapts from its own particles) otherwise. The
    estimating populations then move with kernels and a schedule fixed before they draw a random
    number, so their Ẑ is exactly unbiased (docs/method.md, "Refinement", "Moves at planned
    steps")."""
    if s.refine == "none" or s.refine_tuning != "pilot":
        return None
    return run_tuning().tuning


def estimate_smc(
    plan: RunPlan, target: Any, params: Any, key: jax.Array, callback, sharding: Optional[Any] = None,
    keep: Optional[list] = None,
) -> tuple[Any, dict]:
    """The SMC estimate of one repeat and its diagnostics (the record's `smc` section).

    `num_samples` particles run as `num_samples / population` independent SMC runs (population `j`
    uses `fold_in(key, j)`), merged by averaging their Ẑ (`stats.merge_runs`). On a fixed schedule
    the importance-sampling estimate of the same kernels (the per-particle loop, the estimation
    key's own particles) is computed too, as `log_z_is`: what resampling and refinement bought.

    With `sharding` (the particle axis over several devices) each population is split over the
    devices and resampled globally (`smc.run`): the estimate is the single-device one. The
    population is rounded up to a multiple of the device count (`sharded_population`).

    With `keep` (a list), each population's final `(particles, log weights)` is appended to it, on
    the host, for posterior draws (`run.draws`); without, the particles never leave the device.
    """
    s = plan.sconf
    runs = plan.num_samples // plan.population
    population = sharded_population(plan)
    if sharding is not None and sharding.mesh.devices.size == 1:
        sharding = None  # one device: the unconstrained program, bit for bit the same
    compiled = compiled_smc(target, s, population, True, sharding)
    frozen = tuned_refinement(s, lambda: compiled(params, jax.random.fold_in(key, TUNING_STREAM)))

    def importance() -> np.ndarray:
        return annealing.sample_log_weights(
            key, params, target, s, plan.num_samples, plan.chunk_size, sharding=sharding
        )

    def run_population(j: int) -> Any:
        out = compiled(params, jax.random.fold_in(key, j), frozen)
        if keep is not None:
            keep.append(jax.device_get((out.particles, out.log_w)))
        return out

    return estimate_populations(
        s, population, runs * population, run_population, None if s.adaptive else importance, callback
    )


def stationarity_of(outputs: Sequence[Any]) -> Optional[tuple[float, float, float, float, int]]:
    """The populations' stationarity tests (`smc.stationarity`) pooled: the mean drift of log γ
    over the populations, its z score (their standard errors combined as independent), the mean
    weight of their stuck particles, the mean share of points about them where the gradient is not
    finite though the density is, and the extra moves each made (the most of them: they differ only
    where the moves were measured and the populations adapted their own); None when the runs made
    no refinement moves."""
    if outputs[0].drift is None:
        return None
    m = np.array([float(o.drift[0]) for o in outputs])
    z = np.array([float(o.drift[1]) for o in outputs])
    se = np.where(z != 0, np.abs(m / np.where(z != 0, z, 1.0)), 0.0)
    pooled_se = math.sqrt(float(np.sum(se * se))) / len(m)
    mean = float(np.mean(m))
    stuck = float(np.mean([float(o.drift[2]) for o in outputs]))
    nonfinite = float(np.mean([float(o.drift[3]) for o in outputs]))
    extra = max(int(o.drift[4]) for o in outputs)
    return mean, (mean / pooled_se if pooled_se > 0 else 0.0), stuck, nonfinite, extra


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
    estimates, outputs = run_populations(s, population, num_samples, run_population, callback)
    merged, mixing, drift = judge_populations(s, population, estimates, outputs)
    diagnostics = population_diagnostics(s, population, estimates, outputs, mixing, drift)
    if importance is not None:
        diagnostics.update(importance_diagnostics(importance))
    return merged, diagnostics


def run_populations(
    s: SamplerConfig, population: int, num_samples: int, run_population: Callable[[int], Any],
    callback: Callable[[int, int], None],
) -> tuple[list, list]:
    """The `num_samples / population` runs, one after the other, on the host without their
    particles and tuning: `(their estimates, their SMCOutputs)`; `callback` after each."""
    runs = num_samples // population
    estimates, outputs = [], []
    for j in range(runs):
        # the caller keeps what it needs of the particles; the tuning a run chose stays on the device
        out = jax.device_get(run_population(j)._replace(particles=None, tuning=None))
        estimates.append(
            smc_estimate(
                float(out.log_z), out.log_w, out.eve, int(out.resamplings),
                multinomial=s.resampling == "multinomial", tail=False,
            )
        )
        outputs.append(out)
        callback((j + 1) * population, num_samples)
    return estimates, outputs


def judge_populations(
    s: SamplerConfig, population: int, estimates: list, outputs: list
) -> tuple[Any, Optional[float], Optional[tuple[float, float, float]]]:
    """The runs merged and judged: `(estimate, median move correlation or None, pooled
    stationarity test or None)`. RunFailed where every weight vanished or adaptive tempering did
    not reach β = 1."""
    # The populations are replicates of one sampler: they share one tail.
    merged = tail_verdict(merge_runs(estimates), [e.pareto_k for e in estimates], population)
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
    merged = population_verdict(merged, len(outputs))
    drift = stationarity_of(outputs)
    if drift is not None:
        merged = stationarity_verdict(merged, *drift[:3], drift[4], nonfinite=drift[3])
    return merged, mixing, drift


def population_diagnostics(
    s: SamplerConfig, population: int, estimates: list, outputs: list, mixing: Optional[float],
    drift: Optional[tuple[float, float, float, float, int]],
) -> dict:
    """The record's `smc` section of the runs (its `log_z_is*` None: `importance_diagnostics`):
    the settings, each run's outcome, and the first run's trace."""
    first = outputs[0]
    k = int(first.steps)
    extra_moves = None if drift is None else drift[4]
    acceptance = np.concatenate([np.asarray(o.trace.acceptance[: int(o.steps)]) for o in outputs])
    acceptance = acceptance[np.isfinite(acceptance)]
    return {
        **smc_settings(s, population, len(outputs)),
        "steps": [int(o.steps) for o in outputs],
        "resamplings": [int(o.resamplings) for o in outputs],
        "final_ess": [float(e.ess / e.num_samples) for e in estimates],
        "mean_acceptance": float(acceptance.mean()) if acceptance.size else None,
        "log_z_populations": [float(e.log_z) for e in estimates],
        "genealogy_stderr": [float(e.delta_stderr) for e in estimates],
        "pareto_k_populations": [float(e.pareto_k) for e in estimates],
        "tail_shortfall_populations": [finite(e.tail_shortfall) for e in estimates],
        "pareto_k_pooled": pooled_pareto_k([o.log_w for o in outputs]),
        "beta": [float(v) for v in first.trace.beta[:k]],
        "ess": [float(v) for v in first.trace.ess[:k]],
        "acceptance": [float(v) for v in first.trace.acceptance[:k]],
        "step_size": [float(v) for v in first.trace.step_size[:k]],
        "move_correlation": [float(v) for v in first.trace.correlation[:k]] if s.adaptive else None,
        "moves": [int(v) for v in first.trace.moves[:k]] if s.adaptive else None,
        "median_move_correlation": mixing,
        "stationarity_drift": None if drift is None else drift[0],
        "stationarity_z": None if drift is None else drift[1],
        "stuck_particles": None if drift is None else drift[2],
        "nonfinite_gradients": None if drift is None else drift[3],
        "stationarity_moves": extra_moves,
        "resampled_steps": [i + 1 for i in range(k) if bool(first.trace.resampled[i])],
        "log_z_is": None,
        "log_z_is_stderr": None,
        "log_z_is_status": None,
    }


def importance_diagnostics(importance: Callable[[], np.ndarray]) -> dict:
    """`log_z_is`, its standard error and status: the importance-sampling estimate of the same
    kernels (`importance()`, its log weights); status "unreliable" where it failed."""
    try:
        plain = summarize(importance())
    except RunFailed:
        return {"log_z_is_status": "unreliable"}
    return {"log_z_is": plain.log_z, "log_z_is_stderr": plain.log_z_stderr, "log_z_is_status": plain.status.value}


class Estimation(NamedTuple):
    """One repeat's estimate: its statistics and verdict, the SMC diagnostics (the record's `smc`
    section; None by importance sampling), the weights' histogram (None for SMC, whose weights are
    spread over resampled generations) and, when the plan keeps them, the final populations'
    posterior draws (`run.draws`; None otherwise)."""

    estimate: Estimate
    smc: Optional[dict] = None
    weights: Optional[WeightSummary] = None
    draws: Optional[dict] = None


# `(params, target, key, callback) -> Estimation`: importance sampling and SMC are values of this type.
Estimator = Callable[[Any, Any, jax.Array, Callable[[int, int], None]], Estimation]


def importance_sampling(plan: RunPlan, sharding: Optional[Any] = None) -> Estimator:
    """Importance sampling of `plan.num_samples` independent trajectories, in chunks of the sharded
    chunk size (particle `i` keyed `fold_in(key, i)`)."""
    _, _, chunk_size = sharded_sizes(plan)

    def estimate(params: Any, target: Any, key: jax.Array, callback) -> Estimation:
        log_w = annealing.sample_log_weights(
            key, params, target, plan.sconf, plan.num_samples, chunk_size, callback=callback, sharding=sharding
        )
        return Estimation(summarize(log_w), None, summarize_weights(log_w))

    return estimate


def sequential_monte_carlo(plan: RunPlan, sharding: Optional[Any] = None) -> Estimator:
    """SMC populations merged (`estimate_smc`), with their diagnostics; with `plan.draws`, their
    posterior draws (`run.draws`, key `fold_in(key, DRAWS_STREAM)`)."""

    def estimate(params: Any, target: Any, key: jax.Array, callback) -> Estimation:
        kept = [] if plan.draws else None
        est, diagnostics = estimate_smc(plan, target, params, key, callback, sharding=sharding, keep=kept)
        draws = None if kept is None else posterior_draws(target, jax.random.fold_in(key, DRAWS_STREAM), kept)
        return Estimation(est, diagnostics, draws=draws)

    return estimate


def estimator(plan: RunPlan, sharding: Optional[Any] = None) -> Estimator:
    """The plan's estimator: SMC when its sampler resamples, refines or tempers adaptively, else
    importance sampling; its standard error includes the rounding of the run's precision
    (`stats.with_rounding`)."""
    chosen = (sequential_monte_carlo if plan.sconf.smc else importance_sampling)(plan, sharding)
    eps = float(np.finfo(np.float64 if plan.x64 else np.float32).eps)

    def estimate(params: Any, target: Any, key: jax.Array, callback) -> Estimation:
        result = chosen(params, target, key, callback)
        return result._replace(estimate=with_rounding(result.estimate, eps))

    return estimate
