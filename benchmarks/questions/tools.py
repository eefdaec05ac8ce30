"""mcd's default beside the tools its users would run instead: whole processes, one core each.

For each model and seed, each tool runs as a fresh process pinned to one core (`taskset`), two
processes at a time (one per core of the machine, `--jobs`), tools interleaved so that all see
the same load; the wall time is the whole process's, imports and compilation included (each tool's
own compilation cache as a user has it: warm after its first run).

- `mcd`: `mcd estimate FILE --seed S --json --quiet`, the default policy, nothing else.
- `pymc`: `pm.sample_smc(draws=2000, chains=4, cores=1, random_seed=S)` on the file's `model`
  (PyMC's defaults: the independent Metropolis–Hastings kernel, threshold 0.5). log Ẑ is the log
  of the mean of the 4 chains' evidence estimates (each chain's last `log_marginal_likelihood`),
  its error bar the spread of the 4 (sd/√4 on Ẑ/Ẑ̄, the delta method): PyMC prints none, but a
  user with 4 chains has this one.
- `blackjax`: BlackJAX's `adaptive_tempered_smc` (4,096 particles, 10 HMC moves of 10 leapfrog
  steps at step size 0.2, unit mass, systematic resampling, target ESS 0.5) from the target's
  declared initial distribution π0, log Ẑ the sum of its increments (no error bar).
- `dynesty`: static nested sampling with dynesty's defaults (500 live points, its automatic
  choice of sampler, multi-ellipsoid bounds, its default stopping rule) with prior π0 (a Gaussian through its inverse CDF) and
  likelihood γ/π0; its error bar is its own `logzerr`.

BlackJAX and dynesty get the plain targets' densities from mcd's loader (`load_target`), so their
processes include that import too (`load_seconds` in each cell: the tools' own time is
`wall_seconds − load_seconds`). Rendered: per model and tool, runs, RMSE of log Ẑ, mean error,
whether the tool's error bar covered the truth within ±2 (where it has one), the median whole-
process seconds and its ratio to mcd's, and mcd's verdicts.

    python benchmarks/run.py tools                       # PyMC files and plain targets, 5 seeds
    python benchmarks/run.py tools --tools mcd pymc --models eight_schools_noncentred
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))  # run as a file for one cell (`--one`)
from common import REPO, RESULTS, ResultFile, log  # noqa: E402

CORPUS = REPO / "benchmarks" / "questions" / "calibration_targets" / "corpus"
# Models written in PyMC (their users' tool: mcd beside pm.sample_smc): the corpus's PyMC files
# with exact or quadrature evidence, and a logistic regression of tens of dimensions.
PYMC_MODELS = {
    "eight_schools_noncentred": CORPUS / "eight_schools_noncentred.py",
    "linreg_nig": CORPUS / "linreg_nig.py",
    "normal_nig_pymc": CORPUS / "normal_nig_pymc.py",
    "logreg_breast_cancer_pymc": REPO / "targets" / "pymc" / "logreg_breast_cancer.py",
}
# Plain targets (a log density in a YAML file: mcd beside BlackJAX and a nested sampler).
PLAIN_MODELS = {
    "gmm8": REPO / "targets" / "gmm8.yaml",
    "funnel": REPO / "targets" / "funnel.yaml",
}
TOOLS_OF = {"pymc": ("mcd", "pymc"), "plain": ("mcd", "blackjax", "dynesty")}
SETTINGS = {
    "pymc": {"draws": 2000, "chains": 4, "cores": 1},
    "blackjax": {"particles": 4096, "moves": 10, "leapfrog": 10, "step_size": 0.2, "target_ess": 0.5, "max_steps": 1000},
    "dynesty": {"nlive": 500, "sample": "auto", "bound": "multi"},  # dynesty's defaults
}


def _module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flatten(value):
    if isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) > 0:
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def one_pymc(path: Path, seed: int) -> dict:
    t0 = time.perf_counter()
    import pymc as pm

    model = _module(path).model
    load = time.perf_counter() - t0
    s = SETTINGS["pymc"]
    idata = pm.sample_smc(draws=s["draws"], chains=s["chains"], cores=s["cores"], model=model, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    lml = idata.sample_stats["log_marginal_likelihood"].values
    chains, stages = [], []
    # (chain, stage), NaN before the last stage; where the chains took different numbers of stages
    # PyMC keeps one list per chain instead (an object array of another shape)
    for row in (lml if lml.shape[0] == s["chains"] else lml.ravel()):
        flat = [float(v) for v in _flatten(row) if v is not None and math.isfinite(float(v))]
        chains.append(flat[-1])  # the last stage's is the chain's estimate
        stages.append(len(flat))
    # log Ẑ and its error bar from the chains are computed by the runner (`_chains_estimate`), so this
    # process imports nothing of mcd's
    return {"chains_log_z": chains, "load_seconds": load, "sample_seconds": time.perf_counter() - t0 - load,
            "stages": stages}


def one_blackjax(path: Path, seed: int) -> dict:
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp

    import blackjax
    from blackjax.smc import extend_params, resampling
    from mcd_cli.targets import load_target

    target = load_target(str(path))
    load = time.perf_counter() - t0
    s = SETTINGS["blackjax"]
    prior = target.initial_log_density
    params = extend_params({"step_size": s["step_size"], "inverse_mass_matrix": jnp.ones(target.dim),
                            "num_integration_steps": s["leapfrog"]})
    smc = blackjax.adaptive_tempered_smc(
        prior, lambda x: target.log_density(x) - prior(x), blackjax.hmc.build_kernel(), blackjax.hmc.init, params,
        resampling.systematic, s["target_ess"], num_mcmc_steps=s["moves"],
    )
    step = jax.jit(smc.step)
    key_init, key_run = jax.random.split(jax.random.key(seed))
    mean = jnp.asarray(target.initial_mean, jnp.float32)
    scale = jnp.asarray(target.initial_scale, jnp.float32)
    state = smc.init(mean + scale * jax.random.normal(key_init, (s["particles"], target.dim)))
    log_z, steps = 0.0, 0
    while float(state.tempering_param) < 1.0 and steps < s["max_steps"]:
        state, info = step(jax.random.fold_in(key_run, steps), state)
        log_z += float(info.log_likelihood_increment)
        steps += 1
    done = float(state.tempering_param) >= 1.0
    return {"log_z": log_z if done else None, "stderr": None, "steps": steps, "load_seconds": load,
            "sample_seconds": time.perf_counter() - t0 - load}


def one_dynesty(path: Path, seed: int) -> dict:
    t0 = time.perf_counter()
    import dynesty
    import jax
    import jax.numpy as jnp
    import numpy as np
    from scipy.special import ndtri

    from mcd_cli.targets import load_target

    target = load_target(str(path))
    load = time.perf_counter() - t0
    s = SETTINGS["dynesty"]
    mean = np.asarray(target.initial_mean, np.float64)
    scale = np.asarray(target.initial_scale, np.float64)
    loglik = jax.jit(lambda x: target.log_density(x) - target.initial_log_density(x))

    def log_likelihood(x):
        v = float(loglik(jnp.asarray(x, jnp.float32)))
        return v if math.isfinite(v) else -1e300

    sampler = dynesty.NestedSampler(log_likelihood, lambda u: mean + scale * ndtri(u), target.dim, nlive=s["nlive"],
                                    sample=s["sample"], bound=s["bound"], rstate=np.random.default_rng(seed))
    sampler.run_nested(print_progress=False)  # its default stopping rule
    res = sampler.results
    return {"log_z": float(res.logz[-1]), "stderr": float(res.logzerr[-1]), "iterations": int(res.niter),
            "likelihood_calls": int(np.sum(res.ncall)), "load_seconds": load,
            "sample_seconds": time.perf_counter() - t0 - load}


ONE = {"pymc": one_pymc, "blackjax": one_blackjax, "dynesty": one_dynesty}


def _run_cell(tool: str, path: Path, seed: int, core: int, timeout: float) -> dict:
    if tool == "mcd":
        cmd = [sys.executable, "-m", "mcd_cli", "estimate", str(path), "--seed", str(seed), "--json", "--quiet"]
    else:
        cmd = [sys.executable, __file__, "--one", tool, str(path), str(seed)]
    cmd = ["taskset", "-c", str(core), *cmd]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s", "wall_seconds": round(time.perf_counter() - t0, 3)}
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 3):  # mcd exits 3 for an unreliable estimate, which is still a result
        return {"failed": f"exit {done.returncode}: {done.stderr.strip()[-300:]}", "wall_seconds": round(wall, 3)}
    rec = json.loads(done.stdout.strip().splitlines()[-1])
    if tool == "pymc":
        rec.update(_chains_estimate(rec["chains_log_z"]))
    if tool == "mcd":
        rec = {"log_z": rec["log_z"], "stderr": rec["log_z_stderr"], "status": rec["status"],
               "reasons": rec.get("reasons"),
               "stages": [[st.get("role"), st.get("status"), st.get("seconds")] for st in (rec.get("policy") or {}).get("stages", [])],
               "start_seconds": rec.get("start_seconds")}
    return {**rec, "wall_seconds": round(wall, 3), "core": core}


def _chains_estimate(chains_log_z: list[float]) -> dict:
    """PyMC's chains as mcd's populations are combined: log of the mean of their Ẑ_j, and the
    delta-method SE from their spread (`stats.smc.population_spread`)."""
    import numpy as np
    from scipy.special import logsumexp

    from mcd_cli.stats.smc import population_spread

    log_z = np.asarray(chains_log_z, np.float64)
    return {"log_z": float(logsumexp(log_z) - math.log(log_z.size)), "stderr": population_spread(log_z)[0]}


def reference(path: Path) -> float:
    from mcd_cli.targets import load_target

    return float(load_target(str(path)).log_z)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--models", nargs="*", default=[*PYMC_MODELS, *PLAIN_MODELS])
    p.add_argument("--tools", nargs="*", default=["mcd", "pymc", "blackjax", "dynesty"])
    p.add_argument("--jobs", type=int, default=2, help="processes at a time, each pinned to its own core")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a run counts as failed")
    p.add_argument("--output", type=Path, default=RESULTS / "tools_cpu.json")
    p.add_argument("--one", nargs=3, metavar=("TOOL", "FILE", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        tool, path, seed = args.one
        print(json.dumps(ONE[tool](Path(path), int(seed))))
        return
    out = ResultFile(args.output, "tools", {"pymc_models": sorted(PYMC_MODELS), "plain_models": sorted(PLAIN_MODELS),
                                            "tools": SETTINGS})
    cells = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for model in args.models:
            kind, path = ("pymc", PYMC_MODELS[model]) if model in PYMC_MODELS else ("plain", PLAIN_MODELS[model])
            for tool in TOOLS_OF[kind]:
                key = f"{model}/{tool}/seed{seed}"
                if tool in args.tools and key not in out:
                    cells.append((key, model, kind, tool, path, seed))
    refs = {m: reference(path) for _, m, _, _, path, _ in cells}
    cores = sorted(os.sched_getaffinity(0))[: max(1, args.jobs)]
    free = list(cores)

    def work(cell):
        key, model, kind, tool, path, seed = cell
        core = free.pop(0)
        try:
            res = _run_cell(tool, path, seed, core, args.timeout)
        finally:
            free.append(core)
        ref = refs[model]
        res.update(model=model, kind=kind, tool=tool, seed=seed, reference_log_z=ref)
        if res.get("log_z") is not None:
            res["error"] = res["log_z"] - ref
        out.add(key, res)
        log(f"{key}: error {res.get('error')} se {res.get('stderr')} {res.get('status', '')} {res['wall_seconds']:.1f} s "
            f"{res.get('failed', '')}")

    with ThreadPoolExecutor(len(cores)) as pool:
        list(pool.map(work, cells))


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def render(data: dict) -> str:
    groups: dict = {}
    for cell in data["cells"].values():
        groups.setdefault((cell["kind"], cell["model"]), {}).setdefault(cell["tool"], []).append(cell)
    lines = ["# mcd's default beside PyMC's SMC, BlackJAX's SMC and dynesty", ""]
    for s in data["sessions"]:
        m = s["machine"]
        load = m.get("load_average_at_start")
        lines.append(f"- `{s['command']}`  \n  {m['cpu_model']}, {m['cpu_count']} cores, load average at start "
                     f"{', '.join(f'{v:.1f}' for v in load) if load else '?'}; JAX {m['jax']} ({m['backend']}); "
                     f"commit `{(m['git_commit'] or '')[:10]}`; {m['date']}")
    lines += ["", "Whole processes, one core each, two at a time; seconds include imports and compilation. "
              "Error bars: mcd's own SE, PyMC's from the spread of its 4 chains, dynesty's `logzerr`, "
              "BlackJAX none.", "",
              "| model | tool | runs | RMSE | mean error | error bar covers ±2 | median s | × mcd's time | mcd verdicts |",
              "|---|---|---|---|---|---|---|---|---|"]
    for (kind, model), tools in sorted(groups.items()):
        mcd_median = _median([c["wall_seconds"] for c in tools.get("mcd", []) if "failed" not in c])
        for tool in TOOLS_OF[kind]:
            runs = tools.get(tool, [])
            if not runs:
                continue
            good = [c for c in runs if c.get("error") is not None]
            rmse = math.sqrt(sum(c["error"] ** 2 for c in good) / len(good)) if good else None
            mean = sum(c["error"] for c in good) / len(good) if good else None
            with_bar = [c for c in good if c.get("stderr")]
            covers = f"{sum(abs(c['error']) <= 2 * c['stderr'] for c in with_bar)}/{len(with_bar)}" if with_bar else "—"
            med = _median([c["wall_seconds"] for c in runs if "failed" not in c])
            ratio = f"{med / mcd_median:.2f}" if med and mcd_median else "—"
            verdicts = ""
            if tool == "mcd":
                st = [c.get("status") for c in runs]
                verdicts = "/".join(str(st.count(s)) for s in ("ok", "warn", "unreliable")) + " ok/warn/unrel."
            failed = len(runs) - len(good)
            lines.append(
                f"| {model} | {tool} | {len(runs)}{f' ({failed} failed)' if failed else ''} | "
                f"{'—' if rmse is None else f'{rmse:.4f}'} | {'—' if mean is None else f'{mean:+.4f}'} | {covers} | "
                f"{'—' if med is None else f'{med:.1f}'} | {ratio} | {verdicts} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
