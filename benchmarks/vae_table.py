"""log p(x) of held-out digits under the bundled VAE (`targets/vae_mnist.py`): IWAE, AIS and MCD.

Every estimator sees the same held-out images of the one VAE trained by `targets/data/train_vae.py`:

* IWAE: the encoder q(z | x) as the importance proposal, `--iwae-samples` draws per image;
* ULA, UHA (AIS) and ULA-MCD, UHA-MCD at each K of `--steps`: one sampler amortised over the images
  (step sizes, UHA's damping and mass and, for MCD, the score network conditioned on the encoder's
  outputs), trained `--iterations` updates by the ELBO on batches of images × particles, then
  `--samples` importance samples per image. The initial distribution is the encoder.

All are stochastic lower bounds of log p(x) in expectation, so a higher mean is better. The table
gives the mean over the images with its Monte Carlo standard error, the mean paired difference to
IWAE (the same images, so the spread over images cancels), the mean per-image ELBO, the verdict
counts and the wall times. Results: `benchmarks/results/vae_table.json` and `.md`; a rerun skips
the cells already there.

    taskset -c 1 nice -n 10 python benchmarks/vae_table.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, REPO, command_line, log, machine, write_json  # noqa: E402

from mcd_cli import perdatum  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.stats import summarize  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from mcd_cli.targets.conditional import datum_target  # noqa: E402

ESTIMATORS = (("ula", "ais"), ("uha", "ais"), ("ula", "mcd"), ("uha", "mcd"))
LABELS = {("ula", "ais"): "ULA", ("uha", "ais"): "UHA", ("ula", "mcd"): "ULA-MCD", ("uha", "mcd"): "UHA-MCD"}
PAPER_KEYS = {"ULA": "ula", "UHA": "uha", "ULA-MCD": "ula-mcd", "UHA-MCD": "uha-mcd"}


def iwae(target, x: np.ndarray, key: jax.Array, samples: int, chunk: int = 4096) -> np.ndarray:
    """Log importance weights `log p(x, z) − log q(z | x)`, z ~ q(z | x) (the encoder)."""
    one = datum_target(target, jnp.asarray(x))
    mean, scale = jnp.asarray(one.initial_mean), jnp.asarray(one.initial_scale)

    @jax.jit
    def weights(key):
        z = mean + scale * jax.random.normal(key, (chunk, target.dim))
        log_q = jnp.sum(jax.scipy.stats.norm.logpdf(z, mean, scale), axis=1)
        return jax.vmap(one.log_density)(z) - log_q

    parts = [np.asarray(weights(jax.random.fold_in(key, i)), np.float64) for i in range(-(-samples // chunk))]
    return np.concatenate(parts)[:samples]


def cell_summary(rows: list[dict], seconds_train: float, seconds_estimate: float) -> dict:
    log_z = np.array([r["log_z"] for r in rows], dtype=np.float64)
    se = np.array([r["delta_stderr"] for r in rows], dtype=np.float64)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "warn", "unreliable", "failed")}
    return {
        "mean_log_z": float(log_z.mean()),
        "mc_stderr": float(math.sqrt(np.sum(se**2)) / len(rows)),
        "data_stderr": float(log_z.std(ddof=1) / math.sqrt(len(rows))),
        "mean_elbo": float(np.mean([r["elbo"] for r in rows])),
        "counts": counts,
        "train_seconds": round(seconds_train, 2),
        "estimate_seconds": round(seconds_estimate, 2),
        "per_image": [{k: r[k] for k in ("datum", "log_z", "delta_stderr", "ess", "pareto_k", "elbo", "status")} for r in rows],
    }


def render(result: dict) -> str:
    cells, s = result["cells"], result["settings"]
    iwae_cell = cells.get("iwae")
    base = None if iwae_cell is None else np.array([r["log_z"] for r in iwae_cell["per_image"]])
    paper = json.loads((REPO.parent / "shared/reference/paper_tables.json").read_text())["vae_binarized_mnist"] if (
        REPO.parent / "shared/reference/paper_tables.json").exists() else None
    lines = [
        "# log p(x) of held-out digits under one VAE: IWAE, AIS and MCD",
        "",
        f"{s['images']} held-out binarised digits (test indices {s['indices']}), the bundled VAE "
        "(`targets/vae_mnist.py`, z ∈ R^16). Each sampler amortised over those images, trained "
        f"{s['iterations']} iterations × batch {s['batch_size']} ({s['data_batch']} images × "
        f"{s['batch_size'] // s['data_batch']} particles), lr {s['lr']}, then {s['samples']} samples per "
        f"image; IWAE with {s['iwae_samples']} encoder samples per image. Seed {s['seed']}. Mean over images "
        "± Monte Carlo standard error (√(Σ se_i²)/n); `Δ IWAE`: mean paired difference to IWAE ± its sd/√n "
        "over images; spread of log p(x) over the images: ± over data.",
        "",
        "| estimator | K | mean log p̂(x) | ± MC | ± over data | Δ IWAE | mean ELBO | ok/warn/unrel. | train s | estimate s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, cell in cells.items():
        label, k = (("IWAE", "—") if key == "iwae" else (key.split("/")[0], key.split("/")[1][1:]))
        diff = "—"
        if base is not None and key != "iwae":
            d = np.array([r["log_z"] for r in cell["per_image"]]) - base
            diff = f"{d.mean():+.2f} ± {d.std(ddof=1) / math.sqrt(d.size):.2f}"
        c = cell["counts"]
        lines.append(
            f"| {label} | {k} | {cell['mean_log_z']:.2f} | {cell['mc_stderr']:.2f} | {cell['data_stderr']:.2f} | {diff} | "
            f"{cell['mean_elbo']:.2f} | {c['ok']}/{c['warn']}/{c['unreliable'] + c['failed']} | "
            f"{cell['train_seconds']:.0f} | {cell['estimate_seconds']:.0f} |"
        )
    if paper is not None:
        lines += [
            "",
            "The paper's table (a different experiment: VAEs trained end to end with each sampler inside the "
            f"objective; {paper['note']}): log-likelihood "
            + ", ".join(f"{name} {paper['log_likelihood'][k][0]}" for name, k in [("VI", "vi")] + list(PAPER_KEYS.items())),
            "; ELBO " + ", ".join(f"{name} {paper['elbo'][k][0]}" for name, k in [("VI", "vi")] + list(PAPER_KEYS.items())) + ".",
        ]
    m = result["machine"]
    lines += [
        "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpu_count', '?')} cores shared with other jobs (load average "
        f"{', '.join(f'{x:.1f}' for x in result.get('load_before', []))} before, "
        f"{', '.join(f'{x:.1f}' for x in result.get('load_after', []))} after: the wall times are inflated and "
        f"noisy), no GPU, jax {m.get('jax')}; run pinned to one core and niced. Wall times include compilation. "
        "SMC is not in this table (not in mcd-cli yet).",
        "",
        f"Command: `{result['command']}`",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10, help="held-out images, spread evenly over the 1,000")
    parser.add_argument("--steps", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data-batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--iwae-samples", type=int, default=65536)
    parser.add_argument("--init-step-size", type=float, default=0.002)
    parser.add_argument("--estimators", default="ULA,UHA,ULA-MCD,UHA-MCD", help="comma-separated labels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "vae_table.json")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the .json")
    args = parser.parse_args()
    if args.render:
        args.out.with_suffix(".md").write_text(render(json.loads(args.out.read_text())))
        return

    target = load_target(str(REPO / "targets" / "vae_mnist.py"))
    stride = target.num_data // args.images
    indices = list(range(0, stride * args.images, stride))
    target = target.__class__(**{**target.__dict__, "data": target.data[indices], "indices": np.asarray(indices)})
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "render")}
    settings["indices"] = indices
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    if result.get("settings") != settings:
        result = {"benchmark": "vae_table", "settings": settings, "cells": {}}
    result.update(command=command_line(), machine=machine(), load_before=list(os.getloadavg()))

    if "iwae" not in result["cells"]:
        rows, t0 = [], time.perf_counter()
        for i, x in zip(indices, target.data):
            est = summarize(iwae(target, x, jax.random.fold_in(jax.random.key(args.seed), i), args.iwae_samples))
            rows.append({"datum": i, "log_z": est.log_z, "delta_stderr": est.delta_stderr, "ess": est.ess,
                         "pareto_k": est.pareto_k, "elbo": est.elbo, "status": est.status.value})
        result["cells"]["iwae"] = cell_summary(rows, 0.0, time.perf_counter() - t0)
        write_json(args.out, result)
        log(f"IWAE: {result['cells']['iwae']['mean_log_z']:.2f}")

    for k in args.steps:
        for sampler, backward in ESTIMATORS:
            key = f"{LABELS[(sampler, backward)]}/K{k}"
            if key in result["cells"] or LABELS[(sampler, backward)] not in args.estimators.split(","):
                continue
            sconf = SamplerConfig(
                sampler=sampler, backward=backward, steps=k, hidden=32, init_step_size=args.init_step_size,
                context_dim=target.context_dim if backward == "mcd" else 0,
            )
            tconf = TrainConfig(iterations=args.iterations, batch_size=args.batch_size, lr=args.lr)
            plan = perdatum.PerDatumPlan(
                target, sconf, tconf, amortise=True, num_samples=args.samples, seed=args.seed, data_batch=args.data_batch
            )
            rows: list[dict] = []
            summary = perdatum.execute(plan, rows.append)
            result["cells"][key] = cell_summary(rows, summary["train_seconds"], summary["estimate_seconds"])
            result["load_after"] = list(os.getloadavg())
            write_json(args.out, result)
            log(f"{key}: {result['cells'][key]['mean_log_z']:.2f} (train {summary['train_seconds']:.0f} s)")
    result["load_after"] = list(os.getloadavg())
    write_json(args.out, result)
    args.out.with_suffix(".md").write_text(render(result))


if __name__ == "__main__":
    main()
