"""log p(x) of held-out digits under the bundled VAE (`targets/vae_mnist.py`): IWAE, AIS, MCD and SMC.

Every estimator sees the same held-out images of the one VAE trained by `targets/data/train_vae.py`:

* IWAE: the encoder q(z | x) as the importance proposal, `--iwae-samples` draws per image;
* ULA, UHA (AIS) and ULA-MCD, UHA-MCD at each K of `--steps`: one sampler amortised over the images
  (step sizes, UHA's damping and mass and, for MCD, the score network conditioned on the encoder's
  outputs), trained `--iterations` updates by the ELBO on batches of images × particles, then
  `--samples` importance samples per image. The initial distribution is the encoder.
* SMC-HMC: adaptive tempered SMC from the encoder with `--smc-refine-steps` HMC moves per step
  (`--smc-refine-adaptive`), no training: `--samples` particles per image in one population, resampled (multinomial) when ESS/N
  falls below `--smc-resample`, each β chosen so that the conditional ESS/N is `--smc-target-ess`;
* ULA-MCD+SMC at each K: the amortised ULA-MCD sampler trained exactly as its row above (same
  seed and settings, so the same parameters), run inside SMC on its fixed schedule: the same
  particles, resampled when ESS/N falls below `--smc-resample` and then refined by
  `--smc-refine-fixed` moves. Its importance-sampling estimate (`log_z_is`, the same kernels
  without SMC) is kept beside it, and reproduces the ULA-MCD row. ULA-MCD+resampling: the same,
  resampled but never refined.

All are stochastic lower bounds of log p(x) in expectation, so a higher mean is better. The table
gives the mean over the images with its Monte Carlo standard error, the mean paired difference to
IWAE (the same images, so the spread over images cancels), the mean per-image ELBO, the verdict
counts and the wall times. Results: `benchmarks/results/vae_table.json` and `.md`; a rerun skips
the cells already there (`--estimators` picks the rows; each SMC row records its sampler settings,
and a change of them recomputes only that row).

    taskset -c 1 nice -n 10 python benchmarks/vae_table.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from common import RESULTS, REPO, command_line, log, machine, write_json  # noqa: E402

from mcd_cli.run import perdatum  # noqa: E402
from mcd_cli.config import SamplerConfig, TrainConfig  # noqa: E402
from mcd_cli.run import ADAPTIVE_REFINE_STEPS  # noqa: E402
from mcd_cli.stats import summarize  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from mcd_cli.targets.conditional import datum_target  # noqa: E402

ESTIMATORS = (("ula", "ais"), ("uha", "ais"), ("ula", "mcd"), ("uha", "mcd"))
# Arguments that choose what runs, or how SMC runs: not part of the settings that make cells comparable.
NOT_SETTINGS = (
    "out", "render", "estimators", "smc_resample", "smc_target_ess", "smc_refine_adaptive", "smc_refine_steps",
    "smc_refine_fixed",
)
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


def mean_or_none(values: list) -> "float | None":
    return float(np.mean(values)) if values else None


def cell_summary(rows: list[dict], seconds_train: float, seconds_estimate: float) -> dict:
    log_z = np.array([r["log_z"] for r in rows], dtype=np.float64)
    se = np.array([r["delta_stderr"] for r in rows], dtype=np.float64)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "warn", "unreliable", "failed")}
    cell = {
        "mean_log_z": float(log_z.mean()),
        "mc_stderr": float(math.sqrt(np.sum(se**2)) / len(rows)),
        "data_stderr": float(log_z.std(ddof=1) / math.sqrt(len(rows))),
        "mean_elbo": float(np.mean([r["elbo"] for r in rows])),
        "counts": counts,
        "train_seconds": round(seconds_train, 2),
        "estimate_seconds": round(seconds_estimate, 2),
        "per_image": [{k: r[k] for k in ("datum", "log_z", "delta_stderr", "ess", "pareto_k", "elbo", "status")} for r in rows],
    }
    if rows[0].get("smc") is not None:
        for r, image in zip(rows, cell["per_image"]):
            d = r["smc"]
            image.update(
                log_z_stderr_method=r["log_z_stderr_method"], steps=d["steps"][0], resamplings=d["resamplings"][0],
                final_ess=d["final_ess"][0], mean_acceptance=d["mean_acceptance"], log_z_is=d["log_z_is"],
                log_z_is_stderr=d["log_z_is_stderr"], log_z_is_status=d["log_z_is_status"],
                median_move_correlation=d.get("median_move_correlation"),
            )
        images = cell["per_image"]
        cell["smc"] = {
            "mean_steps": float(np.mean([i["steps"] for i in images])),
            "mean_resamplings": float(np.mean([i["resamplings"] for i in images])),
            "mean_acceptance": mean_or_none([i["mean_acceptance"] for i in images if i["mean_acceptance"] is not None]),
            "genealogy_se_valid": sum(i["log_z_stderr_method"] == "smc-genealogy" for i in images),
            "mean_log_z_is": None if images[0]["log_z_is"] is None else float(np.mean([i["log_z_is"] for i in images])),
        }
    return cell


def render(result: dict) -> str:
    cells, s = result["cells"], result["settings"]
    iwae_cell = cells.get("iwae")
    base = None if iwae_cell is None else np.array([r["log_z"] for r in iwae_cell["per_image"]])
    paper = json.loads((REPO.parent / "shared/reference/paper_tables.json").read_text())["vae_binarized_mnist"] if (
        REPO.parent / "shared/reference/paper_tables.json").exists() else None
    lines = [
        "# log p(x) of held-out digits under one VAE: IWAE, AIS, MCD and SMC",
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
        if key.endswith("/adaptive"):
            k = f"{cell['smc']['mean_steps']:.1f} (adaptive)"
        diff = "—"
        if base is not None and key != "iwae":
            d = np.array([r["log_z"] for r in cell["per_image"]]) - base
            diff = f"{d.mean():+.2f} ± {d.std(ddof=1) / math.sqrt(d.size):.2f}"
        c = cell["counts"]
        lines.append(
            f"| {label} | {k} | {cell['mean_log_z']:.2f} | {cell['mc_stderr']:.2f} | {cell['data_stderr']:.2f} | {diff} | "
            f"{'—' if 'smc' in cell else format(cell['mean_elbo'], '.2f')} | {c['ok']}/{c['warn']}/{c['unreliable'] + c['failed']} | "
            f"{cell['train_seconds']:.0f} | {cell['estimate_seconds']:.0f} |"
        )
    smc_cells = {key: cell for key, cell in cells.items() if "smc" in cell}
    if smc_cells:
        ss = result.get("smc_settings", {})
        lines += [
            "",
            f"SMC rows: {s['samples']} particles per image in one population, multinomial resampling when ESS/N < "
            f"{ss.get('smc_resample')}. SMC-HMC: adaptive tempering from the encoder (each β at conditional "
            f"ESS/N {ss.get('smc_target_ess')}), {ss.get('smc_refine_steps', 1)} {ss.get('smc_refine_adaptive')} "
            "moves (10 leapfrog steps each) per step (`SMC-HMC, 1 move`: one, the setting before the default became 5), "
            "no training. ULA-MCD+SMC: the ULA-MCD sampler of the table at the same K, trained identically, "
            f"inside SMC on its fixed schedule with one {ss.get('smc_refine_fixed')} move after each resampling "
            "(ULA-MCD+resampling: resampled, never refined). ± MC is then the genealogy standard error (Lee & "
            "Whiteley); the verdict is that of the final weights and the genealogy; there is no ELBO (the "
            "weights restart at each resampling).",
            "",
            "| SMC row | mean K | resamplings | acceptance | genealogy SE valid | log p̂ same kernels without SMC |",
            "|---|---|---|---|---|---|",
        ]
        for key, cell in smc_cells.items():
            c = cell["smc"]
            is_mean = "—" if c["mean_log_z_is"] is None else f"{c['mean_log_z_is']:.2f}"
            accept = "— (no moves)" if c["mean_acceptance"] is None else f"{c['mean_acceptance']:.2f}"
            lines.append(
                f"| {key} | {c['mean_steps']:.1f} | {c['mean_resamplings']:.1f} | {accept} | "
                f"{c['genealogy_se_valid']}/{len(cell['per_image'])} | {is_mean} |"
            )
    order = sorted(cells.items(), key=lambda kv: -kv[1]["mean_log_z"])
    lines += [
        "",
        "Ordering by mean log p̂(x) (higher is better; all are lower bounds in expectation): "
        + " > ".join(("IWAE" if key == "iwae" else key) + f" ({cell['mean_log_z']:.2f})" for key, cell in order)
        + ".",
    ]
    if paper is not None:
        lines += [
            "",
            "The paper's table (a different experiment: VAEs trained end to end with each sampler inside the "
            f"objective; {paper['note']}): log-likelihood "
            + ", ".join(f"{name} {paper['log_likelihood'][k][0]}" for name, k in [("VI", "vi")] + list(PAPER_KEYS.items())),
            "; ELBO " + ", ".join(f"{name} {paper['elbo'][k][0]}" for name, k in [("VI", "vi")] + list(PAPER_KEYS.items())) + ".",
        ]
    m = result["machine"]
    runs = result.get("runs") or [{k: result.get(k) for k in ("command", "load_before", "load_after")}]
    loads = lambda values: ", ".join(f"{x:.1f}" for x in values or [])  # noqa: E731
    lines += [
        "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpu_count', '?')} cores shared with other jobs (the wall times "
        f"are inflated and noisy), no GPU, jax {m.get('jax')}; every run pinned to one core and niced. Wall times "
        "include compilation. The rows were computed by these runs (load averages over 1, 5, 15 min before and "
        "after each):",
        "",
    ]
    lines += [f"- `{r['command']}` (load {loads(r.get('load_before'))} before, {loads(r.get('load_after'))} after)" for r in runs]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
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
    parser.add_argument(
        "--estimators", default="ULA,UHA,ULA-MCD,UHA-MCD,SMC-HMC,ULA-MCD+SMC,ULA-MCD+resampling",
        help="comma-separated row labels"
    )
    parser.add_argument("--smc-resample", type=float, default=0.5, help="SMC rows: resample when ESS/N falls below this")
    parser.add_argument("--smc-target-ess", type=float, default=0.5, help="SMC-HMC: conditional ESS/N of each adaptive step")
    parser.add_argument("--smc-refine-adaptive", default="hmc", help="SMC-HMC: the Metropolis move")
    parser.add_argument("--smc-refine-steps", type=int, default=ADAPTIVE_REFINE_STEPS, help="SMC-HMC: moves per step")
    parser.add_argument("--smc-refine-fixed", default="mala", help="ULA-MCD+SMC: the move after each resampling")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "vae_table.json")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the .json")
    args = parser.parse_args(argv)
    if args.render:
        args.out.with_suffix(".md").write_text(render(json.loads(args.out.read_text())))
        return

    target = load_target(str(REPO / "targets" / "vae_mnist.py"))
    stride = target.num_data // args.images
    indices = list(range(0, stride * args.images, stride))
    target = target.__class__(**{**target.__dict__, "data": target.data[indices], "indices": np.asarray(indices)})
    settings = {k: v for k, v in vars(args).items() if k not in NOT_SETTINGS}
    settings["indices"] = indices
    smc_settings = {k: getattr(args, k) for k in NOT_SETTINGS if k.startswith("smc_")}
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    if result.get("settings") != settings:
        result = {"benchmark": "vae_table", "settings": settings, "cells": {}}
    result["smc_settings"] = smc_settings
    chosen = args.estimators.split(",")
    if "runs" not in result and "command" in result:  # a result written before runs were kept apart
        result["runs"] = [{k: result[k] for k in ("command", "load_before", "load_after") if k in result}]
    result.setdefault("runs", []).append({"command": command_line(), "load_before": list(os.getloadavg())})
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
            if key in result["cells"] or LABELS[(sampler, backward)] not in chosen:
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
            summary = perdatum.execute(plan, lambda r: rows.append(r.as_dict())).as_dict()
            result["cells"][key] = cell_summary(rows, summary["train_seconds"], summary["estimate_seconds"])
            result["load_after"] = list(os.getloadavg())
            write_json(args.out, result)
            log(f"{key}: {result['cells'][key]['mean_log_z']:.2f} (train {summary['train_seconds']:.0f} s)")
    smc_cells = []
    if "SMC-HMC" in chosen:
        smc_cells.append(("SMC-HMC/adaptive", SamplerConfig(
            backward="ais", adaptive=True, refine=args.smc_refine_adaptive, resample=args.smc_resample,
            target_ess=args.smc_target_ess, refine_steps=args.smc_refine_steps,
        )))
    for label, refine in (("ULA-MCD+SMC", args.smc_refine_fixed), ("ULA-MCD+resampling", "none")):
        if label in chosen:
            smc_cells += [(f"{label}/K{k}", SamplerConfig(
                sampler="ula", backward="mcd", steps=k, hidden=32, init_step_size=args.init_step_size,
                context_dim=target.context_dim, resample=args.smc_resample, refine=refine,
            )) for k in args.steps]
    for key, sconf in smc_cells:
        if result["cells"].get(key, {}).get("sampler_config") == dataclasses.asdict(sconf):
            continue
        tconf = TrainConfig(iterations=0 if sconf.adaptive else args.iterations, batch_size=args.batch_size, lr=args.lr)
        plan = perdatum.PerDatumPlan(
            target, sconf, tconf, amortise=True, num_samples=args.samples, seed=args.seed, data_batch=args.data_batch
        )
        rows = []
        summary = perdatum.execute(plan, lambda r: rows.append(r.as_dict())).as_dict()
        result["cells"][key] = cell_summary(rows, summary["train_seconds"], summary["estimate_seconds"])
        result["load_after"] = result["runs"][-1]["load_after"] = list(os.getloadavg())
        result["cells"][key].update(command=result["runs"][-1]["command"], sampler_config=dataclasses.asdict(sconf))
        write_json(args.out, result)
        log(f"{key}: {result['cells'][key]['mean_log_z']:.2f} (train {summary['train_seconds']:.0f} s, "
            f"estimate {summary['estimate_seconds']:.0f} s)")
    result["load_after"] = result["runs"][-1]["load_after"] = list(os.getloadavg())
    write_json(args.out, result)
    args.out.with_suffix(".md").write_text(render(result))
