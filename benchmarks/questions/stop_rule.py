"""Stop when the question is answered? The default policy's fresh final run against its accepted pilot, on the same runs.

Today the policy runs pilots until one is acceptable, then a fresh final run at that pilot's effort
(docs/policy.md), whose estimate is reported: the pilot was chosen by what it measured, and its
populations adapt their moves from their own particles (`refine_tuning="particles"`), so its
estimate is not the unbiased one. The alternative rule reports the accepted pilot itself when it is
`ok` with an SE within `--max-se`, and skips the final run. Both rules' answers are in every
calibration record (the policy's stages), so they are compared here on the same runs, with no new
run: per target and pooled, the `ok` runs, their ±2 SE coverage, runs beyond 4 SE, the mean error
in SE units (a bias shows as a mean away from 0) and the wall time (the stages up to the answer).

    python benchmarks/run.py calibration --module stop_rule
    python benchmarks/run.py calibration --module stop_rule --source benchmarks/results/raw/calibration_flow_cpu.json
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

from common import RESULTS, ResultFile, log  # noqa: E402

KEPT = Path(__file__).resolve().parents[1] / "results" / "calibration.jsonl"
SOURCE = "benchmarks/results/raw/calibration_flow_cpu.json"  # the calibration of docs/method.md's table
MAX_SE = 0.1  # the default --max-se


def cells_of(source: str) -> list[dict]:
    """The calibration cells of one source file in results/calibration.jsonl that ran the policy."""
    rows = [json.loads(line) for line in KEPT.read_text().splitlines() if line.strip()]
    return [r["cell"] for r in rows if r.get("source_file") == source and (r.get("cell") or {}).get("policy")]


def answers(cell: dict, max_se: float) -> dict:
    """The reported answer under each rule: `(error, se, status, seconds)`; `accepted` says whether
    the pilot before the final run ran the final's effort and was `ok` within `max_se`."""
    stages, truth = cell["policy"], cell["reference_log_z"]
    total = sum(s["seconds"] for s in stages)
    final = (cell["error"], cell["log_z_stderr"], cell["status"], total)
    pilot, last = (stages[-2], stages[-1]) if len(stages) > 1 else (None, stages[-1])
    accepted = (
        pilot is not None and pilot["method"] == last["method"] and pilot["status"] == "ok"
        and pilot["log_z_stderr"] is not None and pilot["log_z_stderr"] <= max_se
    )
    stop = (pilot["log_z"] - truth, pilot["log_z_stderr"], "ok", total - last["seconds"]) if accepted else final
    return {"final": final, "stop": stop, "accepted": accepted}


def summarise(runs: list[tuple]) -> dict:
    """`ok` runs, their coverage, runs beyond 4 SE, mean z of `ok` runs and wall times."""
    ok = [(e, s) for e, s, status, _ in runs if status == "ok" and s]
    covered = sum(abs(e) <= 2 * s for e, s in ok)
    walls = sorted(w for *_, w in runs)
    return {
        "runs": len(runs), "ok": len(ok), "ok_covering": covered,
        "ok_coverage": round(covered / len(ok), 3) if ok else None,
        "ok_and_covering": round(covered / len(runs), 3) if runs else None,
        "beyond_4se": sum(abs(e) > 4 * s for e, s in ok),
        "mean_z": round(statistics.mean(e / s for e, s in ok), 2) if ok else None,
        "median_seconds": round(walls[len(walls) // 2], 1) if walls else None,
        "total_seconds": round(sum(walls), 1),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=SOURCE, help="a calibration source file named in results/calibration.jsonl")
    parser.add_argument("--max-se", type=float, default=MAX_SE)
    parser.add_argument("--output", type=Path, default=RESULTS / "stop_rule.json")
    args = parser.parse_args(argv)
    cells = cells_of(args.source)
    if not cells:
        raise SystemExit(f"no policy cells from {args.source} in {KEPT}")
    out = ResultFile(args.output, "stop_rule", {"source": args.source, "max_se": args.max_se})
    by_target = collections.defaultdict(list)
    for cell in cells:
        by_target[cell["target"]].append(answers(cell, args.max_se))
    for target, rows in [*by_target.items(), ("all", [r for rows in by_target.values() for r in rows])]:
        out.add(target, {
            "accepted_pilots": sum(r["accepted"] for r in rows),
            "final": summarise([r["final"] for r in rows]),
            "stop": summarise([r["stop"] for r in rows]),
        })
    log(f"{len(cells)} runs of {args.source}")
    print(render(out.data))


def render(data: dict) -> str:
    rows = [
        f"Source: `{data['settings']['source']}`, --max-se {data['settings']['max_se']}. `final`: today's rule (a "
        "fresh final run); `stop`: the accepted pilot reported when `ok` within --max-se.", "",
        "| target | runs | accepted pilots | ok (final / stop) | ok covering ±2 SE | ok coverage | beyond 4 SE "
        "| mean z of ok runs | median s | total s |",
        "|" + "---|" * 10,
    ]
    for key, cell in data["cells"].items():
        f, s = cell["final"], cell["stop"]
        pair = lambda name: f"{f[name]} / {s[name]}"  # noqa: E731
        rows.append(
            f"| {key} | {f['runs']} | {cell['accepted_pilots']} | {pair('ok')} | {pair('ok_covering')} | {pair('ok_coverage')} "
            f"| {pair('beyond_4se')} | {pair('mean_z')} | {pair('median_seconds')} | {pair('total_seconds')} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
