"""Reference log Z of the bundled breast-cancer logistic regression (targets/logreg_breast_cancer.yaml).

Method (independent of mcd-cli's samplers): adaptive tempered sequential Monte Carlo, in float64.
    * Path: π_β(w) ∝ N(w; 0, 10² I) · L(w)^β from the prior (β = 0, sampled exactly) to the
      posterior (β = 1). Each next β is found by bisection so that the effective sample size of the
      incremental weights L^(Δβ) is half the number of particles.
    * log Z accumulates log mean(L^(Δβ)) over the steps; particles are then resampled (systematic).
    * Mutation: `--moves` Hamiltonian Monte Carlo steps (Metropolis-corrected, `--leapfrog` leapfrog
      steps each) per temperature, preconditioned by the particles' covariance (HMC in the
      whitened coordinates u = L⁻¹(w − mean)); the step size is adapted from the acceptance rate.
The log density is written here again from the CSV (features divided by their standard deviation,
plus an intercept; labels in {0, 1}) and checked against mcd-cli's family at random points.

Cross-checks printed alongside: the Laplace approximation at the MAP (Newton's method), and
importance sampling with a multivariate Student-t (5 degrees of freedom) proposal centred at the
MAP with the inverse Hessian as scale (its effective sample size says how far to trust it).

Run (about 3 minutes per seed on one CPU core with the defaults):

    nice -n 10 python targets/data/reference_logreg.py --seeds 0 1 2 3 4 --particles 4096
    nice -n 10 python targets/data/reference_logreg.py --cross-check --is-samples 2000000

The second command adds the independent check (`cross_check`): importance sampling with a t
proposal fitted to the particles of one further SMC run, and whether the two agree.

It prints one line per seed and a JSON summary, and writes the summary to reference_logreg.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.nn import log_sigmoid  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

HERE = Path(__file__).resolve().parent
PRIOR_SCALE = 10.0


def load_design() -> tuple[np.ndarray, np.ndarray]:
    """(features with an intercept column, labels as ±1) from breast_cancer.csv."""
    table = np.loadtxt(HERE / "breast_cancer.csv", delimiter=",", skiprows=1)
    x, y = table[:, :-1], table[:, -1]
    x = np.hstack([np.ones((len(x), 1)), x / x.std(axis=0)])
    return x, 2.0 * y - 1.0


X, SIGN = load_design()
N_OBS, DIM = X.shape


def log_lik(w):
    return jnp.sum(log_sigmoid(SIGN * (X @ w)))


def log_prior(w):
    return -0.5 * jnp.sum(w**2) / PRIOR_SCALE**2 - DIM * (np.log(PRIOR_SCALE) + 0.5 * np.log(2 * np.pi))


def check_against_package() -> None:
    """The density here equals mcd-cli's bundled target (when the package is importable)."""
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    try:
        from mcd_cli.targets import load_target
    except ImportError:
        print("mcd_cli not importable: skipped the cross-check of the density")
        return
    target = load_target(str(HERE.parent / "logreg_breast_cancer.yaml"))
    w = np.random.default_rng(0).normal(0.0, 1.0, size=(5, DIM))
    ours = np.array([log_lik(v) + log_prior(v) for v in w])
    theirs = np.array([target.log_density(jnp.asarray(v)) for v in w])
    assert np.allclose(ours, theirs, rtol=1e-9, atol=1e-9), (ours, theirs)


def laplace() -> tuple[np.ndarray, np.ndarray, float]:
    """MAP, Hessian of −log posterior at the MAP, and the Laplace log Z."""
    post = jax.jit(lambda w: log_lik(w) + log_prior(w))
    grad, hess = jax.jit(jax.grad(post)), jax.jit(jax.hessian(post))
    w = jnp.zeros(DIM)
    for _ in range(100):
        step = jnp.linalg.solve(-hess(w), grad(w))
        w = w + step
        if float(jnp.max(jnp.abs(step))) < 1e-12:
            break
    h = -np.asarray(hess(w))
    log_z = float(post(w)) + 0.5 * DIM * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(h)[1]
    return np.asarray(w), h, log_z


