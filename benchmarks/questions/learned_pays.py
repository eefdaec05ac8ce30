"""Do learned kernels pay? RMSE of log Ẑ at equal wall time, training included.

Each method gets the same budget of wall-clock seconds per run (compilation, the start, training
and estimation all count) and spends it as a user's run would:

- `adaptive`: mcd's untrained adaptive tempered SMC (the default policy's first effort: 15 HMC moves
  of 3 leapfrog steps per temperature, conditional ESS 0.5, resampling every temperature), one
  population after another until the budget is spent; Ẑ is the mean of the populations' Ẑ.
- `flow`: `adaptive` on the target transported by a flow fitted to it (`--init flow`, `init.flow`:
  the fit is part of the start, inside the budget); what the default policy does when moves get stuck.
- `blackjax`: BlackJAX's `adaptive_tempered_smc` with HMC (the peer), its diagonal inverse mass the
  particles' variance before every temperature (`inner_kernel_tuning`), 15 moves of 3 leapfrog
  steps of size d^-1/4 (BlackJAX adapts no step size), from mcd's start (`run.start`: the same
  initial distribution and whitening), the same loop.
- `learned-smc`, `learned-is`: the start of `mcd estimate` (`run.start`: `--init auto`, the
  step-size pilot; with `--schedule tempered`, first one population of adaptive tempered SMC, whose
  temperatures the learned schedule starts from), ULA-MCD (K = 64; its schedule linear and fixed, or
  learned with `--schedule learned|tempered`) trained with SMC in the loop (`--train-with smc`) or as an
  importance sampler (`is`) for `--train-share` of the budget, in blocks of 50 updates; then SMC on
  the trained kernels' fixed schedule (resampling at ESS/N 0.5, 5 HMC moves per resampling, the
  refinement tuned on a pilot population and frozen) until the budget is spent.
- `flow-learned-smc`: `learned-smc` in the variables of `flow` (`--init flow`): the MCD kernels
  learn what the fitted flow left of the target's shape; the flow's fit counts in the budget.
- `learned-smc-logvar`, `learned-is-logvar`: `learned-smc` and `learned-is` with the log-variance
  loss (`--loss logvar`, trajectories held fixed) in place of the ELBO.

Every arm also records how its populations' log Ẑ spread: their standard deviation and the share of
the mean of Ẑ that the largest population carries (`top_share`; near 1/n when they agree, near 1
when one population rules the mean).

The number of populations follows the clock, not the estimates, so stopping adds no bias. Each
(target, budget, seed, method) cell records the error and what was spent; `--render` writes the
RMSE table over seeds. Run on one quiet core:

    taskset -c 1 python benchmarks/run.py learned_pays --targets brownian_motion funnel \\
        --budgets 60 --seeds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

from common import RESULTS, ResultFile, log, write_rendered  # noqa: E402
from mcd_cli import run  # noqa: E402
from mcd_cli.train import loop as training  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig, hidden_for  # noqa: E402
from mcd_cli.run.defaults import ADAPTIVE_SMC, population_size  # noqa: E402
from mcd_cli.run.estimate import TUNING_STREAM, tuned_refinement  # noqa: E402
from mcd_cli.run.smc_kernels import compiled  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from time_to_accuracy import sized_target  # noqa: E402

OUTPUT = RESULTS / "learned_pays_cpu.json"
METHODS = ("adaptive", "flow", "blackjax", "learned-smc", "learned-is", "flow-learned-smc", "learned-smc-logvar",
           "learned-is-logvar")


def log_z_of(out, num: int) -> float:
    return float(out.log_z) + float(logsumexp(out.log_w)) - math.log(num)


def mean_log_z(values: list) -> float:
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    return float(logsumexp(v) - math.log(v.size)) if v.size else float("nan")


def spread(values: list) -> dict:
    """How the populations' log Ẑ spread: their standard deviation, and the share of the mean of Ẑ
    that the largest population carries (near 1/n when they agree, near 1 when one rules the mean)."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return {}
    return {"population_sd": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "top_share": float(np.exp(v.max() - logsumexp(v)))}


def spend(deadline: float, one_population) -> tuple[list, int]:
    """Populations one after another until `deadline` (at least one): their log Ẑ."""
    values = []
    while not values or time.perf_counter() < deadline:
        values.append(one_population(len(values)))
    return values, len(values)


def run_adaptive(target, seed: int, budget: float, args, init: str = "auto") -> dict:
    t0 = time.perf_counter()
    sconf = SamplerConfig(**ADAPTIVE_SMC.sampler_fields(), init=init)
    plan = run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(iterations=0), seed=seed)
    begin = run.start(plan)
    fitted = begin.target
    num = args.population or population_size(16_384, None, target.dim)
    smc_run = compiled(fitted, sconf, num)
    params = training.init_train_state(jax.random.key(seed), fitted, sconf, TrainConfig(iterations=0)).params
    key = jax.random.fold_in(jax.random.key(seed), 1)
    values, n = spend(t0 + budget, lambda j: log_z_of(smc_run(params, jax.random.fold_in(key, j)), num))
    return {"log_z": mean_log_z(values), "populations": n, "particles": num, "seconds": time.perf_counter() - t0,
            **spread(values)}


