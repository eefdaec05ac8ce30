"""Reference log Z of the bundled LGCP target (targets/lgcp_pines.py), by two methods; meant for a GPU.

The model (written again here from fpines.csv, independently of the target file): the 126 pines
binned into a 40 × 40 grid of cells (row-major over (⌊40 u⌋, ⌊40 v⌋)), counts y; the field
x ∈ R^1600 with prior N(μ 1, K), K = 1.91 exp(−‖Δ grid index‖ / (40/33)), μ = log 126 − 1.91/2;
likelihood Σ_c [y_c x_c − exp(x_c) / 1600]. log Z = log ∫ p(y | x) N(x; μ, K) dx.

(1) **mcd's adaptive tempered SMC** (`mcd_cli.run.execute`, float32, as users run it): the target
    whitened by the prior's Cholesky factor (`transforms.whiten`, x = μ + L u), so the run starts
    from the exact prior, as the literature's SMC baselines do; no training (`--backward ais
    --iterations 0`), adaptive tempering keeping half the ESS, resampling, HMC moves (mcd's
    defaults: 15 moves of 3 leapfrog steps, adapted). `--mcd-populations` populations of
    `--mcd-particles` particles per seed, several seeds; the standard error is the spread over
    seeds over √seeds (each run's own SE is recorded beside it; with one usable run, its own).
    Runs that mcd-cli's verdict calls `unreliable` are recorded and left out of the mean, as a
    user would leave them (`unreliable_runs_left_out`). The script sets JAX's default
    matmul precision to "highest", so that the whitening product L u is a full float32 product on
    a GPU (TensorFloat-32 otherwise). One more run of the target as shipped (its declared initial
    distribution, the prior's marginals N(μ, 1.91 I); `--shipped-seeds`) is recorded beside it,
    not used in the reference.
(2) **Laplace-started tempered SMC in float64**, independent of mcd-cli's samplers and of (1)'s
    start, path and precision: Newton's method finds the posterior mode m (the log density is
    concave), H = K⁻¹ + diag(e^m / 1600) is the negative Hessian there, and the SMC runs in
    w = C⁻¹(x − m), C Cᵀ = H⁻¹, from q = N(0, I) (the Laplace approximation) to the posterior along
    q^(1−β) γ^β: each next β by bisection so that the incremental weights keep `--ess` of the
    effective sample size, systematic resampling, then `--moves` HMC moves of `--leapfrog`
    leapfrog steps (identity mass in w, step size adapted between moves towards an acceptance
    rate of 0.65-0.85). Several seeds; the standard error is the spread over seeds over √seeds.
Checks and splitting: `--mcd-start laplace` starts (1) from the Laplace Gaussian, `--smc-start
prior` starts (2) from the exact prior (in coordinates whitened by the prior's Cholesky factor);
`--grid N` runs everything on an N × N grid of the same data (a coarser grid, where the methods can
be checked against each other cheaply; (1) through an mcd-cli target built from this script's
density); `--resume FILE …` counts the runs of earlier outputs, so seeds split over processes merge.
Also printed: the Laplace approximation of log Z, and plain importance sampling from the Laplace
Gaussian (its ESS and Pareto k̂, from mcd_cli.stats) as a diagnostic. The script first checks that
its float64 log density equals the bundled target's at random points (the target in float32 to
2e-6 of the terms' magnitude, and in float64 to 1e-9), and at the end whether (1) and (2) agree
within 2·sqrt(se₁² + se₂²). The value to ship as `log_z` is (2)'s mean when they agree.

Run (on a GPU machine; about 5-7 minutes on one H100 at the defaults, estimated from the products'
operation counts, not measured: see targets/data/README.md):

    python targets/data/reference_lgcp_pines.py

`--quick` runs every part at a tiny size (88 s on one shared CPU core) to check that the script
works; it writes to a temporary file, never to reference_lgcp_pines.json, unless --out is given.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

import jax

# Full float32 matrix products on a GPU (its default is TensorFloat-32 for float32 inputs).
jax.config.update("jax_default_matmul_precision", "highest")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
GRID = 40
SIGNAL_VARIANCE = 1.91
LENGTH = GRID / 33.0  # correlation length in grid cells: N β
AREA = 1.0 / GRID**2
DIM = GRID * GRID


def set_grid(grid: int) -> None:
    """The model on a `grid × grid` grid of the same data (cells of area 1/grid², correlation length
    grid β cells, as the model defines them for any grid)."""
    global GRID, LENGTH, AREA, DIM
    GRID, LENGTH, AREA, DIM = grid, grid / 33.0, 1.0 / grid**2, grid * grid


def build_model() -> dict:
    """The model's constants in float64 numpy, from fpines.csv."""
    table = np.genfromtxt(HERE / "fpines.csv", delimiter=",", names=True)
    u, v = table["data_x"], table["data_y"]
    counts, _, _ = np.histogram2d(u, v, bins=GRID, range=[[0.0, 1.0], [0.0, 1.0]])
    rows, cols = np.meshgrid(np.arange(GRID), np.arange(GRID), indexing="ij")
    cells = np.column_stack([rows.ravel(), cols.ravel()]).astype(float)
    distance = np.sqrt(np.sum((cells[:, None, :] - cells[None, :, :]) ** 2, axis=-1))
    cov = SIGNAL_VARIANCE * np.exp(-distance / LENGTH)
    chol = np.linalg.cholesky(cov)
    precision = np.linalg.inv(cov)
    precision = 0.5 * (precision + precision.T)
    return {
        "counts": counts.ravel(),
        "num_points": len(u),
        "mean": np.log(len(u)) - SIGNAL_VARIANCE / 2,
        "cov": cov,
        "chol": chol,
        "precision": precision,
        "log_norm": -0.5 * DIM * np.log(2 * np.pi) - np.sum(np.log(np.diag(chol))),
    }


