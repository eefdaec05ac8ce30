"""Does the tail's size, beside its shape, tell a right answer from a wrong one? (issue "Believed", item 3)

The verdict reads the final weights' tail by its shape: the mean k̂ of the populations above 0.5
`warn`, above the limit min(1 − 1/log10 N, 0.7) `unreliable`. On textbook models many runs warn at
k̄ 0.5–0.6 with ESS/N up to 0.99 and errors within their SE. Two candidates read the size too:

- `shortfall`: warn in (0.5, limit] only when the share of Ẑ the sample's tail typically misses,
  δ = `stats.psis.tail_shortfall` (the fitted GPD's excess beyond the 1 − 1/N quantile), is more
  than one standard error (`stats.smc.TAIL_SHORTFALL_SE = 1`);
- `ess_gate`: warn in (0.5, limit] only when the populations' mean ESS/N is below 0.9.

Each is measured beside today's rule (`k_mean`) on the same runs: weights of known tail (P = 4
populations of N = 4,096; the log Z of each family known; SE the delta method's on all P·N weights,
the genealogy SE of runs without resampling), in three families:

- `gpd`: w = 1 + X, X generalised Pareto of shape k, scale 1: a pure tail whose size is fixed by k;
- `rare`: a log-normal body (σ = 0.1) and, in 0.2 % of the draws, w = 1 + 3X: a rare heavy
  component, the risk the size may hide;
- `minor`: the same body and, in 1 % of the draws, w = 1 + 0.5X: a small, frequent tail.

For each rule: the share of runs it lets through (`ok` by the tail) and the share of those whose
log Ẑ is within 2 SE of log Z. The runs of the calibration (`--calibration FILE ...`, result files of
`calibration.py`) are judged the same way where their cells hold what the rule reads (ESS/N for
`ess_gate`; `tail_shortfall_populations` and the SE for `shortfall`): a run with a reference log Z
counts as right when within 2 SE, and each rule's `ok` runs are counted, with how many cover.

Usage:

    python benchmarks/run.py calibration --module tail_scale --runs 300 \\
        --output benchmarks/results/raw/tail_scale.json --calibration \\
        benchmarks/results/raw/calibration_corpus_127d537_cpu.json \\
        benchmarks/results/raw/calibration_corpus_42b1969_cpu.json \\
        benchmarks/results/raw/calibration_corpus_42b1969_s14_cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np

from common import RESULTS, ResultFile, log  # noqa: E402

from mcd_cli.stats import pareto_tail  # noqa: E402
from mcd_cli.stats.psis import PARETO_K_WARN, pareto_k_limit  # noqa: E402

TAILS = (0.4, 0.5, 0.55, 0.6, 0.65, 0.7)
FAMILIES = {"gpd": (1.0, 1.0), "rare": (0.002, 3.0), "minor": (0.01, 0.5)}  # (share of draws, tail scale)
BODY_SIGMA = 0.1
ESS_GATE = 0.9
SHORTFALL_SE = 1.0
RULES = ("k_mean", "shortfall", "ess_gate")


def rules(ks: list, shortfalls: list, ess: list, se: float, limit: float) -> dict:
    """Whether each rule lets the run through (`ok` by its tail) given the populations' k̂, δ and
    ESS/N and the run's SE."""
    kbar = float(np.mean([max(k, 0.0) for k in ks]))
    if kbar > limit:
        return {r: False for r in RULES}
    heavy = kbar > PARETO_K_WARN
    delta = float(np.mean(shortfalls)) if shortfalls and all(d is not None for d in shortfalls) else math.inf
    return {
        "k_mean": not heavy,
        "shortfall": not heavy or (se is not None and delta <= SHORTFALL_SE * se),
        "ess_gate": not heavy or (bool(ess) and float(np.mean(ess)) >= ESS_GATE),
    }


