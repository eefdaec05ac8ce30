"""Milliseconds per training update: the scan `unroll`, the loss, and the on-device chunked loop.

For each estimator (ULA, UHA, ULA-MCD, UHA-MCD) at one dimension, K = 64, batch 128, it times
in one process and interleaved (so that machine load hits every variant alike):

- the single jitted update (`training.make_update`, one call per update) with `unroll` 1 and 4;
- the ELBO against the log-variance loss on fixed trajectories (ULA kernels only);
- the chunked loop (`training.make_train_chunk`, 50 updates per call) against one update per call;
- with `--per-step-backward`, MCD's chunked loop with the backward network scored inside the scan
  (`TrainConfig.batch_backward=False`) beside the default batched call.

Compile time (the first call) is reported apart. Steady state: after one warm-up call, `--repeats`
blocks of `--updates` updates each; medians over blocks and the ratio of medians.

    python benchmarks/training_step.py --dim 20 --output benchmarks/results/training_step_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from common import RESULTS, ResultFile, log  # noqa: E402
from mcd_cli.train import loop as training  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402

ESTIMATORS = ("ula", "uha", "ula-mcd", "uha-mcd")


def variant(estimator: str, dim: int, steps: int, unroll: int) -> SamplerConfig:
    sampler, _, mcd = estimator.partition("-")
    hidden = max(32, -(-dim // 32) * 32)
    return SamplerConfig(sampler=sampler, backward="mcd" if mcd else "ais", steps=steps, hidden=hidden, unroll=unroll)


class Single:
    """One update per call."""

    def __init__(self, target, sconf, tconf):
        state = training.init_train_state(jax.random.key(0), target, sconf, tconf)
        self.update = training.make_update(target, sconf, tconf)
        self.params, self.opt, self.key, self.i = state.params, state.opt_state, state.key, 0
        t0 = time.perf_counter()
        self.run(1)
        self.compile_seconds = time.perf_counter() - t0

    def run(self, n):
        t0 = time.perf_counter()
        for _ in range(n):
            self.params, self.opt, elbo, _ = self.update(
                self.params, self.opt, jax.random.fold_in(self.key, self.i), jnp.float32(1.0)
            )
            self.i += 1
        jax.block_until_ready(elbo)
        return time.perf_counter() - t0


class Chunked:
    """`chunk` updates per call (the loop `fit` runs)."""

    def __init__(self, target, sconf, tconf):
        self.state = training._to_device(training.init_train_state(jax.random.key(0), target, sconf, tconf))
        self.run_chunk = training.make_train_chunk(target, sconf, tconf)
        self.chunk = tconf.chunk
        t0 = time.perf_counter()
        self.run(tconf.chunk)
        self.compile_seconds = time.perf_counter() - t0

    def run(self, n):
        t0 = time.perf_counter()
        for _ in range(max(1, n // self.chunk)):
            stop = self.state.iteration + self.chunk
            self.state, elbos = self.run_chunk(self.state, stop)
        jax.block_until_ready(elbos)
        return time.perf_counter() - t0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=20)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--target", default="gmm8")
    parser.add_argument("--unrolls", type=int, nargs="*", default=[1, 4], help="unrolls of the one-update-per-call timers")
    parser.add_argument("--chunk-unrolls", type=int, nargs="*", default=[1], help="unrolls of the chunked-loop timers")
    parser.add_argument("--no-logvar", dest="logvar", action="store_false", help="skip the log-variance loss timers")
    parser.add_argument("--per-step-backward", action="store_true",
                        help="also time the MCD chunked loop with the backward network inside the scan "
                             "(TrainConfig.batch_backward=False), the form before it was batched")
    parser.add_argument("--output", type=Path, default=RESULTS / "training_step_cpu.json")
    args = parser.parse_args(argv)
    target = load_target(args.target, {"dim": args.dim})
    out = ResultFile(args.output, "training_step", {k: str(v) for k, v in vars(args).items()})
    timers = {}
    for est in ESTIMATORS:
        for unroll in args.unrolls:
            tconf = TrainConfig(batch_size=args.batch_size)
            timers[(est, f"unroll{unroll}", "elbo", "single")] = Single(target, variant(est, args.dim, args.steps, unroll), tconf)
        for unroll in args.chunk_unrolls:
            sconf = variant(est, args.dim, args.steps, unroll)
            timers[(est, f"unroll{unroll}", "elbo", "chunk50")] = Chunked(target, sconf, TrainConfig(batch_size=args.batch_size, chunk=50))
            if args.per_step_backward and est.endswith("mcd"):
                tconf = TrainConfig(batch_size=args.batch_size, chunk=50, batch_backward=False)
                timers[(est, f"unroll{unroll}", "elbo", "chunk50-per-step-backward")] = Chunked(target, sconf, tconf)
        if est.startswith("ula") and args.logvar:
            tconf = TrainConfig(batch_size=args.batch_size, objective="logvar")
            timers[(est, "unroll1", "logvar", "single")] = Single(target, variant(est, args.dim, args.steps, 1), tconf)
        log(f"compiled {est}: " + ", ".join(f"{'/'.join(k[1:])} {t.compile_seconds:.1f} s" for k, t in timers.items() if k[0] == est))
    times = {k: [] for k in timers}
    for _ in range(args.repeats):
        for key, timer in timers.items():
            times[key].append(1e3 * timer.run(args.updates) / args.updates)
        save(out, args, timers, times)  # after every round: a time-boxed run keeps what it measured


def save(out, args, timers, times) -> None:
    rows = []
    for (est, unroll, loss, loop), values in times.items():
        rows.append(
            {
                "estimator": est, "unroll": unroll, "loss": loss, "loop": loop,
                "ms_per_update_median": statistics.median(values), "ms_per_update": values,
                "compile_seconds": timers[(est, unroll, loss, loop)].compile_seconds,
            }
        )
        log(f"{est:8s} {unroll:8s} {loss:7s} {loop:8s} {statistics.median(values):8.2f} ms")
    med = {(r["estimator"], r["unroll"], r["loss"], r["loop"]): r["ms_per_update_median"] for r in rows}
    ratios = {}

    def ratio(name, a, b):
        if a in med and b in med:
            ratios[name] = med[a] / med[b]

    for est in ESTIMATORS:
        ratio(f"{est} unroll4/unroll1", (est, "unroll4", "elbo", "single"), (est, "unroll1", "elbo", "single"))
        for u in args.chunk_unrolls:
            ratio(f"{est} chunk50/single (unroll{u})", (est, f"unroll{u}", "elbo", "chunk50"), (est, f"unroll{u}", "elbo", "single"))
        ratio(f"{est} chunk50 unroll4/single unroll1", (est, "unroll4", "elbo", "chunk50"), (est, "unroll1", "elbo", "single"))
        ratio(f"{est} logvar/elbo", (est, "unroll1", "logvar", "single"), (est, "unroll1", "elbo", "single"))
    for name in ("ula-mcd", "uha-mcd"):
        base = name.split("-")[0]
        for u in args.unrolls:
            ratio(f"{name}/{base} (elbo, unroll{u}, single)", (name, f"unroll{u}", "elbo", "single"), (base, f"unroll{u}", "elbo", "single"))
        for u in args.chunk_unrolls:
            ratio(f"{name}/{base} (elbo, unroll{u}, chunk50)", (name, f"unroll{u}", "elbo", "chunk50"), (base, f"unroll{u}", "elbo", "chunk50"))
            ratio(f"{name}/{base} (elbo, unroll{u}, chunk50, per-step backward)",
                  (name, f"unroll{u}", "elbo", "chunk50-per-step-backward"), (base, f"unroll{u}", "elbo", "chunk50"))
            ratio(f"{name} batched/per-step backward (unroll{u}, chunk50)",
                  (name, f"unroll{u}", "elbo", "chunk50"), (name, f"unroll{u}", "elbo", "chunk50-per-step-backward"))
    for k, v in ratios.items():
        log(f"{k}: {v:.2f}")
    out.add("rows", {"rows": rows, "repeats_done": min(len(v) for v in times.values())})
    out.add("ratios", ratios)
    out.save()