def importance_t(key, centre, cov, num: int, df: float = 5.0, chunk: int = 100_000) -> tuple[float, float, np.ndarray]:
    """Importance sampling with a multivariate-t proposal (`df` degrees of freedom, location
    `centre`, scale matrix `cov`), in chunks: (log Z, ESS, all log weights)."""
    chol = np.linalg.cholesky(cov)
    log_det = float(np.sum(np.log(np.diag(chol))))
    log_p_batch = jax.jit(jax.vmap(lambda v: log_lik(v) + log_prior(v)))

    @jax.jit
    def draw(k):
        k1, k2 = jax.random.split(k)
        z = jax.random.normal(k1, (chunk, DIM))
        g = jax.random.gamma(k2, df / 2, (chunk,)) / (df / 2)
        u = z / jnp.sqrt(g)[:, None]
        w = centre + u @ chol.T
        log_q = (
            jax.scipy.special.gammaln((df + DIM) / 2)
            - jax.scipy.special.gammaln(df / 2)
            - 0.5 * DIM * np.log(df * np.pi)
            - log_det
            - 0.5 * (df + DIM) * jnp.log1p(jnp.sum(u**2, axis=1) / df)
        )
        return log_p_batch(w) - log_q

    log_w = np.concatenate([np.asarray(draw(k)) for k in jax.random.split(key, -(-num // chunk))])[:num]
    ess = float(np.exp(2 * logsumexp(log_w) - logsumexp(2 * log_w)))
    return float(logsumexp(log_w) - np.log(num)), ess, log_w


def next_beta(ll: np.ndarray, beta: float, target_ess: float) -> float:
    """The largest β' ≤ 1 whose incremental weights exp((β' − β) ll) keep ESS ≥ target_ess."""

    def ess(delta):
        a = delta * (ll - ll.max())
        return np.exp(2 * np.log(np.sum(np.exp(a))) - np.log(np.sum(np.exp(2 * a))))

    if ess(1.0 - beta) >= target_ess:
        return 1.0
    lo, hi = 0.0, 1.0 - beta
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ess(mid) >= target_ess else (lo, mid)
    return beta + lo


def make_hmc(num_leapfrog: int):
    """One HMC step for all particles, in whitened coordinates w = mean + chol u."""

    def potential(u, beta, mean, chol):
        w = mean + chol @ u
        return -(log_prior(w) + beta * log_lik(w))

    grad_u = jax.grad(potential)

    def one(key, u, beta, mean, chol, eps):
        k1, k2 = jax.random.split(key)
        p = jax.random.normal(k1, u.shape)
        h0 = potential(u, beta, mean, chol) + 0.5 * p @ p

        def leap(carry, _):
            q, p = carry
            p = p - 0.5 * eps * grad_u(q, beta, mean, chol)
            q = q + eps * p
            p = p - 0.5 * eps * grad_u(q, beta, mean, chol)
            return (q, p), None

        (q, p), _ = jax.lax.scan(leap, (u, p), None, length=num_leapfrog)
        h1 = potential(q, beta, mean, chol) + 0.5 * p @ p
        accept_prob = jnp.exp(jnp.minimum(0.0, h0 - h1))
        accept_prob = jnp.where(jnp.isfinite(accept_prob), accept_prob, 0.0)
        accept = jax.random.uniform(k2) < accept_prob
        return jnp.where(accept, q, u), accept_prob

    @jax.jit
    def step(key, us, beta, mean, chol, eps):
        keys = jax.random.split(key, us.shape[0])
        return jax.vmap(one, in_axes=(0, 0, None, None, None, None))(keys, us, beta, mean, chol, eps)

    return step


def systematic_resample(key, log_w) -> jax.Array:
    n = log_w.shape[0]
    cdf = jnp.cumsum(jnp.exp(log_w - logsumexp(log_w)))
    positions = (jax.random.uniform(key) + jnp.arange(n)) / n
    return jnp.minimum(jnp.searchsorted(cdf, positions), n - 1)


def tempered_smc(key, num: int, moves: int, leapfrog: int, ess_frac: float = 0.5) -> dict:
    """Adaptive tempered SMC from the prior to the posterior; returns log Z and diagnostics."""
    hmc = make_hmc(leapfrog)
    ll_batch = jax.jit(jax.vmap(log_lik))
    key, sub = jax.random.split(key)
    w = PRIOR_SCALE * jax.random.normal(sub, (num, DIM))
    beta, log_z, eps, temps, accepts = 0.0, 0.0, 0.5, 0, []
    while beta < 1.0:
        ll = np.asarray(ll_batch(w))
        new_beta = next_beta(ll, beta, ess_frac * num)
        inc = (new_beta - beta) * ll
        log_z += float(logsumexp(inc) - np.log(num))
        key, k_res = jax.random.split(key)
        w = w[systematic_resample(k_res, jnp.asarray(inc))]
        beta, temps = new_beta, temps + 1
        mean = jnp.mean(w, axis=0)
        chol = jnp.linalg.cholesky(jnp.cov(w.T) + 1e-10 * jnp.eye(DIM))
        u = jnp.linalg.solve(chol, (w - mean).T).T
        for _ in range(moves):
            key, k_mv = jax.random.split(key)
            u, acc = hmc(k_mv, u, beta, mean, chol, eps)
            rate = float(jnp.mean(acc))
            accepts.append(rate)
            eps *= 1.1 if rate > 0.8 else (0.9 if rate < 0.6 else 1.0)
        w = mean + u @ chol.T
    return {
        "log_z": log_z,
        "temperatures": temps,
        "mean_acceptance": float(np.mean(accepts)),
        "final_step": eps,
        "particles": np.asarray(w),
    }


def cross_check(args) -> None:
    """The second, independent method: importance sampling of the posterior with a multivariate-t
    proposal (5 degrees of freedom) whose location and scale are the mean and 1.2× the covariance of
    one tempered-SMC run's final particles. The proposal only steers the draws: the estimate is
    importance sampling's, unbiased in Z whatever the proposal, with its own delta-method standard
    error and Pareto k̂ (mcd-cli's `stats.summarize`). The SMC reference and this value agree when
    |Δ| ≤ 2 √(se₁² + se₂²)."""
    from mcd_cli.stats import summarize

    summary = json.loads(args.out.read_text())
    start = time.perf_counter()
    smc = tempered_smc(jax.random.key(args.proposal_seed), args.particles, args.moves, args.leapfrog)
    w = smc["particles"]
    centre, cov = w.mean(axis=0), 1.2 * np.cov(w.T)
    log_z, ess, log_w = importance_t(jax.random.key(args.proposal_seed + 1), centre, cov, args.is_samples)
    est = summarize(log_w)
    smc_reference = summary.get("tempered_smc_reference", summary)
    se_smc = smc_reference["log_z_stderr"]
    tolerance = 2.0 * float(np.hypot(se_smc, est.delta_stderr))
    summary["cross_check"] = {
        "method": (
            f"importance sampling (float64), {args.is_samples} draws from a multivariate t (5 dof) with the "
            f"mean and 1.2x the covariance of the final particles of one tempered SMC run (seed "
            f"{args.proposal_seed}, {args.particles} particles)"
        ),
        "log_z": log_z,
        "log_z_stderr": est.delta_stderr,
        "ess": ess,
        "pareto_k": est.pareto_k,
        "status": est.status.value,
        "seconds": time.perf_counter() - start,
    }
    difference = smc_reference["log_z_mean"] - log_z
    summary["cross_check"].update(
        tempered_smc_minus_this=difference, tolerance=tolerance, agrees_with_tempered_smc=bool(abs(difference) <= tolerance)
    )
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--particles", type=int, default=4096)
    parser.add_argument("--moves", type=int, default=5, help="HMC steps per temperature")
    parser.add_argument("--leapfrog", type=int, default=10, help="leapfrog steps per HMC step")
    parser.add_argument("--is-samples", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=HERE / "reference_logreg.json")
    parser.add_argument(
        "--cross-check", action="store_true",
        help="only the second method: importance sampling with a t proposal fitted to one SMC run's "
        "particles; added to the existing --out file with the agreement test",
    )
    parser.add_argument("--proposal-seed", type=int, default=100)
    args = parser.parse_args()

    check_against_package()
    if args.cross_check:
        cross_check(args)
        return
    w_map, h, log_z_laplace = laplace()
    log_z_is, ess_is, _ = importance_t(jax.random.key(12345), w_map, np.linalg.inv(h), args.is_samples)
    print(f"Laplace approximation: {log_z_laplace:.4f}")
    print(f"t-proposal importance sampling ({args.is_samples} draws): {log_z_is:.4f} (ESS {ess_is:.0f})")

    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        out = tempered_smc(jax.random.key(seed), args.particles, args.moves, args.leapfrog)
        out["seconds"] = time.perf_counter() - start
        out["seed"] = seed
        out.pop("particles")
        runs.append(out)
        print(
            f"seed {seed}: log Z = {out['log_z']:.4f}  ({out['temperatures']} temperatures, "
            f"acceptance {out['mean_acceptance']:.2f}, {out['seconds']:.0f} s)"
        )
    values = np.array([r["log_z"] for r in runs])
    summary = {
        "target": "targets/logreg_breast_cancer.yaml",
        "method": (
            f"adaptive tempered SMC (float64), {args.particles} particles, ESS-halving bisection for β, "
            f"systematic resampling, {args.moves} covariance-preconditioned HMC steps x "
            f"{args.leapfrog} leapfrog steps per temperature"
        ),
        "log_z_mean": float(values.mean()),
        "log_z_sd_over_seeds": float(values.std(ddof=1)) if len(values) > 1 else None,
        "log_z_stderr": float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None,
        "seeds": args.seeds,
        "runs": runs,
        "total_seconds": float(sum(r["seconds"] for r in runs)),
        "laplace_log_z": log_z_laplace,
        "t_importance_log_z": log_z_is,
        "t_importance_ess": ess_is,
        "t_importance_samples": args.is_samples,
        "jax_version": jax.__version__,
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
