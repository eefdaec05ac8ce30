"""How often the verdict of `mcd_cli.stats` is right, on weights whose truth is known.

For each family of log weights and each N, over `--runs` seeds (seed s draws from
`np.random.default_rng(s)`):

- `lognormal` (log w ~ N(0, σ²), log Z = σ²/2): how many runs are ok / warn / unreliable, and,
  among the ok and among the warn runs, how many miss log Z by more than 4 delta SEs (plus the
  SE²/2 bias of log Ẑ): the SE's honesty where the verdict vouches for it;
- `pareto` (w = U^(−1/α), α < 1: infinite mean): how many runs are trusted (should be none);
- `lower30`, `zero30` (30 % of the particles at log w = −1000 or at zero weight, the rest
  log-normal σ = 0.5 or 1): how many runs are flagged although the estimate is fine;
- `disagree` (R honest runs, log-normal σ = 0.5, N = 1000): how often `stderr_disagree` fires
  (nominal: 4.55 %);
- `se_of_se` (log-normal σ, N = 2000): the spread of the delta SE over runs beside the mean of
  its stated uncertainty `delta_stderr_uncertainty`.

Usage (numbers quoted in src/mcd_cli/stats.py and tests/test_stats.py):

    taskset -c 1 nice -n 10 python benchmarks/stats_calibration.py --runs 1000 \\
        --output benchmarks/results/stats_calibration.json
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np


from common import RESULTS, ResultFile, log  # noqa: E402

from mcd_cli import stats  # noqa: E402

SIZES = (100, 300, 1000, 2000, 5000, 20000)
SIGMAS = (0.1, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
ALPHAS = (0.5, 0.7, 0.8, 0.9, 0.99)


def lognormal(runs: int, n: int, sigma: float) -> dict:
    counts = {"ok": 0, "warn": 0, "unreliable": 0, "ok_miss_4se": 0, "warn_miss_4se": 0}
    for s in range(runs):
        e = stats.summarize(np.random.default_rng(s).normal(size=n) * sigma)
        counts[e.status.value] += 1
        if e.trustworthy:
            se = e.log_z_stderr
            counts[f"{e.status.value}_miss_4se"] += abs(e.log_z - sigma**2 / 2) > 4 * se + se**2 / 2
    return counts


def pareto(runs: int, n: int, alpha: float) -> dict:
    trusted = sum(
        stats.summarize(-np.log(np.random.default_rng(s).uniform(size=n)) / alpha).trustworthy
        for s in range(runs)
    )
    return {"trusted": trusted}


def lower(runs: int, n: int, sigma: float, low: float) -> dict:
    flagged = 0
    for s in range(runs):
        rng = np.random.default_rng(s)
        lw = rng.normal(size=n) * sigma
        lw[rng.uniform(size=n) < 0.3] = low
        flagged += not stats.summarize(lw).trustworthy
    return {"unreliable": flagged}


def disagree(runs: int, repeats: int) -> dict:
    flags = 0
    for s in range(runs):
        rng = np.random.default_rng(s)
        es = [stats.summarize(rng.normal(size=1000) * 0.5) for _ in range(repeats)]
        flags += bool(stats.combine_estimates(es).stderr_disagree)
    return {"flagged": flags}


def se_of_se(runs: int, sigma: float) -> dict:
    es = [stats.summarize(np.random.default_rng(s).normal(size=2000) * sigma) for s in range(runs)]
    return {
        "sd_of_delta_se": float(np.std([e.delta_stderr for e in es], ddof=1)),
        "mean_uncertainty": float(np.mean([e.delta_stderr_uncertainty for e in es])),
    }


def render(data: dict) -> str:
    cells, runs = data["cells"], data["settings"]["runs"]
    out = [f"# Calibration of the stats verdict ({runs} runs per cell)", ""]
    out += ["## Log-normal weights: ok (misses) / warn (misses) / unreliable", ""]
    out += ["A miss: |log Ẑ − log Z| > 4 SE + SE²/2.", ""]
    out += ["| N | " + " | ".join(f"σ = {s}" for s in SIGMAS) + " |", "|---" * (len(SIGMAS) + 1) + "|"]
    for n in SIZES:
        row = [cells[f"lognormal/N{n}/sigma{s}"] for s in SIGMAS]
        out.append(f"| {n} | " + " | ".join(
            f"{c['ok']} ({c['ok_miss_4se']}) / {c['warn']} ({c['warn_miss_4se']}) / {c['unreliable']}"
            for c in row) + " |")
    out += ["", "## Pareto weights, α < 1 (infinite mean): runs trusted", ""]
    out += ["| N | " + " | ".join(f"α = {a}" for a in ALPHAS) + " |", "|---" * (len(ALPHAS) + 1) + "|"]
    for n in SIZES:
        out.append(f"| {n} | " + " | ".join(str(cells[f"pareto/N{n}/alpha{a}"]["trusted"]) for a in ALPHAS) + " |")
    out += ["", "## 30 % of particles at negligible weight: runs flagged unreliable", ""]
    out += ["| N | −1000, σ 0.5 | −1000, σ 1 | zero, σ 0.5 | zero, σ 1 |", "|---|---|---|---|---|"]
    for n in SIZES:
        keys = [f"{kind}/N{n}/sigma{s}" for kind in ("lower30", "zero30") for s in (0.5, 1.0)]
        out.append(f"| {n} | " + " | ".join(str(cells[k]["unreliable"]) for k in keys) + " |")
    out += ["", "## Replicate vs delta SE, honest runs: flag rate (nominal 4.55 %)", ""]
    out += ["| R | flagged |", "|---|---|"]
    for r in (2, 3, 5, 10):
        out.append(f"| {r} | {cells[f'disagree/R{r}']['flagged'] / runs:.1%} |")
    out += ["", "## Uncertainty of the delta SE (N = 2000)", ""]
    out += ["| σ | sd of delta SE over runs | mean stated uncertainty |", "|---|---|---|"]
    for s in (0.5, 0.8, 1.0):
        c = cells[f"se_of_se/sigma{s}"]
        out.append(f"| {s} | {c['sd_of_delta_se']:.3g} | {c['mean_uncertainty']:.3g} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=RESULTS / "stats_calibration.json")
    args = parser.parse_args(argv)
    runs = args.runs
    results = ResultFile(args.output, "stats_calibration", {"runs": runs})
    jobs = {}
    for n in SIZES:
        for s in SIGMAS:
            jobs[f"lognormal/N{n}/sigma{s}"] = lambda n=n, s=s: lognormal(runs, n, s)
        for a in ALPHAS:
            jobs[f"pareto/N{n}/alpha{a}"] = lambda n=n, a=a: pareto(runs, n, a)
        for s in (0.5, 1.0):
            jobs[f"lower30/N{n}/sigma{s}"] = lambda n=n, s=s: lower(runs, n, s, -1000.0)
            jobs[f"zero30/N{n}/sigma{s}"] = lambda n=n, s=s: lower(runs, n, s, -math.inf)
    for r in (2, 3, 5, 10):
        jobs[f"disagree/R{r}"] = lambda r=r: disagree(runs, r)
    for s in (0.5, 0.8, 1.0):
        jobs[f"se_of_se/sigma{s}"] = lambda s=s: se_of_se(runs, s)
    for key, job in jobs.items():
        if key not in results:
            log(key)
            results.add(key, job())
    args.output.with_suffix(".md").write_text(render(results.data))