def log_density(x, model):
    """log p(y | x) + log N(x; μ, K), for one point, in the precision of x."""
    r = x - model["mean"]
    prior = model["log_norm"] - 0.5 * r @ (jnp.asarray(model["precision"], x.dtype) @ r)
    return prior + jnp.asarray(model["counts"], x.dtype) @ x - AREA * jnp.sum(jnp.exp(x))


def check_against_package(model) -> dict:
    """The float64 density here equals the bundled target's, in float32 and in float64."""
    from mcd_cli.targets import load_target

    assert model["counts"].sum() == 126 and model["num_points"] == 126
    target = load_target(str(HERE.parent / "lgcp_pines.py"))
    rng = np.random.default_rng(0)
    points = model["mean"] + (model["chol"] @ rng.standard_normal((DIM, 6))).T
    points[3:] += np.array([[1.0], [3.0], [-2.0]])
    points = points.astype(np.float32).astype(np.float64)
    with jax.enable_x64(True):
        ours = np.array([float(log_density(jnp.asarray(p), model)) for p in points])
        theirs64 = np.array([float(target.log_density(jnp.asarray(p))) for p in points])
    theirs32 = np.array([float(target.log_density(jnp.asarray(p, jnp.float32))) for p in points])
    r = points - model["mean"]
    magnitude = (
        np.abs(model["log_norm"]) + 0.5 * np.einsum("ni,ij,nj->n", r, model["precision"], r)
        + np.abs(points @ model["counts"]) + AREA * np.exp(points).sum(axis=1)
    )
    err32 = float(np.max(np.abs(theirs32 - ours) / magnitude))
    err64 = float(np.max(np.abs(theirs64 - ours)))
    assert err32 < 2e-6 and err64 < 1e-9, (err32, err64, ours, theirs32, theirs64)
    return {"float32_error_over_magnitude": err32, "float64_abs_error": err64}


# ---------------------------------------------------------------------------------------------
# (2) Laplace approximation, and tempered SMC from it, in float64


def laplace(model) -> dict:
    """The mode by Newton's method (the log density is concave), the Hessian there, log Z ≈ …"""
    x = np.full(DIM, model["mean"])
    P, y = model["precision"], model["counts"]
    for iteration in range(100):
        grad = -P @ (x - model["mean"]) + y - AREA * np.exp(x)
        hess = P + np.diag(AREA * np.exp(x))
        step = np.linalg.solve(hess, grad)
        x = x + step
        if np.max(np.abs(step)) < 1e-12:
            break
    hess = P + np.diag(AREA * np.exp(x))
    chol_h = np.linalg.cholesky(hess)
    with jax.enable_x64(True):
        peak = float(log_density(jnp.asarray(x), model))
    log_z = peak + 0.5 * DIM * np.log(2 * np.pi) - np.sum(np.log(np.diag(chol_h)))
    # C with C Cᵀ = H⁻¹: C = R⁻ᵀ for H = R Rᵀ.
    c = np.linalg.inv(chol_h).T
    return {"mode": x, "chol_cov": c, "log_z": float(log_z), "newton_iterations": iteration + 1, "peak": peak}