def blackjax_sampler(target):
    """BlackJAX's adaptive tempered SMC with HMC whose diagonal inverse mass is the particles'
    variance before every temperature (`inner_kernel_tuning`), 15 moves of 3 leapfrog steps of size
    d^-1/4 (mcd's moves and starting step; BlackJAX adapts no step size); its step compiled once a run."""
    import blackjax
    from blackjax.smc import extend_params, resampling

    prior = target.initial_log_density
    step_size = float(target.dim) ** -0.25

    def parameters(variance):
        return extend_params({"step_size": step_size, "inverse_mass_matrix": variance, "num_integration_steps": 3})

    smc = blackjax.inner_kernel_tuning(
        smc_algorithm=blackjax.adaptive_tempered_smc, logprior_fn=prior,
        loglikelihood_fn=lambda x: target.log_density(x) - prior(x), mcmc_step_fn=blackjax.hmc.build_kernel(),
        mcmc_init_fn=blackjax.hmc.init, resampling_fn=resampling.systematic,
        mcmc_parameter_update_fn=lambda key, state, info: parameters(jnp.var(state.particles, axis=0)),
        initial_parameter_value=parameters(jnp.asarray(target.initial_scale, jnp.float32) ** 2),
        num_mcmc_steps=15, target_ess=0.5,
    )
    return smc, jax.jit(smc.step)


def run_blackjax(target, seed: int, budget: float, args) -> dict:
    t0 = time.perf_counter()
    sconf = SamplerConfig(**ADAPTIVE_SMC.sampler_fields())
    target = run.start(run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(iterations=0), seed=seed)).target
    smc, step = blackjax_sampler(target)
    num = args.population or population_size(16_384, None, target.dim)
    mean = jnp.asarray(target.initial_mean, jnp.float32)
    scale = jnp.asarray(target.initial_scale, jnp.float32)

    def one(j: int) -> float:
        key_init, key_run = jax.random.split(jax.random.fold_in(jax.random.key(seed), j))
        state = smc.init(mean + scale * jax.random.normal(key_init, (num, target.dim)))
        log_z, steps = 0.0, 0
        while float(state.sampler_state.tempering_param) < 1.0 and steps < 1000:
            state, info = step(jax.random.fold_in(key_run, steps), state)
            log_z += float(info.log_likelihood_increment)
            steps += 1
        return log_z if float(state.sampler_state.tempering_param) >= 1.0 else float("nan")

    values, n = spend(t0 + budget, one)
    return {"log_z": mean_log_z(values), "populations": n, "particles": num, "seconds": time.perf_counter() - t0,
            **spread(values)}


def learned_sconf(target, steps: int = 64, schedule: str = "linear", init: str = "auto") -> SamplerConfig:
    """The learned arms' sampler: ULA-MCD with K = `steps` and the step-size pilot, estimated in SMC
    (resampling at ESS/N 0.5, 5 HMC moves per resampling)."""
    return SamplerConfig(
        sampler="ula", backward="mcd", steps=steps, hidden=hidden_for(target.dim), step_size="pilot",
        resample=0.5, refine="hmc", refine_steps=5, init=init,
        learn_schedule=schedule != "linear", schedule_start="tempered" if schedule == "tempered" else "linear",
    )


def run_learned(target, seed: int, budget: float, args, train_with: str, init: str = "auto",
                objective: str = "elbo") -> dict:
    t0 = time.perf_counter()
    sconf = learned_sconf(target, args.steps, args.schedule, init)
    tconf = TrainConfig(iterations=10**9, batch_size=128, train_with=train_with, objective=objective)
    plan = run.RunPlan(target=target, sconf=sconf, tconf=tconf, seed=seed)
    begin = run.start(plan)
    fitted = begin.target
    key_init, key_estimate = jax.random.split(jax.random.fold_in(jax.random.key(seed), 0))
    state = training.init_train_state(key_init, fitted, sconf, tconf, step_sizes=begin.step_sizes, betas=begin.betas)
    chunk = training.make_train_chunk(fitted, sconf, tconf)
    train_until = t0 + args.train_share * budget
    while time.perf_counter() < train_until:
        block = dataclasses.replace(tconf, iterations=state.iteration + 50)
        try:
            state = training.fit(state, fitted, sconf, block, update=chunk).state
        except training.TrainingDiverged:
            break
    trained_seconds = time.perf_counter() - t0
    num = args.population or population_size(16_384, None, target.dim)
    smc_run = compiled(fitted, sconf, num)
    frozen = tuned_refinement(sconf, lambda: smc_run(state.params, jax.random.fold_in(key_estimate, TUNING_STREAM)))
    values, n = spend(
        t0 + budget, lambda j: log_z_of(smc_run(state.params, jax.random.fold_in(key_estimate, j), frozen), num)
    )
    return {"log_z": mean_log_z(values), "populations": n, "particles": num, "iterations": int(state.iteration),
            "train_seconds": trained_seconds, "seconds": time.perf_counter() - t0, **spread(values)}


