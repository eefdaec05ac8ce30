"""Does adapting the refinement moves from the particles bias SMC with trained kernels?

With a fixed schedule and fixed kernels Ẑ is unbiased (E[Ẑ] = Z); the HMC refinement's diagonal
mass (the particles' weighted variance) and step size (from the moves' acceptance) are chosen from
the particles, which adds a bias the theory calls O(1/N). This measures it: train ULA-MCD (K = 64,
the command line's start) for `--iterations` updates, then run `--runs` independent SMC populations
of `--particles` on its own schedule (`--resample 0.5 --refine hmc`, multinomial resampling) in
four modes: refinement parameters fixed at their starting values (`none`: step d^-1/4, unit mass;
unbiased but for the moves following each population's own resamplings, `refine_timing`), only the mass adapted (`mass`), only the step size (`step`), both (`both`,
what `mcd estimate` does). Reports, per mode, log of the mean of Ẑ/Z over the runs (0 for an
unbiased estimator, up to its Monte Carlo error), and the mean and median of log Ẑ − log Z.

    python benchmarks/refine_adaptation.py --target gauss_narrow --dim 20 --iterations 300 \\
        --particles 256 --runs 200 --output benchmarks/results/refine_adaptation_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

from common import RESULTS, ResultFile, log  # noqa: E402
from mcd_cli import run, smc, stats  # noqa: E402
from mcd_cli.path import annealing  # noqa: E402
from mcd_cli.train import loop as training  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig, hidden_for  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402

MODES = ("none", "mass", "step", "both")


def refine_with(mode: str):
    """`smc.refine_population` adapting only what `mode` names (the library's adapts both)."""

    def refine(pop, key, beta, kernel, path, evaluate, config, adapt, sharding=None):
        params = pop.refine
        if mode in ("mass", "both"):
            x = pop.states.position
            w = smc.normalised(pop.log_w)[:, None]
            mean = jnp.sum(w * x, axis=0)
            params = params._replace(inv_mass=jnp.maximum(jnp.sum(w * (x - mean) ** 2, axis=0), smc.MIN_VARIANCE))

        def one_move(states, move_key):
            keys = jax.random.split(move_key, pop.log_w.shape[0])
            states, accept = jax.vmap(
                lambda k, s: kernel.step(k, s, beta, path, evaluate, params, config.leapfrog)
            )(keys, states)
            return states, jnp.mean(accept)

        states, accepts = jax.lax.scan(one_move, pop.states, jax.random.split(key, config.refine_steps))
        acceptance = jnp.mean(accepts)
        used = params  # the step size and preconditioner these moves used
        if mode in ("step", "both"):
            factor = jnp.exp(jnp.clip(smc.ADAPT_RATE * (acceptance - kernel.target_acceptance), -1.0, 1.0))
            params = params._replace(step_size=params.step_size * factor)
        return pop._replace(states=states, refine=params), acceptance, used

    return refine


def trained_mcd(target, iterations: int, seed: int):
    """ULA-MCD (K = 64) trained for `iterations` updates from the command line's start: `(the
    started target, the sampler's config, its parameters)`. Also `refine_timing`'s kernels."""
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=64, hidden=hidden_for(target.dim))
    tconf = TrainConfig(iterations=iterations, batch_size=128)
    begin = run.start(run.RunPlan(target=target, sconf=sconf, tconf=tconf, seed=seed))
    fitted = begin.target
    state = training.init_train_state(jax.random.key(seed), fitted, sconf, tconf, step_sizes=begin.step_sizes)
    update = training.make_train_chunk(fitted, sconf, tconf)
    return fitted, sconf, training.fit(state, fitted, sconf, tconf, update=update).state.params


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="gauss_narrow")
    parser.add_argument("--dim", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--particles", type=int, default=256)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS / "refine_adaptation_cpu.json")
    args = parser.parse_args(argv)
    out = ResultFile(args.output, "refine_adaptation", {})
    target = load_target(args.target, {"dim": args.dim})
    fitted, sconf, params = trained_mcd(target, args.iterations, args.seed)
    is_error = stats.summarize(
        annealing.sample_log_weights(jax.random.key(5), params, fitted, sconf, 16384, 1024)
    ).log_z - target.log_z
    log(f"{args.target} d={args.dim} after {args.iterations} updates: importance sampling {is_error:+.3f}")
    smc_conf = dataclasses.replace(sconf, resample=0.5, refine="hmc", resampling="multinomial")
    library = smc.adaptation.refine_population
    try:
        for mode in MODES:
            smc.adaptation.refine_population = refine_with(mode)
            batch = jax.jit(jax.vmap(lambda k, p: run.run_smc(k, p, fitted, smc_conf, args.particles, True), in_axes=(0, None)))
            res = batch(jax.random.split(jax.random.key(7), args.runs), params)
            err = (np.asarray(res.log_z, np.float64) + np.asarray(logsumexp(res.log_w, axis=-1), np.float64)
                   - math.log(args.particles) - target.log_z)
            top = float(err.max())
            cell = {
                "log_mean_z_ratio": top + math.log(float(np.mean(np.exp(err - top)))),
                "mean_log_error": float(err.mean()), "median_log_error": float(np.median(err)),
                "max_log_error": top, "runs": args.runs, "particles": args.particles,
                "mean_acceptance": float(np.nanmean(np.asarray(res.trace.acceptance))),
                "importance_sampling_error": float(is_error), "iterations": args.iterations,
            }
            out.add(f"{args.target}/d{args.dim}/it{args.iterations}/n{args.particles}/{mode}", cell)
            log(f"  {mode}: log mean Ẑ/Z {cell['log_mean_z_ratio']:+.3f}, mean log error "
                f"{cell['mean_log_error']:+.3f}, median {cell['median_log_error']:+.3f}, max {top:+.3f}")
    finally:
        smc.adaptation.refine_population = library