def path_constants(model, lap) -> dict:
    """What the path's densities need, as float64 device arrays (passed to the compiled functions
    as arguments rather than baked into them as constants)."""
    return {
        "mode": jnp.asarray(lap["mode"]), "chol_cov": jnp.asarray(lap["chol_cov"]),
        "precision": jnp.asarray(model["precision"]), "counts": jnp.asarray(model["counts"]),
        "mean": jnp.asarray(model["mean"]), "log_norm": jnp.asarray(model["log_norm"]),
        "log_det_c": jnp.asarray(np.sum(np.log(np.abs(np.diag(lap["chol_cov"]))))),
    }


def ell(w, k):
    """ℓ(w) = log γ(m + C w) + log|det C|: the posterior in the Laplace-whitened coordinates."""
    x = k["mode"] + k["chol_cov"] @ w
    r = x - k["mean"]
    prior = k["log_norm"] - 0.5 * r @ (k["precision"] @ r)
    return prior + k["counts"] @ x - AREA * jnp.sum(jnp.exp(x)) + k["log_det_c"]


def log_q(w):
    """log N(w; 0, I): the Laplace approximation in these coordinates."""
    return -0.5 * w @ w - 0.5 * DIM * np.log(2 * np.pi)


def log_pi(w, beta, k):
    return (1.0 - beta) * log_q(w) + beta * ell(w, k)


log_ratios = jax.jit(jax.vmap(lambda w, k: ell(w, k) - log_q(w), in_axes=(0, None)))


def next_beta(delta_ll: np.ndarray, beta: float, target_ess: float) -> float:
    """The largest β' ≤ 1 whose incremental weights exp((β' − β) Δ) keep ESS ≥ target_ess."""

    def ess(step):
        a = step * (delta_ll - delta_ll.max())
        return np.exp(2 * np.log(np.sum(np.exp(a))) - np.log(np.sum(np.exp(2 * a))))

    if ess(1.0 - beta) >= target_ess:
        return 1.0
    lo, hi = 0.0, 1.0 - beta
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ess(mid) >= target_ess else (lo, mid)
    return beta + lo


def systematic_resample(key, log_w) -> jax.Array:
    n = log_w.shape[0]
    cdf = jnp.cumsum(jnp.exp(log_w - logsumexp(log_w)))
    positions = (jax.random.uniform(key, dtype=log_w.dtype) + jnp.arange(n)) / n
    return jnp.minimum(jnp.searchsorted(cdf, positions), n - 1)


def _hmc_one(key, w, beta, eps, k, leapfrog: int):
    """One HMC move (identity mass) for log_pi(·, β), step size jittered by ±20%."""
    value_and_grad = jax.value_and_grad(log_pi)
    k_mom, k_eps, k_acc = jax.random.split(key, 3)
    eps = eps * jax.random.uniform(k_eps, minval=0.8, maxval=1.2, dtype=w.dtype)
    p0 = jax.random.normal(k_mom, w.shape, w.dtype)
    v0, g0 = value_and_grad(w, beta, k)

    def leap(carry, _):
        q, p, _, g = carry
        p = p + 0.5 * eps * g
        q = q + eps * p
        v, g = value_and_grad(q, beta, k)
        return (q, p + 0.5 * eps * g, v, g), None

    (q, p, v, _), _ = jax.lax.scan(leap, (w, p0, v0, g0), None, length=leapfrog)
    log_ratio = v - 0.5 * p @ p - v0 + 0.5 * p0 @ p0
    log_ratio = jnp.where(jnp.isfinite(log_ratio), log_ratio, -jnp.inf)
    accept = jnp.log(jax.random.uniform(k_acc, dtype=w.dtype)) < log_ratio
    return jnp.where(accept, q, w), accept


@functools.partial(jax.jit, static_argnames="leapfrog")
def hmc_move(key, ws, beta, eps, k, leapfrog: int):
    keys = jax.random.split(key, ws.shape[0])
    return jax.vmap(_hmc_one, in_axes=(0, 0, None, None, None, None))(keys, ws, beta, eps, k, leapfrog)


