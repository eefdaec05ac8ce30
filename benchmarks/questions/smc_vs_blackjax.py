"""`mcd`'s adaptive tempered SMC beside BlackJAX's, and the calibration of its one-run standard error.

Needs BlackJAX (`pip install '.[bench]'`). For each target, dimension and seed, in the same process
and interleaved (so both see the same machine load):

- BlackJAX `adaptive_tempered_smc` with an HMC kernel (step size `--bj-step-size`, unit mass,
  `--leapfrog` steps, `--moves` moves per temperature, systematic resampling at every step,
  target ESS `--target-ess`), prior π0 and likelihood γ/π0, log Ẑ the sum of the increments;
- `mcd estimate TARGET --backward ais --iterations 0 --resample 0.5 --refine hmc --schedule adaptive
  --refine-steps MOVES --leapfrog L --target-ess E --samples N --seed S` as a library call
  (`run.execute`): the same particle count (or `--mcd-particles`, to compare at equal wall time), `--mcd-moves` moves per temperature (its default, 15)
  of `--mcd-leapfrog` leapfrog steps (its default, 3: it runs in coordinates whitened by its
  preconditioner, where εL ≈ π/2 is best), so 45 gradients per temperature against BlackJAX's
  5 × 10 = 50 with the defaults; its step size
  and diagonal mass adapt from the particles, it resamples when ESS/N < 0.5, and it reports a
  standard error (genealogy, or the spread of its default populations).

Seconds are wall time including compilation (the first seed of each cell pays it; the tables
quote medians over seeds). Rendered with `--render`: RMSE of log Ẑ over seeds, median seconds,
and for `mcd` the fraction of seeds whose ±2 SE interval covers the truth.

Usage:

    python benchmarks/smc_vs_blackjax.py --targets gmm8 gauss_narrow student_t3 funnel --dim 20 --seeds 10
    python benchmarks/smc_vs_blackjax.py --render
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from common import RESULTS, ResultFile, log, write_rendered  # noqa: E402
from mcd_cli import run, smc  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.run import ADAPTIVE_REFINE_STEPS  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402

OUTPUT = RESULTS / "smc_vs_blackjax.json"


_BLACKJAX: dict = {}


def blackjax_step(target, args):
    """BlackJAX's SMC and its jitted step, built once per target (compiled once, like mcd's)."""
    key = (target.name, target.dim)
    if key in _BLACKJAX:
        return _BLACKJAX[key]
    import blackjax
    from blackjax.smc import extend_params, resampling

    prior = target.initial_log_density

    def loglik(x):
        return target.log_density(x) - prior(x)

    hmc_params = extend_params({
        "step_size": args.bj_step_size,
        "inverse_mass_matrix": jnp.ones(target.dim),
        "num_integration_steps": args.leapfrog,
    })
    smc = blackjax.adaptive_tempered_smc(
        prior, loglik, blackjax.hmc.build_kernel(), blackjax.hmc.init, hmc_params,
        resampling.systematic, args.target_ess, num_mcmc_steps=args.moves,
    )
    _BLACKJAX[key] = smc, jax.jit(smc.step)
    return _BLACKJAX[key]


def run_blackjax(target, args, seed: int) -> dict:
    t0 = time.perf_counter()
    smc, step = blackjax_step(target, args)
    key_init, key_run = jax.random.split(jax.random.key(seed))
    mean = jnp.asarray(target.initial_mean, dtype=jnp.float32)
    scale = jnp.asarray(target.initial_scale, dtype=jnp.float32)
    x0 = mean + scale * jax.random.normal(key_init, (args.particles, target.dim))
    state = smc.init(x0)
    log_z, steps = 0.0, 0
    while float(state.tempering_param) < 1.0 and steps < args.max_steps:
        state, info = step(jax.random.fold_in(key_run, steps), state)
        log_z += float(info.log_likelihood_increment)
        steps += 1
    seconds = time.perf_counter() - t0
    done = float(state.tempering_param) >= 1.0
    return {"log_z": log_z if done else None, "error": (log_z - target.log_z) if done else None,
            "steps": steps, "seconds": seconds}


def run_mcd(target, args, seed: int) -> dict:
    sconf = SamplerConfig(
        backward="ais", adaptive=True, refine="hmc", resample=0.5, refine_steps=args.mcd_moves,
        leapfrog=args.mcd_leapfrog, target_ess=args.target_ess, max_steps=args.max_steps,
    )
    plan = run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(iterations=0),
                       num_samples=args.mcd_particles or args.particles, seed=seed)
    t0 = time.perf_counter()
    rec = run.execute(plan).as_dict()
    seconds = time.perf_counter() - t0
    return {"log_z": rec["log_z"], "error": rec["error"], "stderr": rec["log_z_stderr"],
            "stderr_method": rec["log_z_stderr_method"], "status": rec["status"], "reasons": rec["reasons"],
            "stationarity_z": rec["smc"].get("stationarity_z"),
            "steps": rec["temperatures"], "resamplings": rec["smc"]["resamplings"][0],
            "mean_acceptance": rec["smc"]["mean_acceptance"], "seconds": seconds}


def render(data: dict) -> str:
    cells = data["cells"]
    groups: dict = {}
    for key, cell in cells.items():
        target, dim, method, _ = key.split("/")
        groups.setdefault((target, dim), {}).setdefault(method, []).append(cell)
    lines = ["# Adaptive tempered SMC: mcd beside BlackJAX", ""]
    for s in data["sessions"]:
        m = s["machine"]
        load = m.get("load_average_at_start")
        lines.append(
            f"- `{s['command']}`  \n  {m['cpu_model']}, {m['cpu_count']} cores ({m.get('cpu_affinity', '?')} "
            f"usable by the run), load average at start {', '.join(f'{v:.1f}' for v in load) if load else 'not recorded'}; "
            f"JAX {m['jax']} ({m['backend']}{': ' + ', '.join(m['devices']) if m['backend'] != 'cpu' else ''}); "
            f"commit `{(m['git_commit'] or '')[:10]}`; {m['date']}" + (f"  \n  {s['note']}" if s.get("note") else "")
        )
    lines += ["", f"Settings: `{json.dumps(data['settings'])}`", "",
              "| target | d | seeds | BlackJAX RMSE | mcd RMSE | ratio | BlackJAX median s | mcd median s "
              "| mcd median steps | mcd ok/warn/unrel. | ±2 SE coverage, ok runs | ±2 SE coverage, all runs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pooled = {"ok": [0, 0], "all": [0, 0]}
    for (target, dim), methods in sorted(groups.items()):
        bj, mc = methods.get("blackjax", []), methods.get("mcd", [])
        n = min(len(bj), len(mc)) if bj else len(mc)
        if n == 0:
            continue

        def rmse(cs):
            errs = [c["error"] for c in cs if c["error"] is not None]
            return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else float("nan")

        def covered(cs):  # a run without a standard error covers nothing
            return sum(1 for c in cs if c["stderr"] is not None and abs(c["error"]) <= 2 * c["stderr"])

        ok = [c for c in mc if c.get("status") == "ok"]
        counts = [sum(1 for c in mc if c.get("status") == v) for v in ("ok", "warn", "unreliable")]
        for name, cs in (("ok", ok), ("all", mc)):
            pooled[name][0] += covered(cs)
            pooled[name][1] += len(cs)
        r_bj, r_mc = rmse(bj), rmse(mc)
        lines.append(
            f"| {target} | {dim[1:]} | {n} | {r_bj:.3f} | {r_mc:.3f} | {r_mc / r_bj:.2f} | "
            f"{np.median([c['seconds'] for c in bj]) if bj else float('nan'):.3g} | {np.median([c['seconds'] for c in mc]):.3g} | "
            f"{np.median([c['steps'] for c in mc]):.0f} | {'/'.join(map(str, counts))} | "
            f"{covered(ok)}/{len(ok)} | {covered(mc)}/{len(mc)} |"
        )
    for name, label in (("ok", "`ok` runs"), ("all", "all runs (a run without a standard error counts as not covered)")):
        hit, total = pooled[name]
        if total:
            p = hit / total
            lines += ["", f"Pooled ±2 SE coverage of mcd's standard error, {label}: {hit}/{total} = "
                      f"{p:.2f} ± {math.sqrt(p * (1 - p) / total):.2f} (binomial SE)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", nargs="+", default=["gmm8", "gauss_narrow", "student_t3", "funnel"])
    parser.add_argument("--dim", type=int, nargs="+", default=[20])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--particles", type=int, default=4096)
    parser.add_argument("--moves", type=int, default=5, help="BlackJAX's moves per temperature")
    parser.add_argument("--mcd-particles", type=int, default=0,
                        help="mcd's particles when they differ from BlackJAX's --particles (equal wall time)")
    parser.add_argument("--stationarity-moves", type=int, default=0,
                        help="exactly this many extra moves in mcd's stationarity test (default: its rule, "
                             "max(20, 5 × --mcd-moves))")
    parser.add_argument("--mcd-moves", type=int, default=ADAPTIVE_REFINE_STEPS,
                        help="mcd's moves per temperature (its default with --schedule adaptive)")
    parser.add_argument("--leapfrog", type=int, default=10, help="BlackJAX's leapfrog steps (unit mass)")
    parser.add_argument("--mcd-leapfrog", type=int, default=SamplerConfig.leapfrog,
                        help="mcd's leapfrog steps (whitened by its preconditioner; its default)")
    parser.add_argument("--target-ess", type=float, default=0.5)
    parser.add_argument("--bj-step-size", type=float, default=0.2)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--methods", nargs="+", default=["blackjax", "mcd"], choices=["blackjax", "mcd"],
                        help="which samplers to run (mcd alone: a coverage study of its standard error)")
    parser.add_argument("--render", action="store_true")
    args = parser.parse_args(argv)
    if args.render:
        write_rendered(args.output, render(json.loads(args.output.read_text())))
        return
    names = ("particles", "moves", "leapfrog", "target_ess", "bj_step_size", "max_steps")
    settings = {k: getattr(args, k) for k in names}
    if args.mcd_leapfrog != args.leapfrog:  # older result files ran both with --leapfrog
        settings["mcd_leapfrog"] = args.mcd_leapfrog
    if args.mcd_moves != args.moves:  # older result files ran both with --moves
        settings["mcd_moves"] = args.mcd_moves
    if args.mcd_particles:
        settings["mcd_particles"] = args.mcd_particles
    if args.stationarity_moves:
        settings["stationarity_moves"] = args.stationarity_moves
        smc.diagnostics.STATIONARITY_MOVES, smc.diagnostics.STATIONARITY_TEMPERATURES = args.stationarity_moves, 0
    results = ResultFile(args.output, "smc_vs_blackjax", settings)
    for dim in args.dim:
        for name in args.targets:
            target = load_target(name, {"dim": str(dim)})
            for seed in range(args.seeds):
                for method, fn in (("blackjax", run_blackjax), ("mcd", run_mcd)):
                    if method not in args.methods:
                        continue
                    key = f"{name}/d{dim}/{method}/seed{seed}"
                    if key in results:
                        continue
                    cell = fn(target, args, seed)
                    log(f"{key}: {cell}")
                    results.add(key, cell)
