"""Peak memory of `mcd estimate` on a conditional target with n and 10 n data (it must not grow).

Writes a linear-Gaussian conditional target (z ∈ R^2, x ∈ R^3) and two data files, runs
`mcd estimate FILE --data DATA --backward ais --iterations 0 --samples N --json -q` on each in a
fresh process, and records the peak resident memory (`ru_maxrss`) of each run. Keeping every
datum's N float64 weights would add `10 n · N · 8` bytes at 10 n data (105 MB with the defaults).
Results: `benchmarks/results/perdatum_memory.json`.

    taskset -c 1 nice -n 10 python benchmarks/perdatum_memory.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

from common import RESULTS, command_line, log, machine, write_json  # noqa: E402

TARGET = """
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.stats import multivariate_normal, norm

    W = np.array([[1.0, 0.5], [-0.3, 2.0], [0.7, -1.0]], dtype=np.float32)
    dim = 2
    data = np.zeros((1, 3), dtype=np.float32)

    def log_density(z, x):
        return jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, W @ z, 0.5))

    def log_z(x):
        return multivariate_normal.logpdf(x, jnp.zeros(3), W @ W.T + 0.25 * jnp.eye(3))
"""

PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=int, default=200, help="n: the smaller data set")
    parser.add_argument("--samples", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS / "perdatum_memory.json")
    args = parser.parse_args(argv)
    result = {"benchmark": "perdatum_memory", "command": command_line(), "machine": machine(),
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "linear_gaussian.py"
        target.write_text(textwrap.dedent(TARGET))
        for n in (args.data, 10 * args.data):
            data = Path(tmp) / f"data{n}.npz"
            np.savez(data, data=np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32))
            cmd = [sys.executable, "-m", "mcd_cli", "estimate", str(target), "--data", str(data), "--backward",
                   "ais", "--iterations", "0", "--steps", str(args.steps), "--samples", str(args.samples), "--json", "-q"]
            out = subprocess.run([sys.executable, "-c", PEAK, *cmd], capture_output=True, text=True, check=True)
            peak_kib = int(out.stdout.strip().splitlines()[-1])
            result["runs"][str(n)] = {"data": n, "peak_rss_mib": round(peak_kib / 1024, 1), "load_average": list(os.getloadavg())}
            log(f"{n} data: peak RSS {peak_kib / 1024:.1f} MiB")
    small, large = (result["runs"][str(n)]["peak_rss_mib"] for n in (args.data, 10 * args.data))
    result["ratio"] = round(large / small, 3)
    write_json(args.out, result)
    log(f"ratio {result['ratio']}")
