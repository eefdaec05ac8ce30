"""MCD beside other evidence estimators at matched wall time (issue 5, part 3; optional extra).

Needs `pip install '.[bench]'` (BlackJAX and dynesty). On each target (true log Z known), runs:

- mcd-cli: one estimator (UHA-MCD by default) with the CPU budget of `paper_tables.py` (d_h = 32,
  400 iterations, K = 64), trained then evaluated with 16,384 samples. Its wall time, compilation
  included, sets the budget the others get;
- BlackJAX adaptive tempered SMC with an HMC kernel (prior π0, likelihood γ/π0; log Ẑ is the sum
  of the log-likelihood increments), at a ladder of particle counts;
- dynesty static nested sampling (prior transform onto π0, likelihood γ/π0), at a ladder of live
  point counts.

Each ladder stops after the first run whose seconds exceed the MCD run's, so every method gets
about the same wall time; every run of the ladder is kept, and `render.py` marks the run closest
to the MCD wall time.

Targets: the nested sampler needs a likelihood γ/π0 that is bounded; with the Gaussian π0 of the
paper, that ratio grows without bound in the tails of student_t3 and laplace, and dynesty then
compresses into the corners of the unit cube and does not finish. The default targets (gmm8,
gauss_narrow) have bounded ratios. All three see the same target and the same initial distribution π0; all
compile with JAX where they use it, and the compilation is counted in their seconds.

Usage:

    python benchmarks/compare_estimators.py --targets gmm8 gauss_narrow --dim 20
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from common import RESULTS, ResultFile, log  # noqa: E402
from paper_tables import BUDGETS, ESTIMATORS, run_cell, sampler_config  # noqa: E402
from mcd_cli.config import TrainConfig  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402


def split_target(target):
    """log π0 (normalised prior) and log γ − log π0 (likelihood), so that ∫ π0 · L = Z."""
    prior = target.initial_log_density
    return prior, lambda x: target.log_density(x) - prior(x)


def run_mcd(target, args, seed: int) -> dict:
    cpu = BUDGETS["cpu"]
    sconf = sampler_config(args.mcd_estimator, args.mcd_steps, cpu["hidden"])
    tconf = TrainConfig(iterations=cpu["iterations"], batch_size=cpu["batch_size"], lr=cpu["lr"])
    t0 = time.perf_counter()
    cell = run_cell(target, sconf, tconf, seed, args.num_samples)
    cell["seconds"] = time.perf_counter() - t0
    cell["settings"] = {"estimator": args.mcd_estimator, "steps": args.mcd_steps, **{
        k: cpu[k] for k in ("hidden", "iterations", "lr", "batch_size")}, "num_samples": args.num_samples}
    return cell


def run_smc(target, num_particles: int, seed: int, args) -> dict:
    """BlackJAX adaptive tempered SMC (HMC kernel, fixed step size, unit mass)."""
    import blackjax
    from blackjax.smc import extend_params, resampling

    logprior, loglik = split_target(target)
    hmc_params = extend_params({
        "step_size": args.smc_step_size,
        "inverse_mass_matrix": jnp.ones(target.dim),
        "num_integration_steps": args.smc_leapfrog,
    })
    smc = blackjax.adaptive_tempered_smc(
        logprior, loglik, blackjax.hmc.build_kernel(), blackjax.hmc.init, hmc_params,
        resampling.systematic, args.smc_target_ess, num_mcmc_steps=args.smc_mcmc_steps,
    )
    t0 = time.perf_counter()
    key_init, key_run = jax.random.split(jax.random.key(seed))
    mean = jnp.asarray(target.initial_mean, dtype=jnp.float32)
    scale = jnp.asarray(target.initial_scale, dtype=jnp.float32)
    x0 = mean + scale * jax.random.normal(key_init, (num_particles, target.dim))
    state = smc.init(x0)
    step = jax.jit(smc.step)
    log_z, n_steps = 0.0, 0
    while float(state.tempering_param) < 1.0 and n_steps < args.smc_max_steps:
        state, info = step(jax.random.fold_in(key_run, n_steps), state)
        log_z += float(info.log_likelihood_increment)
        n_steps += 1
    seconds = time.perf_counter() - t0
    done = float(state.tempering_param) >= 1.0
    return {"method": "smc", "num_particles": num_particles, "log_z": log_z if done else None,
            "abs_error": abs(log_z - target.log_z) if done else None, "tempering_steps": n_steps,
            "reached_temperature_1": done, "seconds": seconds,
            "target_evaluations_approx": num_particles * n_steps * args.smc_mcmc_steps * args.smc_leapfrog}


def run_dynesty(target, nlive: int, seed: int, args) -> dict:
    """dynesty static nested sampling over π0 (prior transform) with likelihood γ/π0."""
    import dynesty
    from scipy.special import ndtri

    _, loglik = split_target(target)
    loglik_jit = jax.jit(loglik)
    mean, scale = np.asarray(target.initial_mean), np.asarray(target.initial_scale)

    def loglike(x):
        v = float(loglik_jit(jnp.asarray(x, dtype=jnp.float32)))
        return v if math.isfinite(v) else -1e300

    def prior_transform(u):
        return mean + scale * ndtri(u)

    t0 = time.perf_counter()
    sampler = dynesty.NestedSampler(loglike, prior_transform, target.dim, nlive=nlive,
                                    rstate=np.random.default_rng(seed))
    sampler.run_nested(dlogz=args.dynesty_dlogz, maxcall=args.dynesty_maxcall, print_progress=False)
    res = sampler.results
    seconds = time.perf_counter() - t0
    ncall = int(np.sum(res.ncall))
    log_z = float(res.logz[-1])
    return {"method": "dynesty", "nlive": nlive, "log_z": log_z, "log_z_err": float(res.logzerr[-1]),
            "abs_error": abs(log_z - target.log_z), "iterations": int(res.niter),
            "likelihood_calls": ncall, "hit_maxcall": ncall >= args.dynesty_maxcall, "seconds": seconds}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", nargs="+", default=["gmm8", "gauss_narrow"])
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--methods", nargs="+", choices=("mcd", "smc", "dynesty"), default=["mcd", "smc", "dynesty"])
    p.add_argument("--mcd-estimator", choices=ESTIMATORS, default="uha-mcd")
    p.add_argument("--mcd-steps", type=int, default=64)
    p.add_argument("--num-samples", type=int, default=16_384)
    p.add_argument("--budget-seconds", type=float, help="wall time to match (default: the MCD run's)")
    p.add_argument("--smc-particles", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--smc-step-size", type=float, default=0.2)
    p.add_argument("--smc-leapfrog", type=int, default=10)
    p.add_argument("--smc-mcmc-steps", type=int, default=5)
    p.add_argument("--smc-target-ess", type=float, default=0.5)
    p.add_argument("--smc-max-steps", type=int, default=1000)
    p.add_argument("--dynesty-nlive", type=int, nargs="+", default=[50, 100, 200, 400, 800])
    p.add_argument("--dynesty-dlogz", type=float, default=0.1)
    p.add_argument("--dynesty-maxcall", type=int, default=500_000)
    p.add_argument("--output", type=Path, default=RESULTS / "compare_estimators.json")
    args = p.parse_args(argv)

    settings = {k: getattr(args, k) for k in (
        "dim", "mcd_estimator", "mcd_steps", "num_samples", "smc_step_size", "smc_leapfrog",
        "smc_mcmc_steps", "smc_target_ess", "dynesty_dlogz", "dynesty_maxcall")}
    settings["mcd_budget"] = {k: BUDGETS["cpu"][k] for k in ("hidden", "iterations", "lr", "batch_size")}
    results = ResultFile(args.output, "compare_estimators", settings)
    for name in args.targets:
        target = load_target(name, {"dim": str(args.dim)})
        for seed in args.seeds:
            base = f"{name}/d{args.dim}/seed{seed}"
            mcd_key = f"{base}/mcd"
            if "mcd" in args.methods and mcd_key not in results:
                cell = run_mcd(target, args, seed)
                results.add(mcd_key, {"method": "mcd", **cell})
                log(f"{mcd_key}: log Z {cell.get('log_z', float('nan')):+.3f} in {cell['seconds']:.0f} s")
            budget = args.budget_seconds
            if budget is None:
                if mcd_key not in results:
                    raise SystemExit("no MCD run to match: add mcd to --methods or give --budget-seconds")
                budget = results.data["cells"][mcd_key]["seconds"]
            ladders = {"smc": (args.smc_particles, run_smc), "dynesty": (args.dynesty_nlive, run_dynesty)}
            for method in ("smc", "dynesty"):
                if method not in args.methods:
                    continue
                sizes, fn = ladders[method]
                for size in sizes:
                    key = f"{base}/{method}/{size}"
                    if key in results:
                        cell = results.data["cells"][key]
                    else:
                        cell = {**fn(target, size, seed, args), "budget_seconds": budget}
                        results.add(key, cell)
                        log(f"{key}: log Z {cell['log_z'] if cell['log_z'] is not None else float('nan'):+.3f} "
                            f"in {cell['seconds']:.0f} s")
                    if cell["seconds"] > budget:
                        break
    log(f"wrote {args.output}")
