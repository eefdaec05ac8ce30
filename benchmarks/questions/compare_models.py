"""`mcd compare` of NumPyro models whose Bayes factors are exact: error and time, through the CLI.

Three models of the same 20 coin flips (targets/numpyro/beta_bernoulli*.py: priors Beta(2, 3),
Beta(1, 1) and Beta(3, 12)) are compared by `mcd compare A B C` with plain AIS (no training) and with
the default ULA-MCD, over seeds. For each run it records every model's log Ẑ, its error against
the exact evidence, each log Bayes factor against the best with its standard error and its error
against the exact one, and the wall time of the command. Writes JSON lines (the machine first).

    taskset -c 1 nice -n 10 python benchmarks/compare_models.py   # about 15 minutes on a busy core
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from scipy.special import betaln

from common import RESULTS, machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"beta_bernoulli": (2.0, 3.0), "beta_bernoulli_uniform": (1.0, 1.0), "beta_bernoulli_tails": (3.0, 12.0)}
K, N = 14, 20  # heads, flips (the files' data)
SETTINGS = {
    "ais_K128": ["--backward", "ais", "--iterations", "0", "--steps", "128", "--init", "target"],
    "ula_mcd_default": ["--init", "target"],
}


def exact_log_z(a: float, b: float) -> float:
    return float(betaln(a + K, b + N - K) - betaln(a, b))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "compare_models.jsonl")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS))
    args = parser.parse_args(argv)
    files = [str(ROOT / "targets" / "numpyro" / f"{name}.py") for name in MODELS]
    exact = {name: exact_log_z(*prior) for name, prior in MODELS.items()}
    with args.out.open("a") as out:
        out.write(json.dumps({"machine": machine(), "command": " ".join(sys.argv)}) + "\n")
        for setting in args.settings:
            for seed in range(args.seeds):
                cmd = [sys.executable, "-m", "mcd_cli", "compare", *files, *SETTINGS[setting], "--seed", str(seed), "--json", "-q"]
                t0 = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                seconds = time.perf_counter() - t0
                recs = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
                summary = recs[-1]
                best = summary["best"]
                row = {"setting": setting, "seed": seed, "wall_seconds": round(seconds, 1), "best": best, "models": []}
                for rec, model in zip(recs[:-1], summary["models"]):
                    name = model["name"]
                    exact_bf = exact[name] - exact[best]
                    row["models"].append(
                        {
                            "name": name,
                            "status": rec["status"],
                            "log_z": rec["log_z"],
                            "log_z_stderr": rec["log_z_stderr"],
                            "log_z_error": rec["log_z"] - exact[name],
                            "log_bf": model["log_bf"],
                            "log_bf_stderr": model["log_bf_stderr"],
                            "log_bf_exact": exact_bf,
                            "log_bf_error": model["log_bf"] - exact_bf,
                            "strength": model["strength"],
                            "train_seconds": rec["train_seconds"],
                            "estimate_seconds": rec["estimate_seconds"],
                        }
                    )
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(json.dumps(row), flush=True)
