"""Randomized SIGKILL campaign: is anything lost when runs are killed at random moments?

Two parts (docs/reliability.md, "How it is tested"):

1. **Kill and resume.** For each pipeline — the default `mcd estimate` pipeline as it stands (the
   estimation policy), `--schedule adaptive`, and a run that trains (`--iterations N`) — one
   uninterrupted reference run (run twice: the fields that differ between the two, the times, are
   left out of the comparison), then `--kills` runs with `--checkpoint DIR`, each SIGKILLed at a
   random moment between its start and 1.2 × the reference's wall time (so across start, training
   and estimation), each resumed with the same command plus `--resume`. Every resumed record is
   compared with the reference: identical, different (which fields), or failed (exit status, no
   record). Where a kill of the training run landed is read from the checkpoint left behind:
   `start` (none yet), `training` (iteration < N), `estimation` (training finished); `after` (the
   run had finished first); `run` for the pipelines that train nothing.
2. **Concurrent appenders.** `--appenders` processes append lines of random size (up to
   `--line-kb` kB, so that kills land mid-write) to one file with `files.append_line` — the
   code `--output` uses — and acknowledge each line on stdout once it returned; `--appender-kills`
   of them are SIGKILLed, each after a random number of its own appends returned and up to
   `--kill-jitter` seconds later (so inside a later write, now and then). Then one more append (the next job), and the file is
   read: lines that do not parse are `corrupt`; acknowledged lines (and every line of a writer that
   exited 0) that are missing are `lost`; `fragments_cut` counts the partial lines of killed writers
   that later appends cut off (their lines were never acknowledged).

    python benchmarks/run.py faults                      # the full campaign: 50 kills, 8 appenders
    python benchmarks/questions/kill_campaign.py --kills 4 --output /tmp/kills.json   # a quick try

The result file is resumable (a rerun skips the cells it holds) and ends with a `summary` cell.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "lib")]

from common import RESULTS, ResultFile, log, write_rendered  # noqa: E402

TARGET_YAML = """\
name: kill_gauss
description: "N(1, I) in d = 2 from N(0, I); log Z = 0"
family: normal
params: {dim: 2, loc: 1.0}
initial: {mean: 0.0, scale: 1.0}
"""

# Each pipeline: the options after `mcd estimate TARGET` (checkpointing and --resume are added).
PIPELINES = {
    "default": [],
    "adaptive": ["--schedule", "adaptive"],
    "trained": ["--iterations", "{iterations}", "--checkpoint-every", "{every}"],
}

_APPENDER = """
import json, os, random, sys
from mcd_cli.io import files
path, worker, count, kb, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
for i in range(count):
    line = json.dumps({"worker": worker, "i": i, "pad": "x" * rng.randrange(64, kb * 1024)})
    cut = files.append_line(path, line)
    print(f"ok {i} {cut}", flush=True)
"""


def mcd(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mcd_cli", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, Optional[dict], str]:
    """(exit status, the last JSON record on stdout or None, the last line of stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -1, None, "timed out"
    rec = None
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            pass
    tail = err.strip().splitlines()
    return proc.returncode, rec, tail[-1] if tail else ""


def differences(got: Any, want: Any, volatile: set, where: str = "") -> list[str]:
    """The paths at which `got` differs from `want`, leaving out the `volatile` paths."""
    if where in volatile:
        return []
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(want) | set(got)):
            out += differences(got.get(key), want.get(key), volatile, f"{where}.{key}" if where else key)
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (a, b) in enumerate(zip(got, want)) for d in differences(a, b, volatile, f"{where}[{i}]")]
    return [] if got == want else [where]


# What may differ between an uninterrupted run and a resumed one besides the clock: the iterations
# trained in this process and the checkpoints it could not write.
ALWAYS_VOLATILE = {"iterations_run", "checkpoint_failures"}  # how far this process ran; its failed saves


def phase(directory: Path, total: Optional[int], code: Optional[int]) -> str:
    """Where the kill landed, from the checkpoint it left (see the module's docstring); `run` for a
    pipeline that trains nothing (its moment is `killed_after_s`, uniform over the run)."""
    if code is not None:
        return "after"
    if total is None:
        return "run"
    state = directory / "state-r0.npz"
    if not state.exists():
        return "start"
    from mcd_cli.io import checkpoint

    try:
        iteration = checkpoint.read_meta(state)["iteration"]
    except checkpoint.CheckpointError:
        return "training (unreadable checkpoint)"
    return "training" if iteration < total else "estimation"


