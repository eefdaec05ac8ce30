"""Writes tests/golden/records.jsonl: the records of a few small runs, made before a refactor.

`tests/test_golden.py` reruns the same commands and checks that every estimate, standard error,
verdict and diagnostic is what it was (floats to 1e-6: the runs are deterministic on one machine,
and a change of the random numbers would move log Ẑ by its standard error, far more).

    python tests/golden/make_golden.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from golden_cases import CASES, run_case  # noqa: E402


def main() -> None:
    lines = []
    for name, args in CASES.items():
        records = run_case(args, Path(tempfile.mkdtemp()))  # the conditional target's file goes there
        lines.append(json.dumps({"case": name, "args": args, "records": records}))
        print(name, [r.get("log_z", r.get("mean_log_z")) for r in records], flush=True)
    (HERE / "records.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
