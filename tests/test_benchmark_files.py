"""The benchmarks' result files lose nothing (`benchmarks/lib/common.py`, `benchmarks/run.py`).

A result file is rewritten whole after every cell by the job that holds its cells in memory, so a
second job on the same file would drop the first one's cells: the file is held by one job at a
time. Calibration's options after `--extra` go to every `mcd estimate`, so an `--output` there
would send the calibration's results to the default file: it is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def bench(monkeypatch):
    """`common`, `run` and `calibration`, imported as `benchmarks/run.py` imports them."""
    monkeypatch.syspath_prepend(str(BENCHMARKS / "questions"))
    monkeypatch.syspath_prepend(str(BENCHMARKS / "lib"))
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import calibration
    import common
    import run as runner

    return common, runner, calibration


def test_a_result_file_is_held_by_one_job_and_a_second_one_stops_without_touching_it(bench, tmp_path):
    common, _, _ = bench
    path = tmp_path / "cells.json"
    first = common.ResultFile(path, "calibration", {"extra": ""})
    first.add("gmm8@0", {"log_z": 0.0})
    # Another ResultFile of the same file in this job shares the hold.
    again = common.ResultFile(path, "calibration", {"extra": ""})
    assert list(again.data["cells"]) == ["gmm8@0"]
    code = (
        f"import sys; sys.path[:0] = [{str(BENCHMARKS / 'lib')!r}]; import common; "
        f"common.ResultFile({str(path)!r}, 'calibration', {{'extra': ''}})"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert other.returncode == 1
    assert other.stderr.strip() == f"{path} is being written by another job; give this one another --output"
    first.add("gmm8@1", {"log_z": 0.1})
    assert list(json.loads(path.read_text())["cells"]) == ["gmm8@0", "gmm8@1"]


def test_calibration_refuses_output_after_extra_and_the_runner_reads_only_its_own(bench, capsys):
    _, runner, calibration = bench
    for extra in (["--output", "f.json"], ["--output=f.json"], ["--out", "f.json"]):
        with pytest.raises(SystemExit) as stop:
            calibration.main(["--targets", "gmm8", "--seeds", "1", "--extra", "--time-limit", "1m", *extra])
        assert stop.value.code == 2
        assert "--output after --extra would go to every mcd estimate" in capsys.readouterr().err
    assert runner._output_of(["--seeds", "2", "--output", "a.json", "--extra", "--output", "b.json"]) == Path("a.json")
    assert runner._output_of(["--seeds", "2", "--extra", "--output", "b.json"]) is None
    assert runner._output_of(["--output", "a.json", "--output", "c.json"]) == Path("c.json")


def test_the_runner_leaves_another_modules_file_alone(bench, tmp_path):
    """Without --output the runner converts the files changed while the module ran, except one
    that names another module as its benchmark (a job running beside it wrote that one)."""
    _, runner, _ = bench
    mine, other, lines = tmp_path / "mine.json", tmp_path / "other.json", tmp_path / "rows.jsonl"
    mine.write_text(json.dumps({"benchmark": "refine_timing", "cells": {}}))
    other.write_text(json.dumps({"benchmark": "learned_pays", "cells": {}}))
    lines.write_text(json.dumps({"machine": {}}) + "\n")
    assert not runner._other_module(mine, "refine_timing")
    assert runner._other_module(other, "refine_timing")
    assert not runner._other_module(lines, "refine_timing")
    (tmp_path / "calibration.json").write_text(json.dumps({"benchmark": "calibration_fill_z"}))
    assert not runner._other_module(tmp_path / "calibration.json", "calibration")