def draw(rng: np.random.Generator, family: str, k: float, size: tuple) -> tuple[np.ndarray, float]:
    """Weights of `family` with tail index `k` and the log of their mean."""
    gpd = np.expm1(-k * np.log(rng.uniform(size=size))) / k  # generalised Pareto, scale 1: mean 1/(1 − k)
    if family == "gpd":
        return 1.0 + gpd, math.log(1.0 + 1.0 / (1.0 - k))
    share, scale = FAMILIES[family]
    body = np.exp(rng.normal(0.0, BODY_SIGMA, size=size))
    w = np.where(rng.uniform(size=size) < share, 1.0 + scale * gpd, body)
    return w, math.log((1.0 - share) * math.exp(BODY_SIGMA**2 / 2) + share * (1.0 + scale / (1.0 - k)))


def cell(runs: int, family: str, k: float, populations: int, n: int) -> dict:
    counts = {"runs": runs, "cover_all": 0, "mean_k": 0.0, "mean_ess": 0.0, "median_ratio": None}
    for r in RULES:
        counts[f"{r}_ok"] = counts[f"cover_{r}_ok"] = 0
    ratios = []
    for s in range(runs):
        rng = np.random.default_rng(s)
        w, log_z = draw(rng, family, k, (populations, n))
        fits = [pareto_tail(np.log(row)) for row in w]
        ks, deltas = [f[0] for f in fits], [f[1] for f in fits]
        ess = [float(row.sum() ** 2 / (row**2).sum() / n) for row in w]
        flat = w.ravel()
        se = math.sqrt(max(float((flat**2).sum() / flat.sum() ** 2) - 1.0 / flat.size, 0.0))
        covers = abs(math.log(float(flat.mean())) - log_z) <= 2.0 * se
        counts["cover_all"] += covers
        counts["mean_k"] += float(np.mean(ks)) / runs
        counts["mean_ess"] += float(np.mean(ess)) / runs
        ratios.append(float(np.mean(deltas)) / se if se > 0 else math.inf)
        for rule, ok in rules(ks, deltas, ess, se, pareto_k_limit(n)).items():
            counts[f"{rule}_ok"] += ok
            counts[f"cover_{rule}_ok"] += ok and covers
    counts["median_ratio"] = float(np.median(ratios))
    return counts


def _cells(path: str) -> dict:
    """A calibration result file's data; where the raw file is not in this checkout (results/raw is
    not kept), its cells as converted into results/calibration.jsonl (`run.py --convert`)."""
    if Path(path).exists():
        return json.loads(Path(path).read_text())
    cells = {}
    with open(RESULTS.parent / "calibration.jsonl") as lines:
        for line in lines:
            row = json.loads(line)
            if row.get("source_file") == str(path) and "cell" in row:
                c = row["cell"]
                cells[f"{c.get('target')}@{c.get('seed')}"] = c
    if not cells:
        raise SystemExit(f"{path}: no such file, and no cells from it in results/calibration.jsonl")
    return {"cells": cells}


def _tail_reason(text: str) -> bool:
    """Whether a recorded reason is the mean-k̂ rule's (`pareto_k_mean_*`, or one population's
    `pareto_k_warn`/`pareto_k_high`), which the rules compared here replace; the outlier test's
    ("beyond the … the other populations' tail") and every other reason stay."""
    return "Pareto k̂" in text and "beyond" not in text


