"""The paper's normalising-flow table: |log Ẑ| of ULA, UHA, ULA-MCD, UHA-MCD on `nice_mnist`.

The target is a NICE flow fitted to MNIST digits at size × size (log Z = 0 exactly; see
`targets/nice_mnist.py`). Each cell runs the command-line tool as a subprocess,

    mcd estimate nice_mnist --param size=S --sampler ula|uha --backward ais|mcd --steps K
        --iterations N --samples 4096 --resample 0 --seed SEED --json -q

(the paper estimates with 4,096 importance samples: `--resample 0`; without it a run that fixes
the method is SMC on the kernels, resampling at ESS/N 0.5 with HMC moves) and stores its JSON
output, the wall time and the absolute error |log Ẑ − 0| under the key `size{S}/{estimator}/seed{SEED}`. Cells are written
atomically one by one into `--output`; a rerun of the same command skips the cells already there.
A failed run (training diverged, all weights non-finite) is stored as such with its error line.
`--render` only rewrites the markdown table beside the JSON file: mean ± standard error of |log Ẑ|
over seeds beside the paper's numbers (which report one MCD column; ours has both MCD variants).

    taskset -c 1 nice -n 10 python benchmarks/nice_tables.py --sizes 7 --seeds 0 1 2
    python benchmarks/nice_tables.py --render
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path


from common import RESULTS, ResultFile, log  # noqa: E402

ESTIMATORS = ("ula", "uha", "ula-mcd", "uha-mcd")
# Doucet et al. (2022), appendix table "log Z estimate absolute error for Normalizing flows".
PAPER = {7: {"ula": 0.14, "uha": 0.17, "mcd": 0.11},
         14: {"ula": 13.24, "uha": 15.04, "mcd": 6.25},
         28: {"ula": 141.29, "uha": 82.16, "mcd": 23.10}}


def command(size: int, estimator: str, seed: int, args) -> list[str]:
    """The `mcd estimate` command line of one cell."""
    sampler, _, mcd = estimator.partition("-")
    return ["mcd", "estimate", "nice_mnist", "--param", f"size={size}", "--sampler", sampler,
            "--backward", "mcd" if mcd else "ais", "--steps", str(args.steps),
            "--iterations", str(args.iterations), "--samples", str(args.samples),
            "--resample", f"{args.resample:g}", "--seed", str(seed), "--json", "-q"]


def run_cell(cmd: list[str], timeout: float) -> dict:
    """Runs one estimate; returns its log Ẑ, standard error, |error|, diagnostics and seconds."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s", "command": " ".join(cmd)}
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        error = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return {"failed": error, "returncode": proc.returncode, "seconds": seconds,
                "command": " ".join(cmd)}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"log_z": result["log_z"], "log_z_stderr": result.get("log_z_stderr"),
            "abs_error": abs(result["log_z"]), "seconds": seconds, "command": " ".join(cmd),
            "result": result}


def mean_se(values: list[float]) -> str:
    """`mean ± standard error` over seeds (just the value for one seed)."""
    if not values:
        return "–"
    m = sum(values) / len(values)
    if len(values) == 1:
        return f"{m:.3g} (1 seed)"
    se = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))
    return f"{m:.3g} ± {se:.2g}"


def _se(value) -> str:
    """A run's standard error; the tool leaves it out (None) when k̂ says it is meaningless."""
    return "n/a" if value is None else f"{value:.3f}"


def render(data: dict) -> str:
    """The markdown table: |log Ẑ| per size and estimator, ours beside the paper's."""
    settings = data["settings"]
    machine = data["sessions"][0]["machine"] if data["sessions"] else {}
    resample = settings.get("resample") or 0  # files made before the option: importance sampling
    draws = (f"particles of SMC (resampling at ESS/N {resample:g}, HMC moves)" if resample
             else "importance samples")
    lines = [
        "# NICE flow targets (`nice_mnist`): |log Ẑ|, true log Z = 0", "",
        f"K = {settings['steps']}, {settings['iterations']} training iterations, "
        f"{settings['samples']} {draws}; mean ± standard error over seeds "
        f"(seeds run: column n). Machine: {machine.get('cpu_model', '?')}, "
        f"{machine.get('cpu_count', '?')} cores ({machine.get('cpu_affinity', '?')} usable), "
        f"JAX {machine.get('jax', '?')} ({machine.get('backend', '?')}), load average at start "
        f"{', '.join(f'{x:.1f}' for x in machine.get('load_average_at_start') or [])}. "
        "k̂ is the Pareto diagnostic of the importance weights (above 0.7 the standard error is "
        "not trustworthy; n/a: the tool withheld it). The paper reports one MCD column; both MCD "
        "rows sit beside it.", "",
        "| size (d) | estimator | ours: abs(log Ẑ) | n | failed | per seed: log Ẑ ± its standard error (k̂) "
        "| ELBO | mean seconds | paper |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cells = data["cells"]
    for size in sorted({int(k.split("/")[0][4:]) for k in cells}):
        for est in ESTIMATORS:
            runs = [v for k, v in cells.items() if k.startswith(f"size{size}/{est}/")]
            if not runs:
                continue
            ok = [r for r in runs if "abs_error" in r]
            secs = [r["seconds"] for r in runs if "seconds" in r]
            paper = PAPER.get(size, {}).get("mcd" if est.endswith("mcd") else est)
            per_seed = "; ".join(
                f"{r['log_z']:.3f} ± {_se(r['log_z_stderr'])} ({r['result']['pareto_k']:.2f})" for r in ok
            )
            elbo = mean_se([r["result"]["elbo"] for r in ok]).replace(" (1 seed)", "")
            lines.append(
                f"| {size}×{size} ({size * size}) | {est} | {mean_se([r['abs_error'] for r in ok])} | "
                f"{len(ok)} | {len(runs) - len(ok)} | {per_seed or '–'} | {elbo} | "
                f"{(sum(secs) / len(secs)) if secs else float('nan'):.0f} | "
                f"{paper if paper is not None else '–'} |"
            )
    failures = [f"- `{k}`: {v['failed']}" for k, v in cells.items() if "failed" in v]
    if failures:
        lines += ["", "Failed runs:", *failures]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[7])
    parser.add_argument("--estimators", nargs="+", choices=ESTIMATORS, default=list(ESTIMATORS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--resample", type=float, default=0.0,
                        help="0: the paper's importance sampling; above 0: SMC on the kernels (the tool's own fixed method)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per cell")
    parser.add_argument("--output", type=Path, default=RESULTS / "nice_cpu.json")
    parser.add_argument("--render", action="store_true", help="only rewrite the markdown table")
    args = parser.parse_args(argv)
    markdown = args.output.with_suffix(".md")
    if args.render:
        markdown.write_text(render(json.loads(args.output.read_text())))
        return
    settings = {"steps": args.steps, "iterations": args.iterations, "samples": args.samples, "resample": args.resample}
    results = ResultFile(args.output, "nice_tables", settings)
    for seed in args.seeds:
        for size in args.sizes:
            for est in args.estimators:
                key = f"size{size}/{est}/seed{seed}"
                if key in results:
                    continue
                log(f"{key} ...")
                cell = run_cell(command(size, est, seed, args), args.timeout)
                results.add(key, cell)
                log(f"{key}: {cell.get('log_z', cell.get('failed'))} ({cell.get('seconds', 0):.0f} s)")
                markdown.write_text(render(results.data))
