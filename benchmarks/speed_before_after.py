"""Ratios after/before of `speed.py` runs made by `speed_before_after.sh` (one pair per index).

Training: milliseconds per update; estimation: seconds per sample. Each ratio is taken within a
pair (the two runs were made back to back), and the median over pairs is reported.

    python benchmarks/speed_before_after.py /tmp/speed_ab [--output results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, write_json  # noqa: E402

NAMES = ("ula", "uha", "ula-mcd", "uha-mcd")


def timings(path: Path) -> dict:
    cells = json.loads(path.read_text()).get("cells", {})
    return next(v["estimators"] for k, v in cells.items() if k.startswith("timing"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("directory", type=Path)
    p.add_argument("--output", type=Path)
    args = p.parse_args()
    pairs = []
    for before in sorted(args.directory.glob("before-*.json")):
        after = before.with_name(before.name.replace("before", "after"))
        if after.exists():
            pairs.append((timings(before), timings(after)))
    out = {"pairs": len(pairs), "machine": machine(), "estimators": {}}
    for name in NAMES:
        train = [a[name]["train_ms_per_iteration_median"] / b[name]["train_ms_per_iteration_median"] for b, a in pairs]
        est = [b[name]["estimate_samples_per_second_median"] / a[name]["estimate_samples_per_second_median"] for b, a in pairs]
        out["estimators"][name] = {
            "train_time_ratio_median": statistics.median(train),
            "train_time_ratios": train,
            "estimate_time_ratio_median": statistics.median(est),
            "estimate_time_ratios": est,
            "before_train_ms_median": statistics.median(b[name]["train_ms_per_iteration_median"] for b, _ in pairs),
            "after_train_ms_median": statistics.median(a[name]["train_ms_per_iteration_median"] for _, a in pairs),
        }
        print(f"{name:8s} train after/before {out['estimators'][name]['train_time_ratio_median']:.3f} "
              f"({', '.join(f'{r:.2f}' for r in train)})  estimate {out['estimators'][name]['estimate_time_ratio_median']:.3f}")
    if args.output:
        write_json(args.output, out)


if __name__ == "__main__":
    main()
