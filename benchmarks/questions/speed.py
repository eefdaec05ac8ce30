"""Speed and memory of the four estimators (issue 5, part 2).

Measures, on one machine and in one run:

- training: milliseconds per optimiser iteration (batch 128, K = 64 by default) for ULA, UHA,
  ULA-MCD and UHA-MCD at each dimension, and the MCD/AIS time ratio;
- estimation: importance samples per second (chunks of 1024 particles);
- memory: XLA's compiled memory analysis of the training step (argument + output + temporary
  bytes) for K in {64, 256, 1024}, with and without rematerialisation of the scan over steps.

Timings are steady state: the first call (compilation) and `--warmup` further iterations are left
out, then `--repeats` blocks of `--iterations` updates are timed. Inside each repeat the
estimators run one after another, so a change of machine load hits all of them alike; each ratio
is computed within a repeat, and medians over repeats are reported. The memory figures come from
the compiler, not from sampling the process, so they are deterministic and valid on CPU.

Usage (the committed results; see benchmarks/README.md):

    python benchmarks/speed.py --dims 20 200 --output benchmarks/results/speed_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from common import RESULTS, ResultFile, log  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.path.annealing import log_weight_chunk  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from mcd_cli.train.loop import init_train_state, make_update  # noqa: E402

ESTIMATORS = ("ula", "uha", "ula-mcd", "uha-mcd")


def sampler_config(estimator: str, steps: int, hidden: int, remat: bool = False) -> SamplerConfig:
    """`ula` -> ULA with the AIS backward kernel; `ula-mcd` -> ULA with the MCD one."""
    sampler, _, mcd = estimator.partition("-")
    return SamplerConfig(
        sampler=sampler, backward="mcd" if mcd else "ais", steps=steps, hidden=hidden, remat=remat
    )


def _block(tree):
    jax.block_until_ready(tree)
    return tree


class _Timer:
    """Times `step()` (one compiled call); the first call, compilation included, is timed apart."""

    def __init__(self):
        self.count = 0
        t0 = time.perf_counter()
        self.run(1)
        self.compile_seconds = time.perf_counter() - t0

    def step(self):
        raise NotImplementedError

    def run(self, n: int) -> float:
        """Runs n steps; returns the seconds they took (device work included)."""
        t0 = time.perf_counter()
        for _ in range(n):
            out = self.step()
            self.count += 1
        _block(out)
        return time.perf_counter() - t0


class TrainTimer(_Timer):
    """One estimator's compiled training step, with its own parameters carried between calls."""

    def __init__(self, target, sconf, tconf, seed=0):
        state = init_train_state(jax.random.key(seed), target, sconf, tconf)
        self.update = make_update(target, sconf, tconf)
        self.params, self.opt_state = state.params, state.opt_state
        self.key = state.key
        self.lr_scale = jnp.asarray(1.0, dtype=jnp.float32)
        super().__init__()

    def step(self):
        self.params, self.opt_state, elbo, _ = self.update(
            self.params, self.opt_state, jax.random.fold_in(self.key, self.count), self.lr_scale
        )
        return elbo


class EstimateTimer(_Timer):
    """One estimator's compiled chunk of importance samples."""

    def __init__(self, target, sconf, params, chunk_size):
        self.chunk = log_weight_chunk(target, sconf, chunk_size)
        self.params, self.chunk_size = params, chunk_size
        super().__init__()

    def step(self):
        offset = jnp.asarray(self.count * self.chunk_size, dtype=jnp.uint32)
        return self.chunk(self.params, jax.random.key(1), offset)


