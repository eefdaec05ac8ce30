"""Scaling over devices (issue 15, part 5): estimation particles per second and training milliseconds
per update against the device count, and the overhead of the sharded code path.

Cells, timed interleaved inside each repeat (so a change of machine load hits all alike):

- `unsharded`: the plain path (`sharding=None`), the baseline;
- `devices=n` for each n of `--devices`: particles sharded over the first n devices
  (`devices.particle_layout(n)`); `devices=1` is the sharded code path on one device, so
  `devices=1 / unsharded` is its overhead.

SMC rows (`smc unsharded`, `smc devices=n`): particles per second of one SMC population of
`--particles` (the same sampler untrained, `--resample`, `--refine`, multinomial resampling) split
over n devices with global resampling (`run.compiled_smc(..., sharding)`), and the largest difference of
its log Ẑ from the unsharded one, with whether the same steps were resampled. `--rows smc` runs only
these rows and keeps the others in the file.

On a CPU the devices are simulated (`--simulate N` sets
`XLA_FLAGS=--xla_force_host_platform_device_count=N` before JAX starts); they share the same cores,
so no speed-up is expected there: the numbers show correctness (the sharded chunk's log weights
equal the unsharded ones, `max_abs_diff`) and overhead. On a GPU machine run it without
`--simulate`. Timings are steady state (compilation and `--warmup` calls left out); medians over
`--repeats`; each ratio is computed within a repeat.

Usage (the committed CPU results):

    taskset -c 1 nice -n 10 python benchmarks/scaling.py --simulate 4 --devices 1 2 4 \\
        --output benchmarks/results/scaling_cpu.json
    taskset -c 1 nice -n 10 python benchmarks/scaling.py --simulate 4 --devices 1 2 4 --rows smc \\
        --output benchmarks/results/scaling_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from pathlib import Path


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--simulate", type=int, default=0, help="simulated CPU devices (0: the real ones)")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--target", default="gmm8")
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--estimator", default="ula-mcd")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument("--iterations", type=int, default=10, help="training updates per timed block")
    p.add_argument("--chunks", type=int, default=4, help="estimation chunks per timed block")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rows", choices=["all", "is", "smc"], default="all",
                   help="which rows to (re)run: importance sampling and training, SMC, or both")
    p.add_argument("--particles", type=int, default=1024, help="SMC population")
    p.add_argument("--resample", type=float, default=0.5, help="SMC: resample when ESS/N falls below")
    p.add_argument("--refine", default="mala", help="SMC: the refinement move")
    p.add_argument("--populations", type=int, default=2, help="SMC populations per timed block")
    p.add_argument("--output", type=Path, required=True)
    return p.parse_args()


ARGS = _parse()
if ARGS.simulate:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ARGS.simulate}"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import render  # noqa: E402
from common import ResultFile, log  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

from mcd_cli import run  # noqa: E402
from mcd_cli.path import annealing  # noqa: E402
from mcd_cli.runtime import devices  # noqa: E402
from mcd_cli.path.annealing import log_weight_chunk  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from mcd_cli.train.loop import init_train_state, make_update  # noqa: E402


def sampler_config(estimator: str, steps: int, hidden: int) -> SamplerConfig:
    sampler, _, mcd = estimator.partition("-")
    return SamplerConfig(sampler=sampler, backward="mcd" if mcd else "ais", steps=steps, hidden=hidden)


class Cell:
    """One sharding: its compiled training update and estimation chunk, each timed apart."""

    def __init__(self, sharding, target, sconf, tconf, chunk_size):
        state = init_train_state(jax.random.key(0), target, sconf, tconf)
        self.params, self.opt_state, self.key = state.params, state.opt_state, state.key
        self.lr_scale = jnp.asarray(1.0, dtype=jnp.float32)
        self.update = make_update(target, sconf, tconf, sharding=sharding)
        self.chunk = log_weight_chunk(target, sconf, chunk_size, sharding)
        self.chunk_size = chunk_size
        self.initial_params = state.params
        self.updates = self.chunks = 0
        t0 = time.perf_counter()
        self.train(1)
        self.train_compile_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.estimate(1)
        self.estimate_compile_seconds = time.perf_counter() - t0

    def train(self, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            self.params, self.opt_state, elbo, _ = self.update(
                self.params, self.opt_state, jax.random.fold_in(self.key, self.updates), self.lr_scale
            )
            self.updates += 1
        jax.block_until_ready(elbo)
        return time.perf_counter() - t0

    def estimate(self, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            out = self.chunk(self.initial_params, jax.random.key(1), jnp.asarray(self.chunks * self.chunk_size, jnp.uint32))
            self.chunks += 1
        jax.block_until_ready(out)
        return time.perf_counter() - t0

    def first_chunk(self) -> np.ndarray:
        return np.asarray(self.chunk(self.initial_params, jax.random.key(1), jnp.asarray(0, jnp.uint32)))


class SMCCell:
    """One sharding of an SMC population: its compiled run, timed per population."""

    def __init__(self, sharding, target, sconf, particles):
        self.params = annealing.init_params(jax.random.key(0), target, sconf)
        self.run = run.compiled_smc(target, sconf, particles, True, sharding)
        self.particles = particles
        self.calls = 0
        t0 = time.perf_counter()
        self.time(1)
        self.compile_seconds = time.perf_counter() - t0

    def time(self, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            out = self.run(self.params, jax.random.key(2 + self.calls))
            self.calls += 1
        jax.block_until_ready(out)
        return time.perf_counter() - t0

    def first(self) -> tuple[float, list[int], np.ndarray, np.ndarray]:
        """log Ẑ, the resampled steps, the Eve indices and the final log weights of the population of key 1."""
        out = jax.device_get(self.run(self.params, jax.random.key(1)))
        log_z = float(out.log_z + logsumexp(out.log_w) - np.log(self.particles))
        resampled = [i + 1 for i in range(int(out.steps)) if out.trace.resampled[i]]
        return log_z, resampled, np.asarray(out.eve), np.asarray(out.log_w)


def smc_rows(args, result, target, sconf) -> None:
    names = ["smc unsharded"] + [f"smc devices={n}" for n in args.devices]
    cells = {}
    for name in names:
        n = None if name == "smc unsharded" else int(name.split("=")[1])
        sharding = None if n is None else devices.particle_layout(n).particles
        log(f"{name}: compiling")
        cells[name] = SMCCell(sharding, target, sconf, devices.round_up(args.particles, n or 1))
        cells[name].time(args.warmup)
    seconds = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:
            seconds[name].append(cells[name].time(args.populations) / (args.populations * cells[name].particles))
        log(f"SMC repeat {r + 1}/{args.repeats}: " + ", ".join(f"{n} {1 / seconds[n][-1]:.0f}/s" for n in names))
    reference, resampled, eve, log_w = cells["smc unsharded"].first()
    for name in names:
        log_z, steps, eve_n, log_w_n = cells[name].first()
        result.add(
            name,
            {
                "devices": None if name == "smc unsharded" else int(name.split("=")[1]),
                "particles": cells[name].particles,
                "resample": args.resample,
                "refine": args.refine,
                "smc_particles_per_second_median": statistics.median(1.0 / s for s in seconds[name]),
                "smc_particles_per_second_repeats": [1.0 / s for s in seconds[name]],
                "smc_ratio_to_unsharded_median": statistics.median(
                    a / b for a, b in zip(seconds[name], seconds["smc unsharded"])
                ),
                "smc_compile_seconds": cells[name].compile_seconds,
                "abs_diff_log_z_vs_unsharded": abs(log_z - reference),
                "resampled_steps": steps,
                "same_resampled_steps": steps == resampled,
                "same_eve_indices": bool(np.array_equal(eve_n, eve)),
                # Final weights further than float rounding from the unsharded ones: particles whose
                # path saw a Metropolis decision flipped by rounding, or a resampling pick it moved.
                "particles_moved_differently": int(np.sum(~np.isclose(log_w_n, log_w, rtol=1e-4, atol=1e-4))),
            },
        )


def main(argv=None) -> None:
    args = ARGS
    # `--rows` says which rows this call (re)runs, not how they are computed.
    settings = {k: v for k, v in vars(args).items() if k not in ("output", "rows")}
    settings["output"] = None
    result = ResultFile(args.output, "scaling", settings)
    target = load_target(args.target, {"dim": str(args.dim)})
    sconf = sampler_config(args.estimator, args.steps, args.hidden)
    if args.rows in ("all", "smc"):
        smc_rows(args, result, target, dataclasses.replace(sconf, resample=args.resample, refine=args.refine))
    if args.rows == "smc":
        finish(result, args.output)
        return
    names = ["unsharded"] + [f"devices={n}" for n in args.devices]
    cells = {}
    for name in names:
        n = None if name == "unsharded" else int(name.split("=")[1])
        sharding = None if n is None else devices.particle_layout(n).particles
        batch = args.batch_size if n is None else devices.round_up(args.batch_size, n)
        chunk = args.chunk_size if n is None else devices.round_up(args.chunk_size, n)
        log(f"{name}: compiling")
        cells[name] = Cell(sharding, target, sconf, TrainConfig(iterations=1, batch_size=batch), chunk)
        cells[name].train(args.warmup)
        cells[name].estimate(args.warmup)
    reference = cells["unsharded"].first_chunk()
    train_s = {n: [] for n in names}
    est_s = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:
            train_s[name].append(cells[name].train(args.iterations) / args.iterations)
            est_s[name].append(cells[name].estimate(args.chunks) / (args.chunks * cells[name].chunk_size))
        log(f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{n} {1e3 * train_s[n][-1]:.1f} ms" for n in names))
    for name in names:
        chunk = cells[name].first_chunk()[: len(reference)]
        result.add(
            name,
            {
                "devices": None if name == "unsharded" else int(name.split("=")[1]),
                "train_ms_per_update_median": 1e3 * statistics.median(train_s[name]),
                "train_ms_per_update_repeats": [1e3 * s for s in train_s[name]],
                "train_ratio_to_unsharded_median": statistics.median(
                    a / b for a, b in zip(train_s[name], train_s["unsharded"])
                ),
                "estimate_particles_per_second_median": statistics.median(1.0 / s for s in est_s[name]),
                "estimate_particles_per_second_repeats": [1.0 / s for s in est_s[name]],
                "estimate_ratio_to_unsharded_median": statistics.median(
                    a / b for a, b in zip(est_s[name], est_s["unsharded"])
                ),
                "train_compile_seconds": cells[name].train_compile_seconds,
                "estimate_compile_seconds": cells[name].estimate_compile_seconds,
                "max_abs_diff_log_weights_vs_unsharded": float(np.max(np.abs(chunk - reference))),
            },
        )
    finish(result, args.output)


def finish(result: ResultFile, output: Path) -> None:
    """Records the load at the end of this session, saves the file and writes its markdown."""
    sessions = result.data["sessions"]
    if "load_average_at_end" in result.data:  # files written before it was kept per session
        sessions[0].setdefault("load_average_at_end", result.data.pop("load_average_at_end"))
    sessions[result.session]["load_average_at_end"] = list(os.getloadavg())
    result.save()
    output.with_suffix(".md").write_text(render.scaling(result.data))