def kill_and_resume(args, result: ResultFile, work: Path, env: dict, rng: random.Random) -> None:
    target = work / "kill_gauss.yaml"
    target.write_text(TARGET_YAML)
    base = ["estimate", str(target), "--seed", str(args.seed), "--json", "-q"]
    options = {
        name: [o.format(iterations=args.iterations, every=args.every) for o in extra] for name, extra in PIPELINES.items()
    }
    names = [p for p in args.pipelines.split(",") if p]
    references = {}
    for name in names:
        key = f"reference/{name}"
        if key not in result:
            walls, recs = [], []
            for r in range(2):
                t0 = time.perf_counter()
                command = base + options[name] + ["--checkpoint", str(work / f"reference-{name}-{r}")]
                code, rec, err = finish(mcd(command, env), args.timeout)
                walls.append(time.perf_counter() - t0)
                if code != 0 or rec is None:
                    raise SystemExit(f"reference run of '{name}' failed ({code}): {err}")
                recs.append(rec)
            volatile = sorted(set(differences(recs[1], recs[0], set())) | ALWAYS_VOLATILE)
            if {"log_z", "log_z_stderr"} & set(volatile):
                raise SystemExit(f"'{name}' is not reproducible: two uninterrupted runs differ in {volatile}")
            result.add(key, {"wall_s": min(walls), "record": recs[0], "volatile": volatile})
            log(f"reference {name}: {min(walls):.1f} s; volatile fields {volatile}")
        references[name] = result.data["cells"][key]
    for k in range(args.kills):
        name = names[k % len(names)]
        key = f"kill/{k:03d}"
        # Draw the moment even for a cell already there, so a resumed campaign keeps its schedule.
        after = rng.uniform(0.0, 1.2 * references[name]["wall_s"])
        if key in result:
            continue
        directory = work / f"ckpt-{k:03d}"
        command = base + options[name] + ["--checkpoint", str(directory)]
        victim = mcd(command, env)
        time.sleep(after)
        code = victim.poll()
        if code is None:
            victim.send_signal(signal.SIGKILL)
        victim.communicate()
        landed = phase(directory, args.iterations if name == "trained" else None, code)
        rcode, rec, err = finish(mcd(command + ["--resume"], env), args.timeout)
        ref = references[name]
        if rcode != 0 or rec is None:
            outcome, diff = "failed", [f"exit {rcode}: {err}"]
        else:
            diff = differences(rec, ref["record"], set(ref["volatile"]))
            outcome = "identical" if not diff else "different"
        result.add(key, {"pipeline": name, "killed_after_s": round(after, 3), "phase": landed,
                         "outcome": outcome, "differences": diff[:20]})
        log(f"kill {k + 1}/{args.kills}: {name}, after {after:.2f} s ({landed}): {outcome}{' ' + str(diff[:3]) if diff else ''}")


def appenders(args, result: ResultFile, work: Path, env: dict, rng: random.Random) -> None:
    if args.appenders == 0 or "appenders" in result:
        return
    path = work / "shared.jsonl"
    path.write_text("".join(json.dumps({"worker": -1, "i": i}) + "\n" for i in range(200)))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, str(path), str(w), str(args.lines), str(args.line_kb), str(rng.randrange(2**31))],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for w in range(args.appenders)
    ]
    # Each victim is killed after a random number of its own appends have returned (so the kill
    # lands while it writes, not while Python starts), a random fraction of a write later: some
    # kills land inside a write and leave a fragment for the next append to cut off.
    victims = set(rng.sample(range(args.appenders), min(args.appender_kills, args.appenders)))
    plans = {w: (rng.randrange(1, args.lines), rng.uniform(0.0, args.kill_jitter)) for w in victims}
    outputs: dict = {}

    def watch(w: int) -> None:
        after, delay = plans[w]
        seen = []
        for line in procs[w].stdout:
            seen.append(line)
            if len(seen) == after:
                time.sleep(delay)
                procs[w].send_signal(signal.SIGKILL)
        outputs[w] = "".join(seen)

    watchers = [threading.Thread(target=watch, args=(w,)) for w in sorted(victims)]
    for t in watchers:
        t.start()
    acknowledged, cut, exits, stdout = {}, 0, {}, {}
    for w, proc in enumerate(procs):
        if w in victims:
            proc.wait(timeout=args.timeout)
        else:
            stdout[w], _ = proc.communicate(timeout=args.timeout)
        exits[w] = proc.returncode
    for t in watchers:
        t.join(timeout=args.timeout)
    stdout.update(outputs)
    for w in range(args.appenders):
        oks = [line.split() for line in stdout[w].splitlines() if line.startswith("ok ")]
        acknowledged[w] = {int(i) for _, i, _ in oks}
        cut += sum(int(c) > 0 for _, _, c in oks)
    from mcd_cli.io import files

    cut += files.append_line(path, json.dumps({"worker": -2, "i": 0})) > 0  # the next job's append
    corrupt, found = 0, {}
    for line in path.read_bytes().split(b"\n")[:-1]:
        try:
            rec = json.loads(line)
            found.setdefault(rec["worker"], set()).add(rec["i"])
        except (ValueError, KeyError):
            corrupt += 1
    lost = sum(len(acknowledged[w] - found.get(w, set())) for w in acknowledged)
    lost += sum(len(set(range(args.lines)) - found.get(w, set())) for w, c in exits.items() if c == 0)
    lost += len(set(range(200)) - found.get(-1, set()))
    killed = sorted(w for w, c in exits.items() if c == -signal.SIGKILL)
    cell = {
        "appenders": args.appenders, "killed": len(killed), "lines_acknowledged": sum(map(len, acknowledged.values())),
        "lines_in_file": sum(map(len, found.values())), "lost": lost, "corrupt": corrupt, "fragments_cut": cut,
        "exit_codes": sorted(set(exits.values())),
    }
    result.add("appenders", cell)
    log(f"appenders: {cell}")


