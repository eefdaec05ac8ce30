"""Per-datum evidence at scale: one amortised MCD sampler for all the data against per-datum SMC.

Issue "The paper's command", item 3. For a conditional target and a number of data N, two whole
processes, as a user would run them:

* `policy`: `mcd estimate T --data-index 0:N --json` — the default policy per datum (adaptive
  tempered SMC from each datum's `initial(x)`, its effort measured on pilots over the first data);
* `amortised`: `mcd estimate T --data-index 0:N --json --amortise --sampler ula --backward mcd
  --steps K --iterations I --resample 0.5 --refine none --step-size S` — one ULA-MCD sampler trained
  for all the data (its training counted in the wall time), then SMC with the trained kernels per
  datum (the VAE table's "ULA-MCD+resampling").

Each cell records the process's wall seconds, the summary line's training and estimation seconds,
and every datum's log Ẑ, standard error and verdict, so that the two are compared at their
accuracy (mean log p̂(x) and its Monte Carlo error √(Σ se²)/N) as well as their time. Targets:
`vae` (the bundled VAE, `targets/vae_mnist.py`, its 1,000 held-out digits) and `linear` (a
linear-Gaussian model, z ∈ R², x ∈ R³, whose log p(x) is exact, data drawn from it with a fixed
seed: each datum's error is recorded too). Cells are written as they finish (resumable).

    python benchmarks/run.py vae --module perdatum_scale --targets linear vae --data 10 100 \\
        --out benchmarks/results/raw/perdatum_scale_cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from common import REPO, RESULTS, command_line, log, machine, write_json  # noqa: E402
from perdatum_memory import TARGET as LINEAR  # the same linear-Gaussian model, z ∈ R², x ∈ R³

W = np.array([[1.0, 0.5], [-0.3, 2.0], [0.7, -1.0]])  # perdatum_memory.TARGET's, for the exact log p(x) in float64
LINEAR_DATA = 1000


def linear_files(folder: Path) -> tuple[Path, Path]:
    """The linear-Gaussian target file and its data (LINEAR_DATA rows drawn from the model, seed 0)."""
    target = folder / "linear_gaussian.py"
    target.write_text(textwrap.dedent(LINEAR))
    rng = np.random.default_rng(0)
    z = rng.normal(size=(LINEAR_DATA, 2))
    x = z @ W.T + 0.5 * rng.normal(size=(LINEAR_DATA, 3))
    data = folder / "linear_gaussian.npz"
    np.savez(data, data=x.astype(np.float32))
    return target, data


def linear_log_z(x: np.ndarray) -> np.ndarray:
    """Exact log p(x) of the linear-Gaussian model, x ~ N(0, W Wᵀ + 0.25 I), in float64."""
    cov = W @ W.T + 0.25 * np.eye(3)
    _, logdet = np.linalg.slogdet(cov)
    quad = np.einsum("ni,ij,nj->n", x, np.linalg.inv(cov), x)
    return -0.5 * (quad + logdet + 3 * np.log(2 * np.pi))


def amortised_options(target: str, args) -> list[str]:
    step = "0.002" if target == "vae" else "0.05"
    return ["--amortise", "--sampler", "ula", "--backward", "mcd", "--steps", str(args.steps),
            "--iterations", str(args.iterations), "--resample", "0.5", "--refine", "none", "--step-size", step]


def run_cell(command: list[str], timeout: float) -> dict:
    """Run one `mcd estimate` process; its wall seconds, per-datum lines and summary line."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s", "wall_seconds": round(time.perf_counter() - t0, 3)}
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        return {"failed": f"exit {done.returncode}: {done.stderr.strip()[-300:]}", "wall_seconds": round(wall, 3)}
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    data = [line for line in lines if "datum" in line]
    summary = next((line for line in reversed(lines) if "datum" not in line), {})
    return {"wall_seconds": round(wall, 3), "summary": summary,
            "data": [{"datum": d["datum"], "log_z": d.get("log_z"), "se": d.get("log_z_stderr"),
                      "status": d.get("status")} for d in data]}


def describe(cell: dict, exact: "np.ndarray | None") -> dict:
    """Mean log Ẑ, its Monte Carlo error √(Σ se²)/N, verdict counts, seconds per datum; the errors
    against the exact log p(x) where known."""
    rows = cell.get("data", [])
    if not rows:
        return {}
    log_z = np.array([r["log_z"] if r["log_z"] is not None else np.nan for r in rows], float)
    se = np.array([r["se"] if r["se"] is not None else np.nan for r in rows], float)
    out = {"n": len(rows), "mean_log_z": float(np.nanmean(log_z)),
           "mc_error": float(np.sqrt(np.nansum(se**2)) / len(rows)),
           "statuses": {s: sum(r["status"] == s for r in rows) for s in ("ok", "warn", "unreliable", "failed")},
           "seconds_per_datum": cell["wall_seconds"] / len(rows)}
    if exact is not None:
        err = log_z - exact[[r["datum"] for r in rows]]
        out.update(rmse=float(np.sqrt(np.nanmean(err**2))), mean_error=float(np.nanmean(err)),
                   covered=int(np.sum(np.abs(err) <= 2 * se)))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=["linear", "vae"], choices=["linear", "vae"])
    parser.add_argument("--data", type=int, nargs="+", default=[10, 100, 1000], help="numbers of data N")
    parser.add_argument("--methods", nargs="+", default=["policy", "amortised"], choices=["policy", "amortised"])
    parser.add_argument("--steps", type=int, default=64, help="amortised: K")
    parser.add_argument("--iterations", type=int, default=150, help="amortised: training updates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=6 * 3600)
    parser.add_argument("--out", type=Path, default=RESULTS / "perdatum_scale_cpu.json")
    args = parser.parse_args(argv)
    result = json.loads(args.out.read_text()) if args.out.exists() else {
        "benchmark": "perdatum_scale", "settings": {"steps": args.steps, "iterations": args.iterations,
                                                   "seed": args.seed}, "cells": {}, "sessions": []}
    result["sessions"].append({"command": command_line(), "machine": machine()})
    with tempfile.TemporaryDirectory() as tmp:
        linear_target, linear_data = linear_files(Path(tmp))
        exact = linear_log_z(np.load(linear_data)["data"].astype(np.float64))
        for target in args.targets:
            for n in sorted(args.data):
                for method in args.methods:
                    key = f"{target}/{method}/N{n}"
                    if key in result["cells"] and "failed" not in result["cells"][key]:
                        continue
                    file = [str(linear_target), "--data", str(linear_data)] if target == "linear" else \
                        [str(REPO / "targets" / "vae_mnist.py")]
                    command = [sys.executable, "-m", "mcd_cli", "estimate", *file, "--data-index", f"0:{n}",
                               "--seed", str(args.seed), "--json", "-q",
                               *(amortised_options(target, args) if method == "amortised" else [])]
                    cell = run_cell(command, args.timeout)
                    cell["command"] = " ".join(command[1:]).replace(tmp, "TMP")
                    cell["described"] = describe(cell, exact if target == "linear" else None)
                    result["cells"][key] = cell
                    write_json(args.out, result)
                    d = cell["described"]
                    log(f"{key}: {cell.get('failed', '')} wall {cell['wall_seconds']:.1f} s"
                        + (f", mean {d['mean_log_z']:.3f} ± {d['mc_error']:.3f}, {d['statuses']}" if d else "")
                        + (f", rmse {d['rmse']:.4f}, covered {d['covered']}/{d['n']}" if d and "rmse" in d else ""))


if __name__ == "__main__":
    main()
