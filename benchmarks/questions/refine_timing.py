"""Does choosing *when* to refine from a population's own weights bias SMC with trained kernels?

On a fixed schedule the refinement's moves followed each resampling, and a population resampled
where its own ESS fell below the threshold: its kernels (move or not at step k) were chosen by its
own weights. That biases Ẑ even with every parameter fixed. This measures it: train ULA-MCD (K =
64, the command line's start) for `--iterations` updates, then run `--runs` independent SMC
populations of `--particles` on its own schedule (`resample 0.5`, HMC refinement of 5 moves,
multinomial resampling), the refinement's step size and preconditioner fixed at their starting
values in every mode, so that only the moves' timing differs:

- `own`: moves after each of the population's own resamplings (what `mcd estimate` did before
  `smc.FixedTuning`);
- `planned`: moves after the steps a pilot population (its own key) resampled at, where the
  population is resampled too, and resampled without moves where its own ESS falls low (what
  `--refine-tuning pilot` does now);
- `every`: moves after every step (`--refine-every step`);
- `none`: no moves.

Reports, per mode, the mean of Ẑ_j/Z over the populations with its standard error (1 for an
unbiased estimator), the median of log Ẑ_j − log Z and the share of populations above the truth.

    python benchmarks/run.py estimators --module refine_timing
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from common import RESULTS, ResultFile, log
from mcd_cli import run, smc
from mcd_cli.kernels import hmc
from refine_adaptation import trained_mcd
from mcd_cli.targets import load_target

MODES = ("own", "planned", "every", "none")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="brownian_motion")
    parser.add_argument("--iterations", type=int, default=1200)
    parser.add_argument("--particles", type=int, default=512)
    parser.add_argument("--runs", type=int, default=320)
    parser.add_argument("--refine-steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS / "refine_timing_cpu.json")
    args = parser.parse_args(argv)
    out = ResultFile(args.output, "refine_timing", {})
    target = load_target(args.target)
    fitted, sconf, params = trained_mcd(target, args.iterations, args.seed)
    base = dataclasses.replace(
        sconf, resample=0.5, refine="hmc", refine_steps=args.refine_steps, resampling="multinomial"
    )
    # the planned steps: those an independent pilot population (fixed parameters) resampled at
    pilot = jax.jit(lambda k: run.run_smc(k, params, fitted, base, args.particles, False))(jax.random.key(99))
    first = smc.initial_refine_params(hmc.KERNEL, fitted.dim, jnp.float32)  # what `adapt=False` moves with
    constant = jax.tree.map(lambda a: jnp.repeat(a[None], sconf.steps, axis=0), first)
    planned = smc.FixedTuning(constant, pilot.tuning.resampled)
    log(f"{args.target} after {args.iterations} updates; the pilot resampled after "
        f"{int(np.sum(pilot.tuning.resampled))} of {sconf.steps} steps")
    keys = jax.random.split(jax.random.key(7), args.runs)
    for mode in MODES:
        conf, frozen = base, None
        if mode == "planned":
            frozen = planned
        elif mode == "every":
            conf = dataclasses.replace(base, refine_every="step")
        elif mode == "none":
            conf = dataclasses.replace(base, refine="none")
        batch = jax.jit(jax.vmap(lambda k: run.run_smc(k, params, fitted, conf, args.particles, False, frozen=frozen)))
        res = jax.device_get(batch(keys))
        err = (np.asarray(res.log_z, np.float64) + np.asarray(logsumexp(res.log_w, axis=-1), np.float64)
               - math.log(args.particles) - target.log_z)
        ratio = np.exp(err)
        cell = {
            "mean_z_ratio": float(ratio.mean()), "mean_z_ratio_se": float(ratio.std(ddof=1) / math.sqrt(ratio.size)),
            "median_log_error": float(np.median(err)), "share_above": float(np.mean(err > 0)),
            "mean_resamplings": float(np.mean(res.resamplings)), "runs": args.runs, "particles": args.particles,
            "iterations": args.iterations, "refine_steps": args.refine_steps,
        }
        out.add(f"{args.target}/it{args.iterations}/n{args.particles}/{mode}", cell)
        log(f"  {mode}: E[Ẑ/Z] {cell['mean_z_ratio']:.3f} ± {cell['mean_z_ratio_se']:.3f}, median log error "
            f"{cell['median_log_error']:+.3f}, {100 * cell['share_above']:.0f} % above, "
            f"{cell['mean_resamplings']:.1f} resamplings")


if __name__ == "__main__":
    main()