def summary(result: ResultFile) -> dict:
    cells = result.data["cells"]
    kills = [c for k, c in cells.items() if k.startswith("kill/")]
    count = lambda field: {v: sum(c[field] == v for c in kills) for v in sorted({c[field] for c in kills})}  # noqa: E731
    out = {"kills": len(kills), "outcomes": count("outcome"), "phases": count("phase"),
           "pipelines": count("pipeline"), "appenders": cells.get("appenders")}
    result.data["cells"]["summary"] = out
    result.save()
    return out


def render(data: dict) -> str:
    cells = data["cells"]
    s = cells.get("summary") or {}
    lines = ["# Randomized SIGKILL campaign", "",
             f"{s.get('kills', 0)} kills: outcomes {s.get('outcomes')}, phases {s.get('phases')}, "
             f"pipelines {s.get('pipelines')}", ""]
    lines += ["| kill | pipeline | after (s) | phase | outcome |", "|---|---|---|---|---|"]
    for key, c in sorted(cells.items()):
        if key.startswith("kill/"):
            lines.append(f"| {key[5:]} | {c['pipeline']} | {c['killed_after_s']} | {c['phase']} | {c['outcome']} |")
    a = s.get("appenders")
    if a:
        lines += ["", f"Appenders: {a['appenders']} writers, {a['killed']} killed; {a['lines_acknowledged']} lines "
                  f"acknowledged, {a['lines_in_file']} whole lines in the file; lost {a['lost']}, corrupt "
                  f"{a['corrupt']}; {a['fragments_cut']} fragments of killed writers cut off."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50, help="kill-and-resume runs, spread over the pipelines")
    p.add_argument("--pipelines", default="default,adaptive,trained", help=f"comma-separated, of {', '.join(PIPELINES)}")
    p.add_argument("--iterations", type=int, default=100, help="training iterations of the 'trained' pipeline")
    p.add_argument("--every", type=int, default=5, help="--checkpoint-every of the killed runs")
    p.add_argument("--appenders", type=int, default=8, help="concurrent appending processes (0: none)")
    p.add_argument("--appender-kills", type=int, default=4, help="how many of them are SIGKILLed")
    p.add_argument("--lines", type=int, default=200, help="lines each appender writes")
    p.add_argument("--line-kb", type=int, default=64, help="the largest line, in kB")
    p.add_argument("--kill-jitter", type=float, default=0.02,
                   help="a killed appender dies this many seconds at most after its chosen append returned")
    p.add_argument("--seed", type=int, default=0, help="the runs' --seed and the campaign's random moments")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    p.add_argument("--workdir", type=Path, help="where checkpoints and files go (default: a temporary folder)")
    p.add_argument("--output", type=Path, default=RESULTS / "kill_campaign.json")
    args = p.parse_args(argv)
    unknown = set(args.pipelines.split(",")) - set(PIPELINES)
    if unknown:
        raise SystemExit(f"unknown pipelines {sorted(unknown)}; choose from {', '.join(PIPELINES)}")
    settings = {k: v for k, v in vars(args).items() if k not in ("output", "workdir", "timeout")}
    result = ResultFile(args.output, "kill_campaign", settings)
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"), PYTHONUNBUFFERED="1")
    env.pop("MCD_DEBUG", None)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="mcd-kills-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        kill_and_resume(args, result, work, env, rng)
        appenders(args, result, work, env, rng)
    out = summary(result)
    write_rendered(args.output, render(result.data))
    bad = out["outcomes"].get("different", 0) + out["outcomes"].get("failed", 0)
    a = out.get("appenders") or {}
    if bad or a.get("lost") or a.get("corrupt"):
        raise SystemExit(f"campaign found problems: {out}")


if __name__ == "__main__":
    main()
