"""Plain ULA-AIS (no training) with fitted initial distributions and pilot step sizes.

For each target, log Ẑ of ULA-AIS (K steps, linear β, `--samples` importance samples) with:

    declared+0.05        the target's declared initial distribution, every step 0.05 (the default)
    declared+pilot       the declared initial distribution, pilot step sizes
    laplace+pilot        diagonal Laplace fit as π0, pilot step sizes
    vi+pilot             mean-field VI fit as π0, pilot step sizes
    laplace-full+pilot   full-covariance Laplace, applied by whitening (x = μ + L u), pilot steps
    vi-precond+pilot     VI fit applied by diagonal whitening (x = μ + s ⊙ u), pilot steps

Each line of the output file is one JSON record (written as it goes). Run pinned and niced:

    taskset -c 1 nice -n 10 python benchmarks/init_measure.py --out benchmarks/results/init_measure.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from mcd_cli import stats
from mcd_cli.path import annealing
from mcd_cli.path import schedules
from mcd_cli.init import laplace, vi
from mcd_cli.path.step_sizes import curvature_step_sizes
from mcd_cli.targets.transforms import apply_initial
from common import RESULTS
from mcd_cli.config import SamplerConfig
from mcd_cli.targets import load_target

CONFIGS = ("declared+0.05", "declared+pilot", "laplace+pilot", "vi+pilot", "laplace-full+pilot", "vi-precond+pilot")


def ais(target, step_sizes, key, steps: int, num: int) -> stats.Estimate:
    """ULA-AIS log weights with the given per-step sizes (None: the default 0.05 everywhere)."""
    config = SamplerConfig(sampler="ula", backward="ais", steps=steps)
    params = annealing.init_params(jax.random.key(0), target, config)
    if step_sizes is not None:
        params = params._replace(path=params.path._replace(step_size=schedules.per_step_sizes(step_sizes, 0.25)))
    start = time.perf_counter()
    log_w = annealing.sample_log_weights(key, params, target, config, num_samples=num)
    return stats.summarize(log_w, time.perf_counter() - start)


def prepare(name: str, target, key, steps: int):
    """(target to sample, step sizes or None, fit record) for one configuration."""
    betas = np.asarray(schedules.betas(None, steps))
    k_fit, k_pilot = jax.random.split(key)
    fit = None
    start = time.perf_counter()
    if name == "declared+0.05":
        return target, None, {}
    if name == "declared+pilot":
        sampled = target
    elif name == "laplace+pilot":
        fit = laplace(target, key=k_fit)
        sampled = apply_initial(target, fit)
    elif name == "laplace-full+pilot":
        fit = laplace(target, cov="full", key=k_fit)
        sampled = apply_initial(target, fit)
    elif name == "vi+pilot":
        fit = vi(target, k_fit)
        sampled = apply_initial(target, fit)
    elif name == "vi-precond+pilot":
        fit = vi(target, k_fit)
        sampled = apply_initial(target, fit, precondition=True)
    else:
        raise ValueError(name)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    deltas = curvature_step_sizes(sampled, betas, key=k_pilot)
    record = {"fit_seconds": fit_seconds, "pilot_seconds": time.perf_counter() - start}
    record["step_sizes_first_mid_last"] = [float(deltas[0]), float(deltas[len(deltas) // 2]), float(deltas[-1])]
    if fit is not None:
        record.update(
            fit_method=fit.method,
            fit_converged=fit.converged,
            fit_log_z=fit.log_z,
            fit_check_log_z=fit.check.log_z,
            fit_check_k=fit.check.pareto_k,
            fit_check_ess=fit.check.ess,
            fit_warnings=list(fit.warnings),
        )
    return sampled, deltas, record


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=["diabetes_linreg", "brownian_motion"])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "init_measure.jsonl")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for target_name in args.targets:
        target = load_target(target_name)
        for name in args.configs:
            key = jax.random.fold_in(jax.random.key(args.seed), CONFIGS.index(name))
            k_prep, k_ais = jax.random.split(key)
            sampled, deltas, record = prepare(name, target, k_prep, args.steps)
            try:
                est = ais(sampled, deltas, k_ais, args.steps, args.samples)
                record.update(
                    log_z=est.log_z,
                    error=est.log_z - target.log_z,
                    delta_stderr=est.delta_stderr,
                    ess=est.ess,
                    pareto_k=est.pareto_k,
                    nonfinite=est.num_nonfinite,
                    status=est.status.value,
                    ais_seconds=est.seconds,
                )
            except stats.AllWeightsNonFinite as err:
                record.update(log_z=None, error=None, diverged=str(err))
            record.update(
                target=target_name, config=name, true_log_z=target.log_z, steps=args.steps,
                samples=args.samples, seed=args.seed,
            )
            with args.out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            shown = "diverged (no finite weight)" if record["log_z"] is None else (
                f"log Ẑ {record['log_z']:.3f}  error {record['error']:+.3f}  k̂ {record['pareto_k']:.2f}  "
                f"ESS {record['ess']:.0f}  non-finite {record['nonfinite']}"
            )
            print(f"{target_name:16s} {name:20s} {shown}", flush=True)