def laplace_smc(key, k, num: int, moves: int, leapfrog: int, ess_frac: float) -> dict:
    """Adaptive tempered SMC from the Laplace Gaussian to the posterior (float64; call under x64)."""
    key, sub = jax.random.split(key)
    w = jax.random.normal(sub, (num, DIM), jnp.float64)
    beta, log_z, temps, accepts, eps = 0.0, 0.0, 0, [], 0.3
    while beta < 1.0:
        delta = np.asarray(log_ratios(w, k))
        new_beta = next_beta(delta, beta, ess_frac * num)
        inc = (new_beta - beta) * delta
        log_z += float(logsumexp(inc) - np.log(num))
        key, k_res = jax.random.split(key)
        w = w[systematic_resample(k_res, jnp.asarray(inc))]
        beta, temps = new_beta, temps + 1
        for _ in range(moves):
            key, k_mv = jax.random.split(key)
            w, acc = hmc_move(k_mv, w, jnp.float64(beta), jnp.float64(eps), k, leapfrog)
            rate = float(jnp.mean(acc))
            accepts.append(rate)
            eps *= 1.15 if rate > 0.85 else (0.8 if rate < 0.65 else 1.0)
    return {"log_z": log_z, "temperatures": temps, "mean_acceptance": float(np.mean(accepts)), "final_step": eps}


