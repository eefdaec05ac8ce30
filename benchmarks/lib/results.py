"""The kept results: `benchmarks/results/<question>.jsonl`, one JSON object per cell.

A module writes its own resumable file (`{"benchmark", "settings", "sessions", "cells"}`, see
`common.py`) under `results/raw/`; `convert` turns it into rows, each carrying where it came from:

    {"question", "source_file", "benchmark", "key", "commit", "dirty", "date", "machine",
     "command", "settings", "session", "cell"}

plus one row per source file with `"key": null` holding the file's other top-level fields
(`"file": {...}`), so that `to_data` can rebuild the module's file and its renderer can draw the
table again (`python benchmarks/run.py QUESTION --render`). Rows of one source file replace that
file's earlier rows; rows of other sources are kept.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional


KEPT = Path(__file__).resolve().parents[1] / "results"
REPO = Path(__file__).resolve().parents[2]
CELL_FIELDS = ("cells", "runs", "estimators")  # where the cells live in the formats of the modules
PLAIN = ("benchmark", "settings", "sessions", "command", "machine")


def path_of(question: str) -> Path:
    return KEPT / f"{question}.jsonl"


def read(question: str) -> list[dict]:
    path = path_of(question)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(question: str, rows: list[dict]) -> None:
    text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows)
    KEPT.mkdir(parents=True, exist_ok=True)
    # Atomic (temporary file, then os.replace), without importing the library: rendering and
    # converting must work while the library does not import.
    fd, tmp = tempfile.mkstemp(dir=KEPT, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path_of(question))


def _source_name(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _row(question: str, source: str, benchmark: str, settings: Any, session: Optional[int],
         sessions: list, key: Any, cell: Any) -> dict:
    s = sessions[session] if session is not None and 0 <= session < len(sessions) else {}
    m = s.get("machine") or {}
    return {
        "question": question, "source_file": source, "benchmark": benchmark, "key": key,
        "commit": m.get("git_commit"), "dirty": m.get("git_dirty"), "date": m.get("date"),
        "machine": m, "command": s.get("command"), "settings": settings, "session": session,
        "cell": cell,
    }


def _jsonl_rows(question: str, source: str, lines: list[dict]) -> list[dict]:
    """The modules that append lines (`compare_models`, `numpyro_examples`, `init_measure`): a
    line with only `machine` and `command` starts a session, the lines after it are its cells."""
    sessions: list = []
    rows = []
    benchmark = Path(source).stem
    for i, line in enumerate(lines):
        if set(line) <= {"machine", "command"}:
            sessions.append(line)
            continue
        session = len(sessions) - 1 if sessions else None
        rows.append(_row(question, source, benchmark, None, session, sessions, str(i), line))
    return [_file_row(question, source, benchmark, None, sessions, "lines", {})] + rows


def _file_row(question, source, benchmark, settings, sessions, cells_field, extra) -> dict:
    return {"question": question, "source_file": source, "benchmark": benchmark, "key": None,
            "settings": settings, "file": {"sessions": sessions, "cells_field": cells_field, **extra}}


def rows_of(question: str, path: Path, source: Optional[str] = None, **overrides) -> list[dict]:
    """The rows of one result file (`overrides` fill fields the file lacks, e.g. its command)."""
    path = Path(path)
    source = source or _source_name(path)
    if path.suffix == ".jsonl":
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return _jsonl_rows(question, source, lines)
    data = json.loads(path.read_text())
    data = {**overrides, **data} if overrides else data
    benchmark = data.get("benchmark") or path.stem
    settings = data.get("settings")
    if "sessions" in data:
        sessions = data["sessions"]
    elif "machine" in data:
        sessions = [{"command": data.get("command"), "machine": data["machine"]}]
    else:
        sessions = []
    field = next((f for f in CELL_FIELDS if isinstance(data.get(f), dict)), None)
    cells = data.get(field, {}) if field else {}
    extra = {k: v for k, v in data.items() if k not in PLAIN and k != field}
    rows = [_file_row(question, source, benchmark, settings, sessions, field, extra)]
    for key, cell in cells.items():
        session = cell.get("session", 0) if isinstance(cell, dict) else 0
        rows.append(_row(question, source, benchmark, settings, session if sessions else None, sessions, key, cell))
    return rows


def merge(question: str, new: list[dict]) -> list[dict]:
    """Replaces the rows of the sources in `new`, keeps the others, and writes the file."""
    sources = {r["source_file"] for r in new}
    rows = [r for r in read(question) if r["source_file"] not in sources] + new
    write(question, rows)
    return rows


def sources(rows: Iterable[dict]) -> list[str]:
    seen: dict = {}
    for r in rows:
        seen.setdefault(r["source_file"], None)
    return list(seen)


def to_data(rows: list[dict], source: str) -> dict:
    """The module's own file, rebuilt from the rows of one source."""
    mine = [r for r in rows if r["source_file"] == source]
    head = next(r for r in mine if r["key"] is None)
    info = dict(head["file"])
    field = info.pop("cells_field")
    sessions = info.pop("sessions")
    cells = [r for r in mine if r["key"] is not None]
    data = {"benchmark": head["benchmark"], "settings": head["settings"], "sessions": sessions, **info}
    if field == "lines":
        data["cells"] = {r["key"]: r["cell"] for r in cells}
    elif field:
        data[field] = {r["key"]: r["cell"] for r in cells}
        data.setdefault("cells", data[field])
    if sessions and "machine" not in data:  # files of one session kept these at the top
        data["command"], data["machine"] = sessions[-1].get("command"), sessions[-1].get("machine")
    return data


def generic_table(data: dict, limit: int = 14) -> str:
    """A plain table of the cells' scalar fields, for modules without a renderer of their own."""
    cells = data.get("cells") or {}
    columns: list = []
    for cell in cells.values():
        if isinstance(cell, dict):
            for k, v in cell.items():
                if k not in columns and (v is None or isinstance(v, (int, float, str, bool))) and k != "session":
                    columns.append(k)
    columns = columns[:limit]
    lines = [f"settings: `{json.dumps(data.get('settings'))}`", "",
             "| cell | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for key, cell in cells.items():
        values = [_fmt(cell.get(c)) if isinstance(cell, dict) else "" for c in columns]
        lines.append(f"| {key} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v).replace("|", "/")[:60]
