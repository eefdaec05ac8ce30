"""Probes of the paper-table cells that miss at the CPU budget: training settings and a score-network variant.

One cell of `paper_tables.py` (K = 64, d = 20, width 32, 1,000 updates of batch 128, the pilot's step
sizes, 16,384 importance samples; exactly `paper_tables.run_cell`) under variants:

- `base`: the cell as `paper_tables.py --budget cpu --step-size pilot --iterations 1000` runs it;
- `lr5e-3`, `lr1e-2`: Adam's learning rate (the budget's is 2e-3);
- `schedule`: the annealing schedule β learned too;
- `hidden64`: score width 64;
- `linear`: the score network plus a per-step diagonal linear term (`SamplerConfig.score_linear`,
  off by default; docs/method.md, "A linear term in the score");
- `linear-lr5e-3`: both;
- `variance`: the backward kernel's variance learned, one factor per step
  (`SamplerConfig.learn_backward_variance`, off by default; docs/method.md, "A learned backward
  variance");
- `linear-variance`: the linear term and the learned variance;
- `linear-it3000`: the linear term and 3,000 updates.

    python benchmarks/score_variants.py --cells gauss_narrow/uha-mcd gmm8/uha-mcd --variants base linear \
        --seeds 0 1 2 --output benchmarks/results/score_variants_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path


from common import RESULTS, ResultFile, log  # noqa: E402
from mcd_cli.config import TrainConfig  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from paper_tables import run_cell, sampler_config  # noqa: E402

VARIANTS = ("base", "lr5e-3", "lr1e-2", "schedule", "hidden64", "linear", "linear-lr5e-3", "variance", "linear-variance", "linear-it3000")


def configure(variant: str, estimator: str):
    linear, _, rest = variant.partition("-") if variant.startswith("linear") else ("", "", variant)
    sconf = dataclasses.replace(sampler_config(estimator, 64, 32, "pilot"), score_linear=bool(linear))
    tconf = TrainConfig(iterations=1000, batch_size=128, lr=2e-3)
    if rest.startswith("it"):
        tconf = dataclasses.replace(tconf, iterations=int(rest[2:]))
    if rest.startswith("lr"):
        tconf = dataclasses.replace(tconf, lr=float(rest[2:]))
    if rest == "schedule":
        sconf = dataclasses.replace(sconf, learn_schedule=True)
    if rest == "hidden64":
        sconf = dataclasses.replace(sconf, hidden=64)
    if rest == "variance":
        sconf = dataclasses.replace(sconf, learn_backward_variance=True)
    return sconf, tconf


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", default=["gauss_narrow/uha-mcd", "gmm8/uha-mcd"], help="TARGET/ESTIMATOR")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["base", "linear"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", type=Path, default=RESULTS / "score_variants_cpu.json")
    args = parser.parse_args(argv)
    out = ResultFile(args.output, "score_variants", {"dim": 20, "steps": 64, "hidden": 32, "iterations": 1000,
                                                     "batch_size": 128, "num_samples": 16384, "step_size": "pilot"})
    for cell in args.cells:
        name, estimator = cell.split("/")
        target = load_target(name, {"dim": "20"})
        for variant in args.variants:
            for seed in args.seeds:
                key = f"{name}/{estimator}/{variant}/seed{seed}"
                if key in out:
                    continue
                sconf, tconf = configure(variant, estimator)
                t0 = time.perf_counter()
                result = {**run_cell(target, sconf, tconf, seed, 16_384), "seconds": time.perf_counter() - t0}
                out.add(key, result)
                log(f"{key}: log Z {result.get('log_z')} ELBO {result.get('elbo')} k {result.get('pareto_k')}")