def time_dimension(args, dim: int) -> dict:
    """Training and estimation timings of every estimator at one dimension, interleaved."""
    target = load_target(args.target, {"dim": str(dim)})
    tconf = TrainConfig(iterations=1, batch_size=args.batch_size)
    train, est = {}, {}
    for name in args.estimators:
        sconf = sampler_config(name, args.steps, args.hidden)
        log(f"  d={dim} {name}: compiling")
        train[name] = TrainTimer(target, sconf, tconf)
        train[name].run(args.warmup)
        est[name] = EstimateTimer(target, sconf, train[name].params, args.chunk_size)
        est[name].run(1)
    train_s = {n: [] for n in args.estimators}
    est_s = {n: [] for n in args.estimators}
    for r in range(args.repeats):
        for name in args.estimators:
            train_s[name].append(train[name].run(args.iterations) / args.iterations)
            est_s[name].append(est[name].run(args.chunks) / (args.chunks * args.chunk_size))
        log(f"  d={dim} repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{n} {1e3 * train_s[n][-1]:.1f} ms" for n in args.estimators))
    out = {"dim": dim, "estimators": {}, "ratios": {}}
    for name in args.estimators:
        out["estimators"][name] = {
            "train_ms_per_iteration_median": 1e3 * statistics.median(train_s[name]),
            "train_ms_per_iteration_repeats": [1e3 * s for s in train_s[name]],
            "train_compile_seconds": train[name].compile_seconds,
            "estimate_samples_per_second_median": statistics.median(1.0 / s for s in est_s[name]),
            "estimate_samples_per_second_repeats": [1.0 / s for s in est_s[name]],
            "estimate_compile_seconds": est[name].compile_seconds,
        }
    for base in ("ula", "uha"):
        mcd = f"{base}-mcd"
        if base in train_s and mcd in train_s:
            per_repeat = [m / a for m, a in zip(train_s[mcd], train_s[base])]
            est_ratio = [m / a for m, a in zip(est_s[mcd], est_s[base])]
            out["ratios"][f"{mcd}/{base}"] = {
                "train_time_ratio_median": statistics.median(per_repeat),
                "train_time_ratio_repeats": per_repeat,
                "estimate_time_ratio_median": statistics.median(est_ratio),
            }
    return out


def memory_cell(args, name: str, steps: int, remat: bool) -> dict:
    """Compiler-reported memory of one training step (nothing is run)."""
    target = load_target(args.target, {"dim": str(args.memory_dim)})
    sconf = sampler_config(name, steps, args.hidden, remat=remat)
    tconf = TrainConfig(iterations=1, batch_size=args.batch_size)
    state = init_train_state(jax.random.key(0), target, sconf, tconf)
    update = make_update(target, sconf, tconf)
    t0 = time.perf_counter()
    compiled = update.lower(
        state.params, state.opt_state, state.key, jnp.asarray(1.0, dtype=jnp.float32)
    ).compile()
    seconds = time.perf_counter() - t0
    m = compiled.memory_analysis()
    fields = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
              "alias_size_in_bytes", "generated_code_size_in_bytes")
    out = {f: int(getattr(m, f, 0) or 0) for f in fields}
    out["total_bytes"] = out["temp_size_in_bytes"] + out["argument_size_in_bytes"] + out["output_size_in_bytes"]
    out["compile_seconds"] = seconds
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="gauss_shift", help="bundled target name (takes a dim parameter)")
    p.add_argument("--dims", type=int, nargs="+", default=[20, 200])
    p.add_argument("--estimators", nargs="+", choices=ESTIMATORS, default=list(ESTIMATORS))
    p.add_argument("--steps", type=int, default=64, help="K for the timings")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--hidden", type=int, default=128, help="score network width d_h (mcd-cli's default)")
    p.add_argument("--warmup", type=int, default=5, help="iterations after compilation left out")
    p.add_argument("--iterations", type=int, default=10, help="training iterations per timed repeat")
    p.add_argument("--chunks", type=int, default=2, help="estimation chunks per timed repeat")
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--memory-steps", type=int, nargs="*", default=[64, 256, 1024])
    p.add_argument("--memory-estimators", nargs="*", choices=ESTIMATORS, default=list(ESTIMATORS))
    p.add_argument("--memory-dim", type=int, default=20)
    p.add_argument("--skip-timing", action="store_true")
    p.add_argument("--output", type=Path, default=RESULTS / "speed.json")
    args = p.parse_args(argv)

    settings = {k: getattr(args, k) for k in (
        "target", "steps", "batch_size", "hidden", "warmup", "iterations", "chunks", "chunk_size",
        "repeats", "memory_dim")}
    results = ResultFile(args.output, "speed", settings)
    if not args.skip_timing:
        for dim in args.dims:
            key = f"timing/d{dim}/" + ",".join(args.estimators)
            if key in results:
                log(f"skip {key} (already in {args.output})")
                continue
            log(f"timing d={dim}")
            results.add(key, time_dimension(args, dim))
    for name in args.memory_estimators:
        for steps in args.memory_steps:
            for remat in (False, True):
                key = f"memory/d{args.memory_dim}/{name}/K{steps}/{'remat' if remat else 'no-remat'}"
                if key in results:
                    log(f"skip {key}")
                    continue
                cell = {"estimator": name, "steps": steps, "remat": remat, "dim": args.memory_dim}
                cell.update(memory_cell(args, name, steps, remat))
                log(f"{key}: {cell['total_bytes'] / 2**20:.1f} MiB (compile {cell['compile_seconds']:.1f} s)")
                results.add(key, cell)
    log(f"wrote {args.output}")
