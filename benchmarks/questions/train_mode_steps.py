"""How each training mode moves the learned step sizes: ULA-MCD's per-step δ_k after training with
SMC in the loop (`--train-with smc`) and as an importance sampler (`is`), as ratios to the start's.

The learned arms of `learned_pays` (K = 64, batch 128, the start of `mcd estimate`: `--init auto`
and the step-size pilot), trained in blocks of 500 updates from one seed; after each block the
ratio δ_k / δ_k(start) is recorded: its median, minimum and maximum over the 64 steps, and its
median over each quarter of the path (q1: steps 1-16, ..., q4: steps 49-64). A mode whose loss
rewards moving the particles less shrinks them. Run on one quiet core:

    taskset -c 0 python benchmarks/run.py learned_pays --module train_mode_steps \\
        --output benchmarks/results/raw/train_mode_steps_brownian_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import numpy as np

from common import RESULTS, ResultFile, log
from learned_pays import learned_sconf
from mcd_cli import run
from mcd_cli.path import annealing
from mcd_cli.train import loop as training
from mcd_cli.config import TrainConfig
from mcd_cli.targets import load_target


def step_sizes(state, target, sconf) -> np.ndarray:
    return np.asarray(annealing.annealed_path(state.params.path, target, sconf).step_sizes)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="brownian_motion")
    p.add_argument("--updates", type=int, default=3000)
    p.add_argument("--block", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", nargs="+", default=["smc", "is"], choices=["smc", "is"])
    p.add_argument("--output", type=Path, default=RESULTS / "train_mode_steps_cpu.json")
    args = p.parse_args(argv)
    out = ResultFile(args.output, "train_mode_steps", {"target": args.target, "steps": 64, "batch_size": 128,
                                                        "seed": args.seed, "block": args.block})
    target = load_target(args.target, {})
    for mode in args.modes:
        sconf = learned_sconf(target)
        tconf = TrainConfig(iterations=args.updates, batch_size=128, train_with=mode)
        begin = run.start(run.RunPlan(target=target, sconf=sconf, tconf=tconf, seed=args.seed))
        fitted = begin.target
        state = training.init_train_state(jax.random.key(args.seed), fitted, sconf, tconf, step_sizes=begin.step_sizes,
                                          betas=begin.betas)
        start = step_sizes(state, fitted, sconf)
        chunk = training.make_train_chunk(fitted, sconf, tconf)
        t0 = time.perf_counter()
        for stop in range(args.block, args.updates + 1, args.block):
            state = training.fit(state, fitted, sconf, dataclasses.replace(tconf, iterations=stop), update=chunk).state
            ratio = step_sizes(state, fitted, sconf) / start
            cell = {"mode": mode, "updates": int(state.iteration), "median": float(np.median(ratio)),
                    "min": float(np.min(ratio)), "max": float(np.max(ratio)),
                    **{f"q{i + 1}": float(np.median(ratio[16 * i:16 * (i + 1)])) for i in range(4)},
                    "seconds": time.perf_counter() - t0}
            out.add(f"{args.target}/{mode}/{cell['updates']}", cell)
            log(f"{args.target}/{mode}/{cell['updates']}: median {cell['median']:.3f}, last quarter {cell['q4']:.3f}")


if __name__ == "__main__":
    main()
