"""Do two efforts see a bias? The default policy's first pilot against its reported run, on the same runs.

The policy's stages are independent runs at growing effort (a pilot of 4 × 2,048 particles at ESS
0.5, then larger ones; docs/policy.md). A bias that shrinks with the effort, as a neck of the target
that the small runs miss more often would give, shows as stages that disagree by more than their SEs
allow: z = (log Ẑ_final − log Ẑ_pilot) / √(SE_final² + SE_pilot²). This reads the stages from the
calibration records (no new run) and asks whether |z| > 2 singles out the `ok` runs that miss the
truth by more than 2 SE ("low") from those that cover it, per target and pooled.

    python benchmarks/run.py calibration --module effort_drift
    python benchmarks/run.py calibration --module effort_drift --source benchmarks/results/raw/calibration_flow_cpu.json
"""

from __future__ import annotations

import argparse
import collections
import math

from common import RESULTS, ResultFile, log  # noqa: E402
from stop_rule import KEPT, cells_of  # noqa: E402

# The default calibrations whose records carry the policy's stages (docs/method.md's table).
SOURCES = ("benchmarks/results/raw/calibration_flow_cpu.json",)
THRESHOLD = 2.0


def drift(cell: dict) -> "float | None":
    """z of the reported run against the first pilot (None: one stage, or an SE missing)."""
    stages = [s for s in cell["policy"] if s.get("log_z") is not None and s.get("log_z_stderr")]
    if len(stages) < 2:
        return None
    first, last = stages[0], stages[-1]
    return (last["log_z"] - first["log_z"]) / math.hypot(first["log_z_stderr"], last["log_z_stderr"])


def summarise(rows: list[dict], threshold: float) -> dict:
    """Runs with two stages or more; `ok` runs covering (±2 SE) and low/high beyond it; how many of
    each the drift rule would flag."""
    counts = collections.Counter()
    for r in rows:
        if r["z"] is None:
            continue
        kind = r["status"] if r["status"] != "ok" else ("ok_covering" if abs(r["error"]) <= 2 * r["se"] else "ok_missing")
        counts[kind] += 1
        counts[kind + "_flagged"] += abs(r["z"]) > threshold
    zs = sorted(round(r["z"], 2) for r in rows if r["z"] is not None and r["status"] == "ok" and abs(r["error"]) > 2 * r["se"])
    return {"runs": sum(r["z"] is not None for r in rows), **dict(counts), "z_of_ok_missing": zs}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", nargs="*", default=list(SOURCES), help="calibration source files named in results/calibration.jsonl")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--output", default=str(RESULTS / "effort_drift.json"))
    args = parser.parse_args(argv)
    cells = [c for source in args.source for c in cells_of(source)]
    if not cells:
        raise SystemExit(f"no policy cells from {', '.join(args.source)} in {KEPT}")
    out = ResultFile(args.output, "effort_drift", {"sources": args.source, "threshold": args.threshold})
    by_target = collections.defaultdict(list)
    for cell in cells:
        se = cell.get("log_z_stderr")
        by_target[cell["target"]].append({"z": drift(cell), "status": cell["status"], "error": cell["error"], "se": se})
    for target, rows in [*sorted(by_target.items()), ("all", [r for rows in by_target.values() for r in rows])]:
        out.add(target, summarise(rows, args.threshold))
    log(f"{len(cells)} runs of {', '.join(args.source)}")
    print(render(out.data))


def render(data: dict) -> str:
    t = data["settings"]["threshold"]
    rows = [
        f"Sources: {', '.join(f'`{s}`' for s in data['settings']['sources'])}. A run is flagged when its reported "
        f"run and first pilot differ by more than {t:g} SE of the difference. `ok` missing: beyond ±2 SE.", "",
        "| target | runs (≥ 2 stages) | ok covering (flagged) | ok missing (flagged) | warn (flagged) | unreliable (flagged) | z of the ok missing |",
        "|" + "---|" * 7,
    ]
    for key, c in data["cells"].items():
        pair = lambda k: f"{c.get(k, 0)} ({c.get(k + '_flagged', 0)})"  # noqa: E731
        rows.append(f"| {key} | {c['runs']} | {pair('ok_covering')} | {pair('ok_missing')} | {pair('warn')} | {pair('unreliable')} "
                    f"| {', '.join(map(str, c['z_of_ok_missing']))} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
