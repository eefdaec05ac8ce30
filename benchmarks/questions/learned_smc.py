"""Trained MCD kernels inside SMC against adaptive tempered SMC, at equal wall time including training.

For each target, dimension and seed (seeds outermost, so a partial run covers every target), runs
the command line in this process (`mcd estimate ... --json`, the user's code path, compilation
included in the seconds) for each configuration:

- `adaptive-N`: adaptive tempered SMC with no training, `--backward ais --iterations 0
  --resample 0.5 --refine hmc --schedule adaptive --samples N`;
- `mcd-smc-T`: ULA-MCD (the defaults: K = 64, `--init auto`, `--step-size auto`, `--batch-size
  auto`) trained for T iterations, then estimated with SMC on its own fixed schedule: `--resample
  0.5 --refine hmc --samples N` (the record's `log_z_is` is the same kernels' importance-sampling
  estimate, reported beside).

The table (`--render`) gives, per target and configuration: the median total seconds (start,
training and estimation), the RMSE of log Ẑ over seeds, the verdicts, and the ±2 SE coverage; the
comparison at equal wall time pairs each `mcd-smc` row with the adaptive row of nearest median
seconds.

    python benchmarks/learned_smc.py --targets gmm8 gauss_narrow --dim 200 --seeds 3 \\
        --output benchmarks/results/learned_smc_gpu.json
    python benchmarks/learned_smc.py --render --output benchmarks/results/learned_smc_gpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path


import numpy as np  # noqa: E402

from common import RESULTS, ResultFile, log, write_rendered  # noqa: E402

OUTPUT = RESULTS / "learned_smc.json"


def options(config: str, samples: int = 0) -> list[str]:
    kind, _, size = config.rpartition("-")
    if kind == "adaptive":
        return ["--backward", "ais", "--iterations", "0", "--resample", "0.5", "--refine", "hmc",
                "--schedule", "adaptive", "--samples", size]
    if kind == "mcd-smc":
        return ["--iterations", size, "--resample", "0.5", "--refine", "hmc", "--samples", str(samples)]
    raise SystemExit(f"unknown configuration {config!r}: use adaptive-N or mcd-smc-T")


def one_run(target: str, dim: int, seed: int, config: str, samples: int) -> dict:
    from typer.testing import CliRunner

    from mcd_cli.cli import app

    argv = ["estimate", target, "--param", f"dim={dim}", "--seed", str(seed), "--json", "--quiet",
            *options(config, samples)]
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, argv)
    seconds = time.perf_counter() - t0
    if result.exit_code not in (0, 3):
        return {"failed": result.exit_code, "message": (result.stderr or "").strip()[-300:], "seconds": seconds}
    rec = json.loads(result.stdout.strip().splitlines()[-1])
    keep = ("log_z", "log_z_stderr", "log_z_stderr_method", "log_z_is", "error", "status", "steps",
            "iterations_run", "start_seconds", "train_seconds", "estimate_seconds", "pareto_k", "device")
    return {**{k: rec.get(k) for k in keep}, "seconds": seconds, "command": "mcd " + " ".join(argv)}


def render(data: dict) -> str:
    groups: dict = {}
    for key, cell in data["cells"].items():
        target, dim, config, _ = key.split("/")
        groups.setdefault((target, dim), {}).setdefault(config, []).append(cell)
    lines = ["# Trained MCD kernels inside SMC against adaptive tempered SMC", ""]
    for s in data["sessions"]:
        m = s["machine"]
        lines.append(f"- `{s['command']}`  \n  {m['cpu_model']}, {m['cpu_count']} cores; JAX {m['jax']} "
                     f"({m['backend']}); commit `{(m['git_commit'] or '')[:10]}`; {m['date']}")
    lines += ["", f"Settings: `{json.dumps(data['settings'])}`", "",
              "Seconds are the whole command's wall time in the process (start, training, estimation, "
              "compilation included).", "",
              "| target | d | configuration | seeds | median s | RMSE log Ẑ | median abs error | ok/warn/unrel. "
              "| ±2 SE coverage | RMSE log Ẑ (IS, same kernels) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for (target, dim), configs in sorted(groups.items()):
        for config, cells in sorted(configs.items(), key=lambda kv: np.median([c["seconds"] for c in kv[1]])):
            done = [c for c in cells if "failed" not in c]
            errs = [c["error"] for c in done if c.get("error") is not None]
            rmse = math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else float("nan")
            counts = "/".join(str(sum(1 for c in done if c.get("status") == v)) for v in ("ok", "warn", "unreliable"))
            cov = sum(1 for c in done if c.get("log_z_stderr") and abs(c["error"]) <= 2 * c["log_z_stderr"])
            is_errs = [c["log_z_is"] - (c["log_z"] - c["error"]) for c in done if c.get("log_z_is") is not None]
            is_rmse = f"{math.sqrt(sum(e * e for e in is_errs) / len(is_errs)):.3f}" if is_errs else "—"
            lines.append(
                f"| {target} | {dim[1:]} | {config} | {len(cells)} | {np.median([c['seconds'] for c in cells]):.1f} | "
                f"{rmse:.3f} | {np.median(np.abs(errs)) if errs else float('nan'):.3f} | {counts} | {cov}/{len(done)} | {is_rmse} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["gmm8", "gauss_narrow"])
    parser.add_argument("--dim", type=int, nargs="+", default=[200])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--configs", nargs="+", default=["adaptive-16384", "mcd-smc-1000"])
    parser.add_argument("--samples", type=int, default=16384, help="particles of the mcd-smc estimates")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--render", action="store_true")
    args = parser.parse_args(argv)
    if args.render:
        write_rendered(args.output, render(json.loads(args.output.read_text())))
        return
    for config in args.configs:
        options(config)
    results = ResultFile(args.output, "learned_smc", {"samples": args.samples, "configs": args.configs})
    for seed in range(args.seeds):
        for dim in args.dim:
            for target in args.targets:
                for config in args.configs:
                    key = f"{target}/d{dim}/{config}/seed{seed}"
                    if key in results:
                        continue
                    cell = one_run(target, dim, seed, config, args.samples)
                    log(f"{key}: {({k: v for k, v in cell.items() if k != 'command'})}")
                    results.add(key, cell)
