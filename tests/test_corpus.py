"""The corpus of textbook models with exact evidence (benchmarks/questions/calibration_targets/corpus/).

A reference log Z is shipped only when two independent methods agree. For every file of the
corpus, this checks

- that the project's loader reads it (`load_target`), with the stated dimension, and that the
  target's `log_z` is the file's own `log_z` called on the file's data;
- the file's log Z against the **loaded target's own density** integrated numerically: a
  tensor-product trapezoid rule on a grid whitened by the density's Laplace fit for d ≤ 5 (the
  density is PyMC's or NumPyro's, log-Jacobians of the transforms included), and for the two
  hierarchical models (d = 9, 10) a two-dimensional grid over (mu, log tau), the group effects
  integrated out exactly through their Gaussian conditional (see `conditional_grid`);
- the file's log Z against a **second closed form or quadrature** written independently of the
  file's: a sequential (chain-rule) product of posterior predictives, a multivariate Student t,
  SciPy's Beta–binomial or Dirichlet–multinomial, a 2-D quadrature over (mu, tau), or a 1-D
  quadrature over log tau of another form of the marginal.

The integrals run in float64 (`jax.enable_x64`); the targets themselves run in float32, as mcd does.
Skipped when the `pymc` or `numpyro` extra is not installed.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import dblquad, quad
from scipy.optimize import minimize
from scipy.special import logsumexp
from scipy.stats import betabinom, dirichlet_multinomial, halfnorm, multivariate_t, nbinom

pytest.importorskip("pymc")
pytest.importorskip("numpyro")

from mcd_cli.targets import load_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "questions" / "calibration_targets" / "corpus"

# file stem: (d, framework)
FILES = {
    "normal_nig": (2, "numpyro"),
    "normal_nig_pymc": (2, "pymc"),
    "linreg_nig": (5, "pymc"),
    "eight_schools_noncentred": (10, "pymc"),
    "dirichlet_categorical": (4, "numpyro"),
    "exponential_gamma": (1, "numpyro"),
    "poisson_gamma": (1, "pymc"),
    "beta_binomial_groups": (3, "pymc"),
    "poisson_exposure": (1, "numpyro"),
    "normal_precision": (1, "pymc"),
    "multinomial_dirichlet": (3, "pymc"),
    "hierarchical_normal": (9, "numpyro"),
}
GRID = [name for name, (dim, _) in FILES.items() if dim <= 5]

# Tolerance of the numerical integrals of the target's density against the file's log Z. The grids
# are converged far below it (halving the step or widening the box moves the integrals by < 1e-6),
# and NumPyro's densities in float64 reproduce the closed forms to 1e-9; PyMC's JAX graphs keep
# some constants folded in float32 when they are compiled (the loader compiles without x64), which
# shifts their float64 density by a constant of up to 4e-6 (measured: normal_nig_pymc −3.7e-6,
# linreg_nig −3e-6, poisson_gamma −1.3e-6, multinomial_dirichlet +1.2e-6). 2e-5 covers both with a
# margin and is still 50 times below the 1e-3 that float32 estimates can resolve.
GRID_TOL = 2e-5
# Two float64 formulas of one number: rounding only (sums of ~50 log Γ terms of size up to 10³).
CLOSED_TOL = 1e-9
# Adaptive quadratures asked for a relative accuracy of 1e-10 on integrals of order 1.
QUAD_TOL = 1e-7


def path_of(name: str) -> str:
    return str(CORPUS / f"{name}.py")


def import_file(name: str):
    """The file as a fresh module (not the loader's), for its `log_z` and its data."""
    spec = importlib.util.spec_from_file_location(f"corpus_{name}", path_of(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plain(value):
    """A module-level value as an array: a `pm.Data` container's value, or the value itself."""
    if hasattr(value, "get_value"):
        return np.asarray(value.get_value())
    return np.asarray(value)


def data_of(module) -> dict:
    """The file's data, by the names its `log_z` takes."""
    return {k: plain(getattr(module, k)) for k in inspect.signature(module.log_z).parameters}


@pytest.fixture(scope="module")
def loaded():
    return {name: load_target(path_of(name)) for name in FILES}


@pytest.fixture(scope="module")
def modules():
    return {name: import_file(name) for name in FILES}


@pytest.mark.parametrize("name", FILES)
def test_loads_with_its_dimension_and_the_files_log_z(loaded, modules, name):
    target, module = loaded[name], modules[name]
    assert target.dim == FILES[name][0]
    assert target.params["model"] == "model"
    assert target.log_z == pytest.approx(module.log_z(**data_of(module)), abs=1e-12)
    assert np.isfinite(target.log_z)


# --- the loaded target's own density, integrated ---------------------------------------------------


def laplace(log_density, dim: int) -> tuple:
    """The mode of `log_density` (float64) and the inverse of its negative Hessian there."""
    value_and_grad = jax.jit(jax.value_and_grad(lambda x: -log_density(x)))
    hessian = jax.jit(jax.hessian(lambda x: -log_density(x)))

    def fun(x):
        v, g = value_and_grad(jnp.asarray(x))
        return float(v), np.asarray(g, dtype=np.float64)

    res = minimize(fun, np.zeros(dim), jac=True, method="BFGS", options={"gtol": 1e-8, "maxiter": 5000})
    res = minimize(fun, res.x, jac=True, method="Newton-CG", hess=lambda x: np.asarray(hessian(jnp.asarray(x))),
                   options={"xtol": 1e-12})
    return res.x, np.linalg.inv(np.asarray(hessian(jnp.asarray(res.x)), dtype=np.float64))


def grid_log_integral(log_density, mean, cov, half_width: float, step: float, chunk: int = 1 << 18) -> float:
    """log ∫ exp(log_density(x)) dx by the trapezoid rule on the grid x = mean + L u, u ∈ {−W, …, W}^d
    with spacing `step` (L Lᵀ = cov): for a smooth density that is negligible at the box's edge, the
    rule converges faster than any power of the step (endpoints carry no weight there)."""
    d = len(mean)
    chol = np.linalg.cholesky(cov)
    nodes = np.arange(-half_width, half_width + step / 2, step)
    points = np.stack(np.meshgrid(*([nodes] * d), indexing="ij"), -1).reshape(-1, d)
    evaluate = jax.jit(jax.vmap(log_density))
    parts = [
        logsumexp(np.asarray(evaluate(jnp.asarray(mean + points[i : i + chunk] @ chol.T)), dtype=np.float64))
        for i in range(0, len(points), chunk)
    ]
    return float(logsumexp(parts) + d * np.log(step) + np.sum(np.log(np.diag(chol))))


# (half-width in standard deviations of the Laplace fit, step): the box holds all but < 1e-9 of the
# mass (the slowest tails, the stick-breaking coordinates of the Dirichlet, decay like e^{−2u}), and
# halving the step changes the integrals by < 1e-6. 31⁴ and 17⁵ points for d = 4 and 5.
GRID_SETTINGS = {1: (10.0, 0.25), 2: (10.0, 0.25), 3: (10.0, 0.4), 4: (9.0, 0.6), 5: (8.0, 1.0)}


@pytest.mark.parametrize("name", GRID)
def test_the_targets_density_integrates_to_log_z(loaded, name):
    """∫ exp(target density) over R^d (PyMC's or NumPyro's, log-Jacobians included) = exp(log Z)."""
    target = loaded[name]
    with jax.enable_x64(True):
        mean, cov = laplace(target.log_density, target.dim)
        value = grid_log_integral(target.log_density, mean, cov, *GRID_SETTINGS[target.dim])
    assert value == pytest.approx(target.log_z, abs=GRID_TOL)


def conditional_grid(target, layout, conditional, mu_nodes, log_tau_nodes) -> float:
    """log ∫∫ p(y, mu, log tau) dmu dlog tau for a hierarchical normal model, from the target's density.

    Given (mu, tau), the group effects' posterior is Gaussian, N(m, diag(v)) (`conditional`), so
    p(y, mu, log tau) = p(y, mu, log tau, effects) / N(effects; m, v) for any effects: at effects = m,
    log p(y, mu, log tau) = target(mu, log tau, m) + ½ Σ log(2π v). The 2-D integral is a trapezoid
    rule over a box that holds the mass (the log tau tail below the box is O(e^{lower edge})).
    `layout(mu, log_tau, effects)` builds the target's point."""

    def log_marginal(mu_log_tau):
        mu, log_tau = mu_log_tau[0], mu_log_tau[1]
        mean, var = conditional(mu, jnp.exp(log_tau))
        return target.log_density(layout(mu, log_tau, mean)) + 0.5 * jnp.sum(jnp.log(2 * jnp.pi * var))

    mu, log_tau = np.meshgrid(mu_nodes, log_tau_nodes, indexing="ij")
    points = jnp.asarray(np.stack([mu.ravel(), log_tau.ravel()], -1))
    values = np.asarray(jax.jit(jax.vmap(log_marginal))(points), dtype=np.float64)
    cell = (mu_nodes[1] - mu_nodes[0]) * (log_tau_nodes[1] - log_tau_nodes[0])
    return float(logsumexp(values) + np.log(cell))


def test_eight_schools_density_integrates_to_log_z(loaded, modules):
    """PyMC's x = (mu, tau_log__, eta[8]); eta_j | mu, tau, y_j ~ N(tau (y_j − mu) / s_j² / P_j, 1 / P_j),
    P_j = 1 + tau² / s_j²."""
    target, module = loaded["eight_schools_noncentred"], modules["eight_schools_noncentred"]
    y, s = module.y, module.sigma
    x = jnp.arange(10.0) / 10
    user = target.user_values(x)
    assert float(user["mu"]) == pytest.approx(0.0) and float(user["tau"]) == pytest.approx(np.exp(0.1), rel=1e-6)
    np.testing.assert_allclose(np.asarray(user["eta"]), np.arange(2, 10) / 10, rtol=1e-6)

    def conditional(mu, tau):
        precision = 1.0 + tau**2 / s**2
        return tau * (y - mu) / s**2 / precision, 1.0 / precision

    with jax.enable_x64(True):
        value = conditional_grid(
            target, lambda mu, log_tau, eta: jnp.concatenate([jnp.stack([mu, log_tau]), eta]), conditional,
            np.linspace(-35.0, 45.0, 321), np.linspace(-25.0, 8.0, 661),
        )
    assert value == pytest.approx(target.log_z, abs=GRID_TOL)


def test_hierarchical_normal_density_integrates_to_log_z(loaded, modules):
    """NumPyro's x = (mu, log tau, theta[7]) (sites by name); theta_j | mu, tau, y_j is Gaussian with
    precision 1/tau² + 1/s_j² and mean (mu/tau² + y_j/s_j²) / precision."""
    target, module = loaded["hierarchical_normal"], modules["hierarchical_normal"]
    y, s = module.y, module.sigma
    x = jnp.arange(9.0) / 10
    user = target.user_values(x)
    assert float(user["mu"]) == pytest.approx(0.0) and float(user["tau"]) == pytest.approx(np.exp(0.1), rel=1e-6)
    np.testing.assert_allclose(np.asarray(user["theta"]), np.arange(2, 9) / 10, rtol=1e-6)

    def conditional(mu, tau):
        precision = 1.0 / tau**2 + 1.0 / s**2
        return (mu / tau**2 + y / s**2) / precision, 1.0 / precision

    with jax.enable_x64(True):
        value = conditional_grid(
            target, lambda mu, log_tau, theta: jnp.concatenate([jnp.stack([mu, log_tau]), theta]), conditional,
            np.linspace(-30.0, 20.0, 251), np.linspace(-25.0, 5.0, 601),
        )
    assert value == pytest.approx(target.log_z, abs=GRID_TOL)


# --- a second closed form or quadrature, independent of the file's -------------------------------


def sequential_log_z(log_predictive, n: int) -> float:
    """Σ_i log p(datum_i | data before i): the chain rule of the evidence."""
    return float(sum(log_predictive(i) for i in range(n)))


def normal_nig_t(m):
    """Marginally y ~ t_{2 a0}(m0 1, (b0 / a0)(I + 11ᵀ / κ0)), a multivariate Student t."""
    y = data_of(m)["y"]
    n = len(y)
    shape = m.B0 / m.A0 * (np.eye(n) + np.ones((n, n)) / m.KAPPA0)
    return float(multivariate_t(np.full(n, m.M0), shape, df=2 * m.A0).logpdf(y))


def linreg_t(m):
    """Marginally y ~ t_{2 a0}(X m0, (b0 / a0)(I + X V0 Xᵀ)), V0 = diag(PRIOR_SD²)."""
    d = data_of(m)
    X, y = d["X"], d["price"]
    shape = m.B0 / m.A0 * (np.eye(len(y)) + X @ np.diag(m.PRIOR_SD**2) @ X.T)
    return float(multivariate_t(X @ m.M0, shape, df=2 * m.A0).logpdf(y))


def dirichlet_categorical_polya(m):
    """Pólya urn: p(y_i = k | y_<i) = (α_k + #{j < i: y_j = k}) / (A + i)."""
    y = data_of(m)["y"]
    alpha = m.ALPHA
    return sequential_log_z(lambda i: np.log(alpha[y[i]] + np.sum(y[:i] == y[i])) - np.log(alpha.sum() + i), len(y))


def exponential_gamma_lomax(m):
    """t_i | t_<i ~ Lomax: a_i b_i^{a_i} / (b_i + t_i)^{a_i + 1}, a_i = a0 + i, b_i = b0 + Σ_{j<i} t_j."""
    t = data_of(m)["t"]

    def log_predictive(i):
        a, b = m.A0 + i, m.B0 + np.sum(t[:i])
        return np.log(a) + a * np.log(b) - (a + 1) * np.log(b + t[i])

    return sequential_log_z(log_predictive, len(t))


def poisson_gamma_negbin(m):
    """k_i | k_<i ~ NegBinomial(a0 + Σ_{j<i} k_j, (b0 + i) / (b0 + i + 1)) (SciPy's nbinom)."""
    k = data_of(m)["counts"]
    return sequential_log_z(lambda i: nbinom(m.A0 + np.sum(k[:i]), (m.B0 + i) / (m.B0 + i + 1)).logpmf(k[i]), len(k))


def poisson_exposure_negbin(m):
    """k_i | k_<i ~ NegBinomial(a_i, b_i / (b_i + t_i)), a_i = a0 + Σ_{j<i} k_j, b_i = b0 + Σ_{j<i} t_j."""
    d = data_of(m)
    t, k = d["exposure"], d["failures"]

    def log_predictive(i):
        a, b = m.A0 + np.sum(k[:i]), m.B0 + np.sum(t[:i])
        return nbinom(a, b / (b + t[i])).logpmf(k[i])

    return sequential_log_z(log_predictive, len(k))


def beta_binomial_scipy(m):
    """Σ_g log BetaBinomial(k_g; n_g, a, b) (SciPy's betabinom)."""
    d = data_of(m)
    return float(np.sum(betabinom(d["n"], m.A, m.B).logpmf(d["k"])))


def normal_precision_t(m):
    """Marginally y ~ t_{2 a0}(μ 1, (b0 / a0) I), a multivariate Student t (not independent coordinates)."""
    y = data_of(m)["y"]
    return float(multivariate_t(np.full(len(y), m.MU), m.B0 / m.A0 * np.eye(len(y)), df=2 * m.A0).logpdf(y))


def multinomial_scipy(m):
    """log DirichletMultinomial(votes; α, N) (SciPy's dirichlet_multinomial)."""
    votes = data_of(m)["votes"]
    return float(dirichlet_multinomial(m.ALPHA, int(votes.sum())).logpmf(votes))


def eight_schools_dblquad(m):
    """∫∫ N(mu; 0, 5²) HalfCauchy(tau; 5) Π_j N(y_j; mu, s_j² + tau²) dmu dtau: eta integrated out
    school by school (not mu), a 2-D adaptive quadrature."""
    y, s = m.y, m.sigma
    shift = 31.0  # log Z ≈ −31: the integrand near 1
    # The densities written out (scipy.stats' per-call overhead made this test 25 s); equal to
    # norm.logpdf(mu, 0, MU_SCALE) + halfcauchy.logpdf(tau, scale=TAU_SCALE) + Σ norm.logpdf(y, mu, √v).
    log_prior0 = -math.log(m.MU_SCALE) - 0.5 * math.log(2 * math.pi) + math.log(2 / (math.pi * m.TAU_SCALE)) + shift

    def integrand(mu, tau):
        v = s * s + tau * tau
        log_p = log_prior0 - 0.5 * (mu / m.MU_SCALE) ** 2 - math.log1p((tau / m.TAU_SCALE) ** 2)
        return math.exp(log_p - 0.5 * float(np.sum(np.log(2 * math.pi * v) + (y - mu) ** 2 / v)))

    value, _ = dblquad(integrand, 0.0, np.inf, -np.inf, np.inf, epsabs=0.0, epsrel=1e-9)  # converged: 1e-8 and
    # 1e-10 give the same double
    return float(np.log(value) - shift)


def hierarchical_log_tau(m):
    """∫ tau HalfNormal(tau; 5) p(y | tau) d log tau, with p(y | tau) in scalar form (mu integrated
    against the precision-weighted sum): v_j = s_j² + tau², P = Σ 1/v_j + 1/S²,
    log p(y | tau) = −½ Σ log 2π v_j − ½ log S² P − ½ Σ y_j²/v_j + ½ (Σ y_j/v_j)² / P."""
    y, s, scale = m.y, m.sigma, m.MU_SCALE

    def log_marginal(tau):
        v = s**2 + tau**2
        p = np.sum(1 / v) + 1 / scale**2
        return (-0.5 * np.sum(np.log(2 * np.pi * v)) - 0.5 * np.log(scale**2 * p)
                - 0.5 * np.sum(y**2 / v) + 0.5 * np.sum(y / v) ** 2 / p)

    shift = 20.0  # log Z ≈ −21: the integrand near 1
    value, _ = quad(
        lambda u: np.exp(u + halfnorm.logpdf(np.exp(u), scale=m.TAU_SCALE) + log_marginal(np.exp(u)) + shift),
        -40.0, 10.0, epsabs=0.0, epsrel=1e-11, limit=400,
    )  # below, the integrand is < e^{u}; above, HalfNormal(5) has left nothing (e^{−10⁷})
    return float(np.log(value) - shift)


SECOND = {
    "normal_nig": (normal_nig_t, CLOSED_TOL),
    "normal_nig_pymc": (normal_nig_t, CLOSED_TOL),
    "linreg_nig": (linreg_t, CLOSED_TOL),
    "eight_schools_noncentred": (eight_schools_dblquad, QUAD_TOL),
    "dirichlet_categorical": (dirichlet_categorical_polya, CLOSED_TOL),
    "exponential_gamma": (exponential_gamma_lomax, CLOSED_TOL),
    "poisson_gamma": (poisson_gamma_negbin, CLOSED_TOL),
    "beta_binomial_groups": (beta_binomial_scipy, CLOSED_TOL),
    "poisson_exposure": (poisson_exposure_negbin, CLOSED_TOL),
    "normal_precision": (normal_precision_t, CLOSED_TOL),
    "multinomial_dirichlet": (multinomial_scipy, CLOSED_TOL),
    "hierarchical_normal": (hierarchical_log_tau, QUAD_TOL),
}


@pytest.mark.parametrize("name", FILES)
def test_a_second_form_of_the_evidence_agrees(modules, name):
    module = modules[name]
    second, tol = SECOND[name]
    assert second(module) == pytest.approx(module.log_z(**data_of(module)), abs=tol)


# --- copies of one model ------------------------------------------------------------------------------


def test_the_pymc_and_numpyro_normal_nig_are_one_density(loaded):
    """NumPyro orders its sites by name, (mu, log sigma2); PyMC by declaration, (log sigma2, mu)."""
    numpyro_nig, pymc_nig = loaded["normal_nig"], loaded["normal_nig_pymc"]
    assert numpyro_nig.log_z == pymc_nig.log_z
    x = jnp.array([9.8, np.log(0.0016)]) + jnp.array([0.02, 0.5]) * jax.random.normal(jax.random.key(0), (16, 2))
    np.testing.assert_allclose(
        np.asarray(jax.vmap(numpyro_nig.log_density)(x)), np.asarray(jax.vmap(pymc_nig.log_density)(x[:, ::-1])),
        rtol=2e-6, atol=2e-4,  # float32 densities of order 40–80 with a data scale of 0.04
    )


def test_eight_schools_is_the_numpyro_examples_model(loaded):
    """The same model and data as targets/numpyro/eight_schools.py: its x is (eta[8], mu, log tau)."""
    pymc_8, numpyro_8 = loaded["eight_schools_noncentred"], load_target(str(ROOT / "targets" / "numpyro" / "eight_schools.py"))
    assert pymc_8.log_z == pytest.approx(numpyro_8.log_z, abs=1e-9)
    x = jax.random.normal(jax.random.key(1), (16, 10))
    reordered = jnp.concatenate([x[:, 2:], x[:, :2]], axis=1)
    np.testing.assert_allclose(
        np.asarray(jax.vmap(pymc_8.log_density)(x)), np.asarray(jax.vmap(numpyro_8.log_density)(reordered)),
        rtol=2e-6, atol=2e-5,
    )

