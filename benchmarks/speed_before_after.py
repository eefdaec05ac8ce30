"""Speed after/before a change, from the runs made by `speed_before_after.sh` (one pair per index).

Two kinds of timing, each taken within a pair (the two runs were made back to back) and reported
as the median over pairs:

- `speed` (the `scaling` question's module, each tree's own copy): training milliseconds per
  update and estimation seconds per sample of ULA, UHA, ULA-MCD, UHA-MCD, steady state;
- `cli` (this file, `time-cli`): through the command line of the tree on PYTHONPATH, so the same
  code times both trees whatever their internals are called: (1) the wall time of a whole
  `mcd estimate` of the trained pipeline (gmm8, d = 20, 300 updates, then SMC) in a fresh process;
  (2) adaptive tempered SMC (gmm8, d = 20, 16,384 particles in 8 populations) run in-process with
  the tree's compiled population run wrapped in a timer: its first call is compilation plus one
  run, the median of the other seven the steady state.

    PYTHONPATH=TREE/src python benchmarks/speed_before_after.py time-cli OUT.json
    python benchmarks/speed_before_after.py ratios /tmp/speed_ab [--output results.json]
    python benchmarks/speed_before_after.py alternate-smc BEFORE_TREE . --pairs 10 --output results.json
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
DEFAULT = GMM8 + ["--iterations", "300"]
ADAPTIVE = GMM8 + ["--backward", "ais", "--iterations", "0", "--schedule", "adaptive", "--resample", "0.5",
                   "--refine", "hmc", "--samples", "16384"]
CASES = ("default", "adaptive_smc")

# Run in a fresh interpreter with a tree's `mcd_cli` on the path: `mcd estimate ADAPTIVE` in-process,
# with the compiled SMC population run (`run.smc_kernels.compiled` now, `smc.compiled` before the
# redesign) timed call by call.
_IN_PROCESS = """
import importlib, json, sys, time
import jax
calls = []
try:
    mod = importlib.import_module("mcd_cli.run.smc_kernels")
    import mcd_cli.run.estimate as user
    name = "compiled_smc"
except ImportError:
    mod = user = importlib.import_module("mcd_cli.smc")
    name = "compiled"
orig = mod.compiled
def compiled(*a, **k):
    f = orig(*a, **k)
    def timed(*x):
        t0 = time.perf_counter(); out = jax.block_until_ready(f(*x)); calls.append(time.perf_counter() - t0)
        return out
    return timed
setattr(user, name, compiled)
mod.compiled = compiled
from mcd_cli.cli import app
try:
    app(["estimate", *sys.argv[1:]])
except SystemExit:
    pass
