"""Would a smaller multiple of the pilot's step sizes be better? The untrained ULA-AIS ELBO by scale.

For each target, the command line's start (`run.start`: `--init auto`, then the curvature pilot's
δ_1 … δ_K) and plain ULA-AIS (no training, K = 64, linear β) with the step sizes c·δ_k for
c = 1, 1/2, 1/4, 1/8 (capped at 0.25), `--samples` importance samples each: the ELBO (mean log
weight) and log Ẑ. The curvature pilot cannot see a target's kinks (a Laplace density has no
curvature away from them); the ELBO of a short AIS run sees what they cost, so a scale chosen by it
is a candidate rule for a start that handles non-smooth targets.

    taskset -c 1 nice -n 10 python benchmarks/pilot_scale.py --targets laplace gauss_narrow gmm8 \\
        --output benchmarks/results/pilot_scale_cpu.json

The rule this led to, `run.ais_step_scale` (halve while the ELBO gains more than a nat), is part of
`run.start`; the scales above are applied to the curvature pilot's own sizes (before it). With
`--check-seeds S` the script also records, for seeds 0 … S−1, the factor `run.start` chose
(cells `TARGET/check/seedS`): the evidence that it changes laplace's start and no other's.
"""

from __future__ import annotations

import argparse
from pathlib import Path


import jax  # noqa: E402
import numpy as np  # noqa: E402

from common import RESULTS, ResultFile, log  # noqa: E402
from init_measure import ais  # noqa: E402
from mcd_cli import run, stats  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402

SCALES = (1.0, 0.5, 0.25, 0.125)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", nargs="+", required=True)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, default=RESULTS / "pilot_scale_cpu.json")
    p.add_argument("--check-seeds", type=int, default=0, help="record the factor run.start chose for seeds 0 … S−1")
    args = p.parse_args(argv)
    out = ResultFile(args.output, "pilot_scale", {"steps": args.steps, "samples": args.samples, "scales": list(SCALES)})
    for name in args.targets:
        target = load_target(name)
        sconf = SamplerConfig(sampler="ula", backward="ais", steps=args.steps, step_size="pilot")
        for seed in range(args.check_seeds):
            key = f"{Path(name).stem}/check/seed{seed}"
            if key not in out:
                begin = run.start(run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(), seed=seed))
                out.add(key, {"scale": begin.step_scale, "start_seconds": begin.seconds})
                log(f"{name} seed {seed}: run.start scaled the pilot's sizes by {begin.step_scale}")
        if all(f"{Path(name).stem}/c{c}/seed{args.seed}" in out for c in SCALES):
            continue
        begin = run.start(run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(), seed=args.seed))
        pilot_sizes = np.asarray(begin.step_sizes) / begin.step_scale  # the curvature pilot's own
        for c in SCALES:
            key = f"{Path(name).stem}/c{c}/seed{args.seed}"
            if key in out:
                continue
            sizes = np.minimum(pilot_sizes * c, 0.249)
            try:
                e = ais(begin.target, sizes, jax.random.key(args.seed + 1), args.steps, args.samples)
                cell = {"elbo": e.elbo, "log_z": e.log_z, "error": e.log_z - (target.log_z or 0.0), "pareto_k": e.pareto_k,
                        "status": e.status.value}
            except stats.AllWeightsNonFinite as err:
                cell = {"failed": str(err)}
            cell.update(init=begin.method, last_step_size=float(sizes[-1]), scale=c)
            out.add(key, cell)
            log(f"{name} c={c}: {cell}")
