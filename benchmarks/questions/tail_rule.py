"""How the verdict's tail rule for runs of several populations behaves, on weights of known tail.

Until session 32 the verdict of P independent populations took the largest of their P Pareto
k̂s: one population above 0.5 made the run `warn`. That largest k̂ rises with P even when the
tail does not, so a run made larger by more populations warned more often at the same tail. The
alternatives compared here judge the common tail once: from the k̂ of all P·N weights pooled
(`mcd_cli.stats.pooled_pareto_k`, each population's weights relative to its own mean), or from
the mean of the P populations' k̂s; P populations of one sampler are draws of one weight
distribution. The verdict now judges adaptive tempering's populations by the mean, with a test for
a population whose tail is heavier than the others' (`mcd_cli.stats.tail_verdict`): the `verdict`
columns.

For each true tail index k and each P, over `--runs` seeds, with N = `--population` weights per
population, `w = 1 + X` with X generalised Pareto of shape k and scale 1 (tail index exactly k,
E w = 1 + 1/(1 − k), so log Z is known):

- `max_flag`: the share of runs the largest of the P k̂s flags (> 0.5), today's rule;
- `pooled_flag`: the share the k̂ of the P·N pooled weights flags;
- `cover_all`: the share of all runs whose log Ẑ (the log of the mean of all weights) is within
  2 SE of log Z, the SE being the delta method's on all weights (what the genealogy SE is for
  independent particles);
- `mean_flag`: the share the mean of the P populations' k̂s flags (> 0.5): the common tail judged
  from the populations' own fits, whose noise falls as 1/√P;
- `both_flag`: the share flagged by the pooled k̂ above 0.5 or any population's above 0.7
  (`PARETO_K_BAD`: one population whose own estimate cannot be trusted);
- `verdict_flag`: the share the shipped rule (`stats.tail_verdict`: the mean, and the outlier
  test) makes `warn` or `unreliable`, and `outlier_flag` the share its outlier test alone flags;
- `cover_max_ok`, `cover_pooled_ok`, `cover_mean_ok`, `cover_both_ok`, `cover_verdict_ok`: the
  same among the runs each rule lets through.

Rows `k+0.8` have one population of tail index 0.8 among P − 1 of index k: a population that
went wrong on its own, which the outlier test is for.

A rule is wanted that lets through the runs whose ±2 SE covers (k below about 0.5, where the
weights' variance is finite) and stops those whose SE understates the error (k above 0.5).

Usage:

    python benchmarks/run.py calibration --module tail_rule --runs 200 \\
        --output benchmarks/results/raw/tail_rule.json
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from common import RESULTS, ResultFile, log  # noqa: E402

from mcd_cli.stats import Estimate, Status, pooled_pareto_k, tail_verdict  # noqa: E402
from mcd_cli.stats.psis import PARETO_K_BAD, PARETO_K_WARN, pareto_k  # noqa: E402

TAILS = (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
POPULATIONS = (4, 16, 64)
ODD = 0.8  # the tail index of the one odd population in the rows `k+0.8`
ODD_TAILS = (0.3, 0.45)


def log_weights(rng: np.random.Generator, k: float, size: int) -> np.ndarray:
    """`log(1 + X)`, X generalised Pareto of shape `k` and scale 1 (inverse CDF)."""
    u = rng.uniform(size=size)
    return np.log1p(np.expm1(-k * np.log(u)) / k)


def cell(runs: int, k: float, populations: int, n: int, odd: float = 0.0) -> dict:
    """Counts over `runs` seeds of P = `populations` populations of `n` weights of tail index `k`,
    the first of them of index `odd` instead when `odd` is set."""
    tails = [odd if odd and j == 0 else k for j in range(populations)]
    log_z = math.log(float(np.mean([1.0 + 1.0 / (1.0 - t) for t in tails])))
    counts = {"max_flag": 0, "pooled_flag": 0, "mean_flag": 0, "both_flag": 0, "cover_all": 0, "max_ok": 0,
              "pooled_ok": 0, "mean_ok": 0, "both_ok": 0, "cover_max_ok": 0, "cover_pooled_ok": 0, "cover_mean_ok": 0,
              "cover_both_ok": 0, "verdict_flag": 0, "outlier_flag": 0, "verdict_ok": 0, "cover_verdict_ok": 0}
    plain = Estimate(0.0, 0.1, "replicates", 0.1, 0.01, 0.0, float(n), n * populations, 0.0)
    for s in range(runs):
        rng = np.random.default_rng(s)
        lw = np.stack([log_weights(rng, t, n) for t in tails])
        top = float(lw.max())
        w = np.exp(lw - top).ravel()
        mean = float(w.mean())
        estimate = top + math.log(mean)
        se = float(w.std(ddof=1)) / (mean * math.sqrt(w.size))
        covers = abs(estimate - log_z) <= 2.0 * se
        ks = [pareto_k(row) for row in lw]
        largest = max(ks)
        max_flag = largest > PARETO_K_WARN
        mean_flag = float(np.mean(ks)) > PARETO_K_WARN
        counts["mean_flag"] += mean_flag
        counts["mean_ok"] += not mean_flag
        counts["cover_mean_ok"] += covers and not mean_flag
        pooled_flag = pooled_pareto_k(list(lw)) > PARETO_K_WARN
        both_flag = pooled_flag or largest > PARETO_K_BAD
        counts["both_flag"] += both_flag
        counts["both_ok"] += not both_flag
        counts["cover_both_ok"] += covers and not both_flag
        judged = tail_verdict(plain, ks, n)
        verdict_flag = judged.status is not Status.OK
        counts["verdict_flag"] += verdict_flag
        counts["outlier_flag"] += any(r.code == "pareto_k_outlier" for r in judged.reasons)
        counts["verdict_ok"] += not verdict_flag
        counts["cover_verdict_ok"] += covers and not verdict_flag
        counts["max_flag"] += max_flag
        counts["pooled_flag"] += pooled_flag
        counts["cover_all"] += covers
        counts["max_ok"] += not max_flag
        counts["pooled_ok"] += not pooled_flag
        counts["cover_max_ok"] += covers and not max_flag
        counts["cover_pooled_ok"] += covers and not pooled_flag
    return {key: int(value) for key, value in counts.items()}


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "—"


def render(data: dict) -> str:
    cells, runs, n = data["cells"], data["settings"]["runs"], data["settings"]["population"]
    out = [f"# The tail rule of several populations ({runs} runs per cell, populations of {n})", ""]
    out += ["Weights 1 + GPD(k, 1); in rows `k+0.8` one population has tail index 0.8. Flagged: k̂ > 0.5 in "
            "the largest of the P populations (the rule until session 32), in the P·N weights pooled, in the "
            "mean of the P populations' k̂s, or either of the pooled k̂ > 0.5 and the largest > 0.7 (both); "
            "`verdict`: the shipped rule (`stats.tail_verdict`: the mean, and a population's k̂ beyond what "
            "the others' tail explains), with its outlier test alone in brackets. Covering: log Ẑ within 2 "
            "delta-method SEs of log Z, among all runs and among those each rule lets through (`ok` by its "
            "tail).", ""]
    out += ["| k | P | flagged: largest | flagged: pooled | flagged: mean | flagged: both | flagged: verdict (outlier) | "
            "covering: all | covering: largest ok | covering: pooled ok | covering: mean ok | covering: both ok | "
            "covering: verdict ok |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [(f"{k}", f"k{k}/P{p}", p) for k in data["settings"]["tails"] for p in data["settings"]["populations"]]
    rows += [(f"{k}+{ODD}", f"k{k}+{ODD}/P{p}", p) for k in data["settings"].get("odd_tails", ())
             for p in data["settings"]["populations"]]
    for label, key, p in rows:
        c = cells.get(key)
        if c is None:
            continue
        verdict = (f"{_share(c['verdict_flag'], runs)} ({_share(c['outlier_flag'], runs)})"
                   if "verdict_flag" in c else "—")
        covered = (f"{_share(c['cover_verdict_ok'], c['verdict_ok'])} of {c['verdict_ok']}"
                   if "verdict_flag" in c else "—")
        out.append(
            f"| {label} | {p} | {_share(c['max_flag'], runs)} | {_share(c['pooled_flag'], runs)} | "
            f"{_share(c['mean_flag'], runs)} | {_share(c['both_flag'], runs)} | {verdict} | "
            f"{_share(c['cover_all'], runs)} | "
            f"{_share(c['cover_max_ok'], c['max_ok'])} of {c['max_ok']} | "
            f"{_share(c['cover_pooled_ok'], c['pooled_ok'])} of {c['pooled_ok']} | "
            f"{_share(c['cover_mean_ok'], c['mean_ok'])} of {c['mean_ok']} | "
            f"{_share(c['cover_both_ok'], c['both_ok'])} of {c['both_ok']} | {covered} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--population", type=int, default=4096, help="weights per population (N)")
    parser.add_argument("--output", type=Path, default=RESULTS / "tail_rule.json")
    args = parser.parse_args(argv)
    settings = {"runs": args.runs, "population": args.population, "tails": list(TAILS),
                "populations": list(POPULATIONS), "odd_tails": list(ODD_TAILS), "odd": ODD}
    results = ResultFile(args.output, "tail_rule", settings)
    jobs = [(f"k{k}/P{p}", k, p, 0.0) for k in TAILS for p in POPULATIONS]
    jobs += [(f"k{k}+{ODD}/P{p}", k, p, ODD) for k in ODD_TAILS for p in POPULATIONS]
    for key, k, p, odd in jobs:
        if key not in results:
            log(key)
            results.add(key, cell(args.runs, k, p, args.population, odd))
    args.output.with_suffix(".md").write_text(render(results.data))
    print(render(results.data))


if __name__ == "__main__":
    main()
