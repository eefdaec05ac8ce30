"""Speed after/before a change, from the runs made by `speed_before_after.sh` (one pair per index).

Two kinds of timing, each taken within a pair (the two runs were made back to back) and reported
as the median over pairs:

- `speed` (the `scaling` question's module, each tree's own copy): training milliseconds per
  update and estimation seconds per sample of ULA, UHA, ULA-MCD, UHA-MCD, steady state;
- `cli` (this file, `time-cli`): whole `mcd estimate` runs through the command line of the tree on
  PYTHONPATH, so the same code times both trees whatever their internals are called: the default
  pipeline (gmm8, d = 20, fewer iterations) and adaptive tempered SMC. Each case runs at two sizes;
  the difference of the record's `train_seconds` (or `estimate_seconds`) over the difference of
  the sizes is the steady-state time per update (per particle), with compilation cancelled out.

    PYTHONPATH=TREE/src python benchmarks/speed_before_after.py time-cli OUT.json
    python benchmarks/speed_before_after.py ratios /tmp/speed_ab [--output results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

NAMES = ("ula", "uha", "ula-mcd", "uha-mcd")
GMM8 = ["gmm8", "--param", "dim=20", "--seed", "0", "--json", "-q"]
# case -> (the size that varies, its two values, the rest of the command, the record's seconds)
CASES = {
    "default": ("--iterations", (100, 300), GMM8, "train_seconds"),
    "adaptive_smc": ("--samples", (4096, 16384),
                     GMM8 + ["--backward", "ais", "--iterations", "0", "--schedule", "adaptive",
                             "--resample", "0.5", "--refine", "hmc"], "estimate_seconds"),
}


def one_cli_run(args: list[str]) -> dict:
    """`python -m mcd_cli estimate ARGS` in a fresh process; its record and wall time."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "mcd_cli", "estimate", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 3):  # 3: the run finished but its verdict is `unreliable`
        raise SystemExit(f"mcd estimate {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    keep = ("log_z", "status", "start_seconds", "train_seconds", "estimate_seconds", "steps")
    return {"wall_seconds": wall, **{k: rec.get(k) for k in keep}}


def time_cli(output: Path) -> None:
    cases = {}
    for name, (flag, sizes, args, seconds) in CASES.items():
        runs = {n: one_cli_run(args + [flag, str(n)]) for n in sizes}
        small, large = (runs[n] for n in sizes)
        per = (large[seconds] - small[seconds]) / (sizes[1] - sizes[0])
        cases[name] = {"runs": {str(n): r for n, r in runs.items()}, "sizes": list(sizes), "varies": flag,
                       "steady_ms_per_unit": 1e3 * per, "wall_seconds_large": large["wall_seconds"]}
        print(f"{name:13s} {1e3 * per:.4f} ms per {flag[2:]} unit, wall {large['wall_seconds']:.1f} s", file=sys.stderr)
    output.write_text(json.dumps({"cases": cases}, indent=1) + "\n")


def speed_timings(path: Path) -> dict:
    cells = json.loads(path.read_text()).get("cells", {})
    return next(v["estimators"] for k, v in cells.items() if k.startswith("timing"))


def ratios(directory: Path, output: Path | None) -> None:
    out: dict = {"estimators": {}, "cli": {}}
    pairs = []
    for before in sorted(directory.glob("before-*.json")):
        if before.name.endswith("-cli.json"):
            continue
        after = before.with_name(before.name.replace("before", "after"))
        if after.exists():
            pairs.append((speed_timings(before), speed_timings(after)))
    out["pairs"] = len(pairs)
    for name in NAMES if pairs else ():
        train = [a[name]["train_ms_per_iteration_median"] / b[name]["train_ms_per_iteration_median"] for b, a in pairs]
        est = [b[name]["estimate_samples_per_second_median"] / a[name]["estimate_samples_per_second_median"] for b, a in pairs]
        out["estimators"][name] = {
            "train_time_ratio_median": statistics.median(train), "train_time_ratios": train,
            "estimate_time_ratio_median": statistics.median(est), "estimate_time_ratios": est,
            "before_train_ms_median": statistics.median(b[name]["train_ms_per_iteration_median"] for b, _ in pairs),
            "after_train_ms_median": statistics.median(a[name]["train_ms_per_iteration_median"] for _, a in pairs),
        }
        print(f"{name:13s} train after/before {statistics.median(train):.3f} ({', '.join(f'{r:.2f}' for r in train)})"
              f"  estimate {statistics.median(est):.3f}")
    cli_pairs = []
    for before in sorted(directory.glob("before-*-cli.json")):
        after = before.with_name(before.name.replace("before", "after"))
        if after.exists():
            cli_pairs.append((json.loads(before.read_text())["cases"], json.loads(after.read_text())["cases"]))
    for name in CASES if cli_pairs else ():
        steady = [a[name]["steady_ms_per_unit"] / b[name]["steady_ms_per_unit"] for b, a in cli_pairs]
        wall = [a[name]["wall_seconds_large"] / b[name]["wall_seconds_large"] for b, a in cli_pairs]
        out["cli"][name] = {"steady_time_ratio_median": statistics.median(steady), "steady_time_ratios": steady,
                            "wall_time_ratio_median": statistics.median(wall), "wall_time_ratios": wall}
        print(f"{name:13s} steady after/before {statistics.median(steady):.3f} "
              f"({', '.join(f'{r:.2f}' for r in steady)})  wall {statistics.median(wall):.3f}")
    if output:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
        from common import machine, write_json

        write_json(output, {**out, "machine": machine()})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("time-cli", help="time the CLI cases with the mcd_cli on PYTHONPATH")
    t.add_argument("output", type=Path)
    r = sub.add_parser("ratios", help="after/before ratios of a directory of pairs")
    r.add_argument("directory", type=Path)
    r.add_argument("--output", type=Path)
    args = p.parse_args(argv)
    if args.what == "time-cli":
        time_cli(args.output)
    else:
        ratios(args.directory, args.output)


if __name__ == "__main__":
    main()
