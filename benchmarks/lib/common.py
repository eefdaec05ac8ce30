"""Shared helpers of the benchmark modules: the machine's description and result files.

Every result file is one JSON object:

    {"benchmark": ..., "command": "python benchmarks/...", "machine": {...},
     "settings": {...}, "cells": {cell_key: {...}, ...}}

`cells` is keyed by a string naming the cell (e.g. "gmm8/d20/ula-mcd/K64/seed0"), so a rerun of the
same command skips the cells already there and an interrupted run loses at most the cell in
progress. Files are written atomically (a temporary file in the same folder, then `os.replace`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

# A module's own result file (resumable, rewritten after every cell) goes to results/raw/, which
# git ignores; the runner converts it into results/<question>.jsonl, the file that is kept.
RESULTS = Path(__file__).resolve().parents[1] / "results" / "raw"
REPO = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _git(*args: str) -> Optional[str]:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _package_version(name: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, memory, load, JAX, devices, git commit."""
    import jax

    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": _memory_bytes(),
        "load_average_at_start": load,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": _package_version("jaxlib"),
        "mcd_cli": _package_version("mcd-cli"),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--", "src")),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def command_line() -> str:
    """The command that is running, as a user would type it (the runner puts
    `benchmarks/run.py QUESTION` in `sys.argv[0]`)."""
    return " ".join(["python", sys.argv[0], *map(shlex.quote, sys.argv[1:])])


def write_json(path: Path, data: dict) -> None:
    """Writes `data` to `path` atomically (never leaves a half-written file)."""
    from mcd_cli.io.checkpoint import atomic_write_bytes

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=False, allow_nan=True) + "\n"
    atomic_write_bytes(path, text.encode())


class ResultFile:
    """A result file that is loaded (to resume) and rewritten after every cell.

    The machine description and command of every session that added cells are kept in
    `sessions`, so a file filled by several runs says where each part came from; each cell
    records the index of the session that produced it.
    """

    def __init__(self, path: Path, benchmark: str, settings: dict):
        self.path = Path(path)
        # Each job keeps the file's cells in memory and rewrites it whole after every cell, so a
        # second job on the same file would drop the first one's cells at its next write: the file
        # is held, exclusively, until this job ends.
        self._lock = _hold(self.path)
        if self.path.exists():
            self.data = json.loads(self.path.read_text())
            if self.data.get("benchmark") != benchmark:
                raise SystemExit(f"{self.path} holds a '{self.data.get('benchmark')}' benchmark, not '{benchmark}'")
            if self.data.get("settings") != settings:
                raise SystemExit(
                    f"{self.path} was made with other settings; use another --output or delete it\n"
                    f"  file:    {self.data.get('settings')}\n  current: {settings}"
                )
        else:
            self.data = {"benchmark": benchmark, "settings": settings, "sessions": [], "cells": {}}
        # The command line's compilation cache (mcd_cli.runtime.compile_cache): runs after the first that
        # build the same programs load them, so a session's wall times depend on it.
        cache = os.environ.get("MCD_CACHE_DIR", "default (~/.cache/mcd-cli/jax)")
        self.data["sessions"].append({"command": command_line(), "machine": machine(), "compile_cache": cache})
        self.session = len(self.data["sessions"]) - 1

    def __contains__(self, key: str) -> bool:
        return key in self.data["cells"]

    def add(self, key: str, value: dict) -> None:
        self.data["cells"][key] = {**value, "session": self.session}
        write_json(self.path, self.data)

    def save(self) -> None:
        write_json(self.path, self.data)


_HELD: dict = {}  # the result files this process holds (`_hold`), by lock file


def _hold(path: Path):
    """An exclusive, non-blocking lock on result file `path` (the lock file `.NAME.lock` beside it,
    git-ignored under results/), held by this process until it ends (a second `ResultFile` of the
    same path in this process shares it); SystemExit with what to do when another job holds it."""
    import fcntl

    full = Path(path).resolve()
    full.parent.mkdir(parents=True, exist_ok=True)
    lock = full.parent / f".{full.name}.lock"
    if lock not in _HELD:
        handle = open(lock, "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise SystemExit(f"{path} is being written by another job; give this one another --output") from None
        _HELD[lock] = handle
    return _HELD[lock]


def log(message: str) -> None:
    """Progress on stderr (results go to the JSON file)."""
    print(message, file=sys.stderr, flush=True)


def write_rendered(result_path: Path, text: str) -> None:
    """A result file's rendered table beside it (`.md`), and on stdout."""
    result_path.with_suffix(".md").write_text(text)
    print(text)