print(json.dumps(calls))
"""


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
    default = one_cli_run(DEFAULT)
    out = subprocess.run([sys.executable, "-c", _IN_PROCESS, *ADAPTIVE], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"in-process adaptive SMC failed:\n{out.stderr[-2000:]}")
    calls = json.loads(out.stdout.strip().splitlines()[-1])
    steady = statistics.median(calls[1:])
    cases = {
        "default": {"args": DEFAULT, "run": default, "wall_seconds": default["wall_seconds"]},
        "adaptive_smc": {"args": ADAPTIVE, "population_call_seconds": calls, "steady_seconds": steady,
                         "compile_seconds": calls[0] - steady},
    }
    print(f"default wall {default['wall_seconds']:.1f} s; adaptive SMC population {steady:.3f} s steady, "
          f"compile {calls[0] - steady:.2f} s", file=sys.stderr)
    output.write_text(json.dumps({"cases": cases}, indent=1) + "\n")


def alternate_smc(before: Path, after: Path, pairs: int, output: Path, simultaneous: bool = False) -> None:
    """The in-process adaptive SMC timing (`_IN_PROCESS`) of two source trees, `pairs` times: one
    after the other on core 0, or (`simultaneous`) both at once, one per core, the cores swapped
    every pair, so that a slow minute of a shared machine hits both trees alike."""
    import os

    def start(src: Path, core: int) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(Path(src) / "src")}
        return subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", _IN_PROCESS, *ADAPTIVE],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def finish(side: str, proc: subprocess.Popen, core: int) -> None:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{side}: in-process adaptive SMC failed:\n{stderr[-2000:]}")
        calls = json.loads(stdout.strip().splitlines()[-1])
        record = json.loads(stdout.strip().splitlines()[-2])
        runs[side].append({"calls": calls, "steady_seconds": statistics.median(calls[1:]), "core": core,
                           "compile_seconds": calls[0] - statistics.median(calls[1:]), "log_z": record["log_z"]})

    runs: dict = {"before": [], "after": []}
    for i in range(pairs):
        trees = (("before", before), ("after", after))
        if simultaneous:
            cores = (i % 2, 1 - i % 2)
            procs = [(side, start(src, core), core) for (side, src), core in zip(trees, cores)]
            for side, proc, core in procs:
                finish(side, proc, core)
        else:
            for side, src in trees:
                finish(side, start(src, 0), 0)
        b, a = runs["before"][-1], runs["after"][-1]
        print(f"pair {i + 1}: steady {b['steady_seconds']:.3f} -> {a['steady_seconds']:.3f} s, "
              f"compile {b['compile_seconds']:.2f} -> {a['compile_seconds']:.2f} s", file=sys.stderr)
    ratio = lambda what: [a[what] / b[what] for b, a in zip(runs["before"], runs["after"])]  # noqa: E731
    summary = {
        "pairs": pairs, "args": ADAPTIVE,
        "same_log_z": all(b["log_z"] == a["log_z"] for b, a in zip(runs["before"], runs["after"])),
        **{f"{w}_time_ratio_median": statistics.median(ratio(f"{w}_seconds")) for w in ("steady", "compile")},
        **{f"{w}_time_ratios": ratio(f"{w}_seconds") for w in ("steady", "compile")},
        **{f"{side}_{w}_median": statistics.median(r[f"{w}_seconds"] for r in runs[side])
           for side in runs for w in ("steady", "compile")},
    }
    summary["design"] = "simultaneous, one core each, swapped every pair" if simultaneous else "alternating on core 0"
    print(json.dumps({k: v for k, v in summary.items() if not k.endswith("ratios")}, indent=1))
    sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
    from common import machine, write_json

    command = "python benchmarks/speed_before_after.py alternate-smc " + " ".join(sys.argv[2:])
    write_json(output, {"benchmark": "speed_before_after", "settings": {"case": "adaptive_smc", **summary},
                        "sessions": [{"command": command, "machine": machine()}],
                        "cells": {"adaptive_smc": {k: v for k, v in summary.items() if k.endswith("median")}},
                        "runs": runs})


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
    measures = {"default": {"wall": "wall_seconds"},
                "adaptive_smc": {"steady": "steady_seconds", "compile": "compile_seconds"}}
    for name in CASES if cli_pairs else ():
        out["cli"][name] = {}
        for what, field in measures[name].items():
            r = [a[name][field] / b[name][field] for b, a in cli_pairs]
            out["cli"][name][f"{what}_time_ratio_median"] = statistics.median(r)
            out["cli"][name][f"{what}_time_ratios"] = r
            print(f"{name:13s} {what} after/before {statistics.median(r):.3f} ({', '.join(f'{v:.2f}' for v in r)})")
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
    a = sub.add_parser("alternate-smc", help="the in-process adaptive SMC timing of two trees, alternately")
    a.add_argument("before", type=Path, help="source tree before (a git worktree)")
    a.add_argument("after", type=Path, help="source tree after")
    a.add_argument("--pairs", type=int, default=10)
    a.add_argument("--output", type=Path, required=True)
    a.add_argument("--simultaneous", action="store_true", help="both trees at once, one core each")
    args = p.parse_args(argv)
    if args.what == "alternate-smc":
        alternate_smc(args.before, args.after, args.pairs, args.output, args.simultaneous)
    elif args.what == "time-cli":
        time_cli(args.output)
    else:
        ratios(args.directory, args.output)


if __name__ == "__main__":
    main()
