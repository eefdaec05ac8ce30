"""Where a default run's time goes: import, start, each stage's compilation and running.

For each target, `mcd estimate TARGET --seed S --json --quiet` runs as a whole process twice in a
row with the compilation cache in a new, empty folder: `cold` fills it, `warm` (a fresh process,
the same programs) loads from it; then `other seed` runs the same target at seed S + 1 with that
cache, as a user's next run of a model does (its start is fitted afresh, so its programs are the
same only where the start's arrays are the programs' arguments, not their constants). The wall time is measured around the process; the record gives
the rest (docs/json.md): `import_seconds`, the start's seconds and its compile seconds, and each
policy stage's seconds and compile seconds (`runtime.compile_clock`: the union of JAX's trace,
lowering and compile spans). What no field holds (the interpreter's start, writing the output,
exiting) is `other`.

    python benchmarks/run.py time
    python benchmarks/run.py time --targets gauss_shift brownian_motion --seeds 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, ResultFile, log  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "calibration_targets" / "corpus"
TARGETS = ("gauss_shift", "brownian_motion", str(CORPUS / "eight_schools_noncentred.py"), "logreg_breast_cancer")


def one_process(target: str, seed: int, cache: Path) -> dict:
    """One whole `mcd estimate` process with the cache folder `cache`: its wall time and record."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(MCD_CACHE_DIR=str(cache), JAX_PLATFORMS=env.get("JAX_PLATFORMS", "cpu"))
    command = [sys.executable, "-c", "from mcd_cli.cli import main; main()", "estimate", target,
               "--seed", str(seed), "--json", "--quiet"]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 3):
        return {"failed": done.returncode, "message": done.stderr.strip()[-300:], "wall": wall}
    return {"wall": wall, "warnings": [line for line in done.stderr.splitlines() if line.strip()],
            "record": json.loads(done.stdout.strip().splitlines()[-1])}


def breakdown(run: dict) -> dict:
    """The seconds of one process by where they went (see the module docstring)."""
    rec = run["record"]
    policy = rec.get("policy") or {}
    stages = [{"role": s["role"], "seconds": s["seconds"], "compile": s.get("compile_seconds"),
               "status": s["status"]} for s in policy.get("stages", [])]
    start, start_compile = rec["start_seconds"], rec.get("start_compile_seconds") or 0.0
    total = policy.get("seconds", rec["train_seconds"] + rec["estimate_seconds"] + start)
    compile_ = policy.get("compile_seconds", rec.get("compile_seconds")) or 0.0
    imported = rec.get("import_seconds") or 0.0
    return {
        "wall": round(run["wall"], 3), "import": imported, "start": start, "start_compile": start_compile,
        "compile": round(compile_, 3), "run": round(total - compile_, 3), "stages": stages,
        "other": round(run["wall"] - imported - total, 3), "status": rec["status"], "error": rec.get("error"),
        "log_z_stderr": rec.get("log_z_stderr"), "warnings": run["warnings"],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="*", default=list(TARGETS))
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS / "time_breakdown_cpu.json")
    args = parser.parse_args(argv)
    out = ResultFile(args.output, "time_breakdown", {"runs": "cold then warm, whole processes, a new cache folder"})
    for target in args.targets:
        for seed in range(args.seeds):
            key = f"{Path(target).stem}/seed{seed}"
            if key in out:
                continue
            with tempfile.TemporaryDirectory(prefix="mcd-cache-") as cache:
                cold = one_process(target, seed, Path(cache))
                warm = one_process(target, seed, Path(cache)) if "failed" not in cold else cold
                other = one_process(target, seed + 1, Path(cache)) if "failed" not in warm else warm
            if any("failed" in r for r in (cold, warm, other)):
                out.add(key, {"failed": cold.get("message") or warm.get("message") or other.get("message")})
                continue
            cell = {"cold": breakdown(cold), "warm": breakdown(warm), "other_seed": breakdown(other)}
            cell["warm_over_cold"] = round(warm["wall"] / cold["wall"], 3)
            cell["other_seed_over_cold"] = round(other["wall"] / cold["wall"], 3)
            out.add(key, cell)
            log(f"{key}: cold {cold['wall']:.1f} s, warm {warm['wall']:.1f} s ({cell['warm_over_cold']:.2f}), "
                f"seed {seed + 1} {other['wall']:.1f} s ({cell['other_seed_over_cold']:.2f})")
    print(render(out.data))


def render(data: dict) -> str:
    head = ("| target | process | wall s | import | start (compile) | stages: seconds (compile) | compile | run "
            "| other | status | /cold |")
    rows = [head, "|" + "---|" * 11]
    for key, cell in data["cells"].items():
        if "failed" in cell:
            rows.append(f"| {key} | failed: {cell['failed']} |" + " |" * 9)
            continue
        for which in ("cold", "warm", "other_seed"):
            if which not in cell:  # a cell measured before the other seed's run existed
                continue
            b = cell[which]
            stages = ", ".join(f"{s['role']} {s['seconds']:.1f} ({s['compile']:.1f})" for s in b["stages"]) or "-"
            ratio = f"{cell[which + '_over_cold']:.2f}" if which != "cold" else ""
            rows.append(
                f"| {key} | {which.replace('_', ' ')} | {b['wall']:.1f} | {b['import']:.1f} | {b['start']:.1f} ({b['start_compile']:.1f}) "
                f"| {stages} | {b['compile']:.1f} | {b['run']:.1f} | {b['other']:.1f} | {b['status']} | {ratio} |"
            )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