RUNNERS = {
    "adaptive": run_adaptive,
    "flow": lambda t, s, b, a: run_adaptive(t, s, b, a, init="flow"),
    "blackjax": run_blackjax,
    "learned-smc": lambda t, s, b, a: run_learned(t, s, b, a, "smc"),
    "learned-is": lambda t, s, b, a: run_learned(t, s, b, a, "is"),
    "flow-learned-smc": lambda t, s, b, a: run_learned(t, s, b, a, "smc", init="flow"),
    "learned-smc-logvar": lambda t, s, b, a: run_learned(t, s, b, a, "smc", objective="logvar"),
    "learned-is-logvar": lambda t, s, b, a: run_learned(t, s, b, a, "is", objective="logvar"),
}


def spec_target(spec: str, dim: int):
    """The target a `--targets` entry names: `NAME`, `NAME@D` (its dim parameter) or
    `NAME@KEY=VALUE` (another parameter, e.g. `nice_mnist@size=14`)."""
    name, _, param = spec.partition("@")
    if "=" in param:
        key, _, value = param.partition("=")
        return load_target(name, {key: int(value) if value.lstrip("-").isdigit() else value})
    return sized_target(name, int(param) if param else dim)


def render(data: dict) -> str:
    groups: dict = {}
    for key, cell in data["cells"].items():
        target, budget, method, _ = key.split("/")
        groups.setdefault((target, budget), {}).setdefault(method, []).append(cell)
    lines = ["# Do learned kernels pay? RMSE of log Ẑ at equal wall time", ""]
    for s in data["sessions"]:
        m = s["machine"]
        lines.append(f"- `{s['command']}`  \n  {m['cpu_model']}, {m.get('cpu_affinity', '?')} of {m['cpu_count']} "
                     f"cores; JAX {m['jax']} ({m['backend']}); commit `{(m['git_commit'] or '')[:10]}`; {m['date']}")
    lines += ["", f"Settings: `{json.dumps(data['settings'])}`", "",
              "Per cell: RMSE over seeds of log Ẑ − log Z (seeds), median populations, median training updates.", "",
              "| target | budget s | " + " | ".join(METHODS) + " | best |", "|---|---|" + "---|" * (len(METHODS) + 1)]
    for (target, budget), methods in sorted(groups.items(), key=lambda kv: (kv[0][0], float(kv[0][1][:-1]))):
        row, scores = [], {}
        for method in METHODS:
            cells = methods.get(method, [])
            errs = [c["error"] for c in cells if c.get("error") is not None and math.isfinite(c["error"])]
            if not cells:
                row.append("—")
                continue
            rmse = math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else float("nan")
            scores[method] = rmse
            extra = f", {np.median([c['iterations'] for c in cells]):.0f} upd." if "iterations" in cells[0] else ""
            failed = len(cells) - len(errs)
            row.append(f"{rmse:.3f} ({len(errs)}{f', {failed} failed' if failed else ''}; "
                       f"{np.median([c['populations'] for c in cells]):.0f} pop.{extra})")
        best = min(scores, key=scores.get) if scores else "—"
        lines.append(f"| {target} | {budget[:-1]} | " + " | ".join(row) + f" | {best} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", nargs="+", default=["brownian_motion", "funnel"],
                        help="bundled targets; NAME@D sets a target's dim parameter to D (else --dim), "
                             "NAME@KEY=VALUE another parameter (nice_mnist@size=14)")
    parser.add_argument("--dim", type=int, default=20, help="targets with a dim parameter (others keep theirs)")
    parser.add_argument("--budgets", type=float, nargs="+", default=[60.0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--schedule", choices=("linear", "learned", "tempered"), default="linear",
                        help="the learned arms' schedule: linear and fixed, learned from linear, or learned from "
                             "where a population of adaptive tempered SMC put its temperatures (--schedule tempered)")
    parser.add_argument("--train-share", type=float, default=0.5)
    parser.add_argument("--population", type=int, default=0, help="particles per population (0: the default split)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--render", action="store_true")
    args = parser.parse_args(argv)
    if args.render:
        write_rendered(args.output, render(json.loads(args.output.read_text())))
        return
    settings = {"dim": args.dim, "steps": args.steps, "train_share": args.train_share, "population": args.population}
    if args.schedule != "linear":  # files written before the option keep their settings
        settings["schedule"] = args.schedule
    results = ResultFile(args.output, "learned_pays", settings)
    for spec in args.targets:
        target = spec_target(spec, args.dim)
        for budget in args.budgets:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for method in args.methods:
                    key = f"{spec}/{budget:g}s/{method}/seed{seed}"
                    if key in results:
                        continue
                    cell = RUNNERS[method](target, seed, budget, args)
                    cell["error"] = cell["log_z"] - target.log_z if target.log_z is not None else None
                    cell["budget"] = budget
                    log(f"{key}: error {cell['error']:+.3f}, {cell['populations']} populations, {cell['seconds']:.0f} s")
                    results.add(key, cell)
    write_rendered(args.output, render(json.loads(args.output.read_text())))


if __name__ == "__main__":
    main()
