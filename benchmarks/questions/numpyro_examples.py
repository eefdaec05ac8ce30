"""Plain AIS on the NumPyro example models (targets/numpyro/), against their exact log Z.

For each model with a known log Z, each starting distribution (the target's declared N(0, I), and
the prior fitted on the unconstrained space by `prior_initial`) and each seed: log Ẑ with ULA-AIS
(no training), its error, delta-method standard error, ESS, Pareto k̂ and the verdict. One JSON line
per cell is appended to --out as it finishes (the first line describes the machine).

    taskset -c 1 nice -n 10 python benchmarks/numpyro_examples.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

from mcd_cli import stats
from mcd_cli.path import annealing
from common import RESULTS
from mcd_cli.config import SamplerConfig
from mcd_cli.targets import load_target
from mcd_cli.targets.numpyro_model import prior_initial

EXAMPLES = Path(__file__).resolve().parents[2] / "targets" / "numpyro"
MODELS = ("normal_normal", "beta_bernoulli", "eight_schools")
STARTS = ("declared", "prior")


def main(argv=None) -> None:
    import common  # benchmarks/common.py, next to this file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "numpyro_examples.jsonl")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write(json.dumps({"machine": common.machine(), "command": common.command_line()}) + "\n")
    config = SamplerConfig(sampler="ula", backward="ais", steps=args.steps)
    for name in args.models:
        t0 = time.perf_counter()
        target = load_target(str(EXAMPLES / f"{name}.py"))
        load_seconds = time.perf_counter() - t0
        for start in STARTS:
            for seed in range(args.seeds):
                key = jax.random.fold_in(jax.random.key(seed), STARTS.index(start))
                k_prior, k_params, k_ais = jax.random.split(key, 3)
                used = target.with_initial(*prior_initial(target, k_prior)) if start == "prior" else target
                params = annealing.init_params(k_params, used, config)
                t0 = time.perf_counter()
                log_w = annealing.sample_log_weights(k_ais, params, used, config, args.samples)
                est = stats.summarize(log_w, seconds=time.perf_counter() - t0)
                record = dict(
                    model=name, start=start, seed=seed, dim=target.dim, steps=args.steps,
                    samples=args.samples, true_log_z=target.log_z, log_z=est.log_z,
                    error=est.log_z - target.log_z, delta_stderr=est.delta_stderr, ess=est.ess,
                    pareto_k=est.pareto_k, status=est.status.value, seconds=est.seconds,
                    load_seconds=load_seconds,
                )
                with args.out.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                print(
                    f"{name:15s} {start:9s} seed {seed}: log Ẑ {est.log_z:9.4f}  error {record['error']:+.4f}  "
                    f"se {est.delta_stderr:.4f}  k̂ {est.pareto_k:5.2f}  {est.status.value}  {est.seconds:.1f} s",
                    flush=True,
                )