def laplace_importance(key, k, num: int, chunk: int = 4096) -> dict:
    """Plain importance sampling from the Laplace Gaussian: a diagnostic (ESS, Pareto k̂)."""
    from mcd_cli.stats import summarize

    log_w = [np.asarray(log_ratios(jax.random.normal(sub, (min(chunk, num), DIM), jnp.float64), k))
             for sub in jax.random.split(key, max(1, num // chunk))]
    est = summarize(np.concatenate(log_w))
    return {"log_z": est.log_z, "log_z_stderr": est.log_z_stderr, "ess": est.ess, "pareto_k": est.pareto_k,
            "samples": int(sum(len(lw) for lw in log_w))}


# ---------------------------------------------------------------------------------------------
# (1) mcd's adaptive tempered SMC, float32


def coarse_target(model):
    """The model on a coarser grid (`--grid`) as an mcd-cli target, float32 like the bundled one
    (which exists for the 40 × 40 grid only); its initial distribution the prior's marginals."""
    from mcd_cli.targets import Target

    return Target.create(lambda x: log_density(x, model), dim=DIM, initial_mean=model["mean"],
                         initial_scale=np.sqrt(SIGNAL_VARIANCE), name=f"lgcp_pines_grid{GRID}")


def mcd_smc(seed: int, model, particles: int, populations: int, moves: int, whitened) -> dict:
    """(1) for one seed; `whitened`: "prior" (start from the exact prior), the Laplace fit (a dict
    with its mode and C, C Cᵀ = H⁻¹: start from the Laplace Gaussian), or None (as shipped)."""
    from mcd_cli import run
    from mcd_cli.config import SamplerConfig, TrainConfig
    from mcd_cli.targets import load_target
    from mcd_cli.targets.transforms import whiten

    target = load_target(str(HERE.parent / "lgcp_pines.py")) if GRID == 40 else coarse_target(model)
    if whitened == "prior":
        target = whiten(target, np.full(DIM, model["mean"]), model["chol"])
    elif whitened is not None:
        target = whiten(target, np.asarray(whitened["mode"]), np.asarray(whitened["chol_cov"]))
    sconf = SamplerConfig(backward="ais", adaptive=True, refine="hmc", resample=0.5, refine_steps=moves)
    plan = run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(iterations=0),
                       num_samples=particles * populations, particles=particles, seed=seed)
    start = time.perf_counter()
    rec = run.execute(plan).as_dict()
    return {
        "seed": seed, "log_z": rec["log_z"], "log_z_stderr": rec["log_z_stderr"],
        "log_z_stderr_method": rec["log_z_stderr_method"], "status": rec["status"],
        "reasons": rec["reasons"], "steps": rec["steps"], "mean_acceptance": rec["smc"].get("mean_acceptance"),
        "seconds": time.perf_counter() - start,
    }


def spread(values) -> tuple[float | None, float | None]:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return None, None
    return float(v.mean()), (float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else None)


def fmt(value, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every part at a tiny size, to check the script")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4], help="seeds of (2)")
    parser.add_argument("--mcd-particles", type=int, default=16384, help="(1): particles per population")
    parser.add_argument("--mcd-populations", type=int, default=4, help="(1): populations per seed")
    parser.add_argument("--mcd-moves", type=int, default=15, help="(1): HMC moves per temperature (mcd's default)")
    parser.add_argument("--mcd-seeds", type=int, nargs="*", default=[0, 1, 2], help="seeds of (1)")
    parser.add_argument("--mcd-start", choices=("prior", "laplace"), default="prior",
                        help="(1): whiten the target by the prior's Cholesky factor (start from the exact "
                             "prior) or by the Laplace fit's (start from the Laplace Gaussian)")
    parser.add_argument("--shipped-seeds", type=int, nargs="*", default=[0],
                        help="(1) on the target as shipped (diagonal initial), recorded beside the reference")
    parser.add_argument("--particles", type=int, default=16384, help="(2): particles")
    parser.add_argument("--moves", type=int, default=10, help="(2): HMC moves per temperature")
    parser.add_argument("--leapfrog", type=int, default=10, help="(2): leapfrog steps per HMC move")
    parser.add_argument("--ess", type=float, default=0.5, help="(2): fraction of the ESS kept per temperature")
    parser.add_argument("--smc-start", choices=("laplace", "prior"), default="laplace",
                        help="(2): start from the Laplace Gaussian, in coordinates whitened by it (the "
                             "reference), or from the exact prior, in coordinates whitened by its Cholesky "
                             "factor (a check on the Laplace start: same sampler, another path)")
    parser.add_argument("--is-samples", type=int, default=65536, help="importance sampling from the Laplace fit")
    parser.add_argument("--grid", type=int, default=GRID,
                        help="cells per side: a coarser grid of the same data (e.g. 10 or 20) checks the "
                             "methods where importance sampling from the Laplace fit is a third answer; "
                             "writes to a temporary file unless --out is given")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--resume", type=Path, nargs="*", default=[],
                        help="earlier outputs of this script whose runs count (same settings; their seeds "
                             "are not run again): split the work over processes, then merge")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.mcd_seeds, args.shipped_seeds = args.seeds[:2], args.mcd_seeds[:2], args.shipped_seeds[:1]
        args.mcd_particles, args.mcd_populations, args.mcd_moves = 128, 2, 2
        args.particles, args.moves, args.leapfrog, args.is_samples = 256, 2, 3, 1024
    if args.grid != GRID:
        set_grid(args.grid)
    out = args.out or (Path(tempfile.gettempdir()) / "reference_lgcp_pines.quick.json" if args.quick
                       else Path(tempfile.gettempdir()) / f"reference_lgcp_pines.grid{GRID}.json" if GRID != 40
                       else HERE / "reference_lgcp_pines.json")
    print(f"JAX {jax.__version__} on {jax.devices()[0].device_kind}; writing {out}", flush=True)

    model = build_model()
    checked = check_against_package(model) if GRID == 40 else None
    print(f"density check against the bundled target: {checked}", flush=True)
    lap, imp, smc1, smc2, shipped = {}, {}, [], [], []
    for path in args.resume:
        earlier = json.loads(path.read_text())
        for runs, part in ((smc2, "laplace_smc"), (smc1, "mcd_smc"), (shipped, "mcd_smc_as_shipped")):
            runs.extend(r for r in earlier[part]["runs"] if r["seed"] not in {q["seed"] for q in runs})

    def summary() -> dict:
        # (1)'s runs that mcd-cli itself calls `unreliable` are recorded, not averaged: a user
        # would not take their numbers either.
        usable = [r for r in smc1 if r["status"] != "unreliable"]
        mean1, se1 = spread([r["log_z"] for r in usable])
        if len(usable) == 1 and usable[0]["log_z_stderr"] is not None:
            se1 = usable[0]["log_z_stderr"]  # one run: its own standard error
        mean2, se2 = spread([r["log_z"] for r in smc2])
        both = None not in (mean1, mean2, se1, se2)
        tolerance = 2.0 * float(np.hypot(se1, se2)) if both else None
        return {
            "target": "targets/lgcp_pines.py" if GRID == 40 else f"the same model on a {GRID} x {GRID} grid",
            "grid": GRID,
            "log_z": mean2,
            "quick": bool(args.quick),
            "density_check": checked,
            "laplace": {"log_z": lap.get("log_z"), "newton_iterations": lap.get("newton_iterations")},
            "laplace_importance": imp,
            "laplace_smc": {
                "method": (
                    f"adaptive tempered SMC (float64) from the "
                    f"{'Laplace Gaussian' if args.smc_start == 'laplace' else 'prior'} to the posterior in "
                    f"coordinates whitened by it, {args.particles} particles, β by bisection keeping "
                    f"{args.ess:g} of the ESS, systematic resampling, {args.moves} HMC moves x "
                    f"{args.leapfrog} leapfrog steps per temperature"
                ),
                "log_z_mean": mean2, "log_z_stderr": se2, "seeds": args.seeds, "runs": smc2,
            },
            "mcd_smc": {
                "method": (
                    f"mcd-cli adaptive tempered SMC (float32; --backward ais --iterations 0 --resample 0.5 "
                    f"--refine hmc --schedule adaptive, {args.mcd_moves} moves) on the target whitened by "
                    f"the {'prior' if args.mcd_start == 'prior' else 'Laplace fit'}'s Cholesky factor, "
                    f"{args.mcd_populations} populations x "
                    f"{args.mcd_particles} particles per seed"
                ),
                "log_z_mean": mean1, "log_z_stderr": se1, "seeds": args.mcd_seeds, "runs": smc1,
                "unreliable_runs_left_out": len(smc1) - len(usable),
            },
            "mcd_smc_as_shipped": {
                "method": "as mcd_smc, on the target as shipped (initial N(μ, 1.91 I), not whitened)",
                "runs": shipped,
            },
            "mcd_minus_laplace_smc": (mean1 - mean2) if both else None,
            "agreement_tolerance": tolerance,
            "agree": bool(abs(mean1 - mean2) <= tolerance) if both else None,
            "jax_version": jax.__version__,
            "device": jax.devices()[0].device_kind,
        }

    def save() -> None:  # after every run, so that a run cut short leaves what it finished
        out.write_text(json.dumps(summary(), indent=2) + "\n")

    with jax.enable_x64(True):
        start = time.perf_counter()
        lap.update(laplace(model))
        print(f"Laplace: log Z ≈ {lap['log_z']:.4f} ({lap['newton_iterations']} Newton steps)", flush=True)
        k = path_constants(model, lap)  # the Laplace fit's coordinates: importance sampling's, and (2)'s start
        imp.update(laplace_importance(jax.random.key(12345), k, args.is_samples))
        if args.smc_start == "prior":
            k = path_constants(model, {"mode": np.full(DIM, model["mean"]), "chol_cov": model["chol"]})
        imp["seconds"] = time.perf_counter() - start
        print(f"importance sampling from the Laplace fit: {imp}", flush=True)
        save()
        for seed in args.seeds:
            if any(r["seed"] == seed for r in smc2):
                continue
            start = time.perf_counter()
            r = laplace_smc(jax.random.key(seed), k, args.particles, args.moves, args.leapfrog, args.ess)
            r.update(seed=seed, seconds=time.perf_counter() - start)
            smc2.append(r)
            save()
            print(f"(2) seed {seed}: log Z = {r['log_z']:.4f} ({r['temperatures']} temperatures, "
                  f"acceptance {r['mean_acceptance']:.2f}, {r['seconds']:.0f} s)", flush=True)

    start_at = "prior" if args.mcd_start == "prior" else lap
    for seeds, runs, whitened, label in ((args.mcd_seeds, smc1, start_at, "(1)"),
                                         (args.shipped_seeds, shipped, None, "(1, as shipped)")):
        for seed in seeds:
            if any(r["seed"] == seed for r in runs):
                continue
            r = mcd_smc(seed, model, args.mcd_particles, args.mcd_populations, args.mcd_moves, whitened)
            runs.append(r)
            save()
            print(f"{label} seed {seed}: log Z = {fmt(r['log_z'])} ± {fmt(r['log_z_stderr'])} ({r['status']} "
                  f"{r['reasons']}, {r['steps']} steps, {r['seconds']:.0f} s)", flush=True)

    final = summary()
    print(json.dumps({k: v for k, v in final.items() if k not in ("laplace_smc", "mcd_smc")}, indent=2))
    print(f"(1) mcd SMC {fmt(final['mcd_smc']['log_z_mean'])} ± {fmt(final['mcd_smc']['log_z_stderr'])} vs "
          f"(2) Laplace-started SMC {fmt(final['laplace_smc']['log_z_mean'])} ± "
          f"{fmt(final['laplace_smc']['log_z_stderr'])}: agree = {final['agree']}")

if __name__ == "__main__":
    main()