def judge_calibration(paths: list) -> dict:
    """Each rule on the calibration's runs that have a reference and an SE (the tail rule changes
    `warn` to `ok` and back; an `unreliable` run has no SE and stays so): `ok` runs and how many
    cover, per rule, beside the recorded status."""
    out = {}
    for path in paths:
        data = _cells(path)
        tally = {r: {"ok": 0, "cover": 0} for r in (*RULES, "recorded")}
        judged = 0
        for c in data["cells"].values():
            if c.get("log_z_stderr") is None or c.get("error") is None or not c.get("pareto_k_populations"):
                continue
            judged += 1
            covers = abs(c["error"]) <= 2.0 * c["log_z_stderr"]
            ks = [k for k in c["pareto_k_populations"] if k is not None and (math.isfinite(k) or k == -math.inf)]
            other = [r for r in (c.get("reasons") or []) if not _tail_reason(r)]  # reasons the tail rule does not give
            sizes = re.findall(r"populations of (\d+)", ((c.get("policy") or [{}])[-1].get("method") or ""))
            population = int(sizes[-1]) if sizes else 4096
            verdicts = rules(ks, c.get("tail_shortfall_populations") or [], c.get("final_ess") or [],
                             c["log_z_stderr"], pareto_k_limit(population))
            verdicts["recorded"] = c["status"] == "ok"
            for rule, ok in verdicts.items():
                ok = ok and (rule == "recorded" or not other)
                tally[rule]["ok"] += ok
                tally[rule]["cover"] += ok and covers
        out[str(path)] = {"judged": judged, **tally}
    return out


def render(data: dict) -> str:
    s = data["settings"]
    out = [f"# Tail size beside tail shape ({s['runs']} runs per cell, {s['populations']} populations of {s['population']})", ""]
    out += ["`ok`: the share of runs each rule lets through; `cover`: of those, the share within 2 SE of log Z. "
            "`k_mean`: today's rule (mean k̂ > 0.5 warns); `shortfall`: warns in (0.5, limit] only where δ > SE; "
            f"`ess_gate`: only where mean ESS/N < {ESS_GATE}. δ/SE: the median ratio.", ""]
    out += ["| family | k | k̄ | ESS/N | cover (all) | δ/SE | k_mean ok | cover | shortfall ok | cover | ess_gate ok | cover |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    share = lambda a, b: f"{a / b:.0%}" if b else "—"  # noqa: E731
    for key, c in data["cells"].items():
        family, k = key.split("/")
        n = c["runs"]
        row = [family, k[1:], f"{c['mean_k']:.2f}", f"{c['mean_ess']:.3f}", share(c["cover_all"], n), f"{c['median_ratio']:.2f}"]
        for r in RULES:
            row += [share(c[f"{r}_ok"], n), share(c[f"cover_{r}_ok"], c[f"{r}_ok"])]
        out.append("| " + " | ".join(row) + " |")
    if data.get("calibration"):
        out += ["", "## The calibration's runs (those with an SE and a reference)", "",
                "| file | runs | recorded ok (cover) | k_mean ok (cover) | shortfall ok (cover) | ess_gate ok (cover) |",
                "|---|---|---|---|---|---|"]
        for path, t in data["calibration"].items():
            out.append(f"| {Path(path).name} | {t['judged']} | " + " | ".join(
                f"{t[r]['ok']} ({t[r]['cover']})" for r in ("recorded", *RULES)) + " |")
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--population", type=int, default=4096, help="weights per population (N)")
    parser.add_argument("--populations", type=int, default=4)
    parser.add_argument("--calibration", nargs="*", default=[], help="calibration result files to judge too")
    parser.add_argument("--output", type=Path, default=RESULTS / "tail_scale.json")
    args = parser.parse_args(argv)
    settings = {"runs": args.runs, "population": args.population, "populations": args.populations,
                "tails": list(TAILS), "families": {k: list(v) for k, v in FAMILIES.items()},
                "body_sigma": BODY_SIGMA, "ess_gate": ESS_GATE, "shortfall_se": SHORTFALL_SE}
    results = ResultFile(args.output, "tail_scale", settings)
    for family in FAMILIES:
        for k in TAILS:
            key = f"{family}/k{k}"
            if key not in results:
                log(key)
                results.add(key, cell(args.runs, family, k, args.populations, args.population))
    if args.calibration:
        results.data["calibration"] = judge_calibration(args.calibration)
        results.save()
    args.output.with_suffix(".md").write_text(render(results.data))
    print(render(results.data))


if __name__ == "__main__":
    main()
