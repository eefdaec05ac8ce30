"""The built-in families against independent implementations (scipy, numpy) and closed-form log Z.

Densities are compared with scipy.stats at fixed random points (float32 tolerance); normalising
constants by quadrature on fine grids (trapezoid rule, error far below the stated tolerances) or by
closed forms computed a second, independent way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import logsumexp

from mcd_cli.targets import FAMILIES, TargetError, load_target
from mcd_cli.targets.bundled import bundled_dir
from mcd_cli.targets.families import double_well_log_z, linear_regression_log_evidence

RTOL = 2e-5  # float32 evaluation of sums of a few dozen terms


def values(target, points: np.ndarray) -> np.ndarray:
    return np.asarray(jax.vmap(target.log_density)(jnp.asarray(points, jnp.float32)), np.float64)


def grid_log_z(target, lo: float, hi: float, n: int) -> float:
    """log ∫ exp(log γ) over [lo, hi]^d (d = 1 or 2) by the trapezoid rule."""
    g, h = np.linspace(lo, hi, n, retstep=True)
    pts = g[:, None] if target.dim == 1 else np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    return float(logsumexp(values(target, pts)) + target.dim * np.log(h))


@pytest.fixture
def points():
    return np.random.default_rng(0).normal(0.0, 2.0, size=(16, 4))


def test_normal_normalised_and_not(points):
    t = FAMILIES["normal"](dim=4, loc=1.0, scale=2.0)
    assert t.log_z == 0.0
    np.testing.assert_allclose(values(t, points), stats.norm.logpdf(points, 1.0, 2.0).sum(1), rtol=RTOL)
    k = FAMILIES["normal"](dim=4, loc=1.0, scale=2.0, normalized=False)
    assert k.log_z == pytest.approx(2 * np.log(2 * np.pi) + 4 * np.log(2.0), rel=1e-12)
    np.testing.assert_allclose(
        values(k, points), -0.5 * (((points - 1.0) / 2.0) ** 2).sum(1), rtol=RTOL, atol=1e-5
    )


def test_normal_with_covariance_has_Z_not_one():
    cov = [[2.0, 0.9], [0.9, 0.5]]
    t = FAMILIES["normal"](dim=2, cov=cov, normalized=False)
    assert t.log_z == pytest.approx(np.log(2 * np.pi) + 0.5 * np.log(np.linalg.det(cov)), rel=1e-12)
    assert grid_log_z(t, -9.0, 9.0, 901) == pytest.approx(t.log_z, abs=1e-4)
    x = np.random.default_rng(1).normal(size=(5, 2))
    n = FAMILIES["normal"](dim=2, loc=0.5, cov=cov)
    np.testing.assert_allclose(
        values(n, x), stats.multivariate_normal(np.full(2, 0.5), cov).logpdf(x), rtol=RTOL
    )
    with pytest.raises(TargetError, match="symmetric positive-definite"):
        FAMILIES["normal"](dim=2, cov=[[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(TargetError, match="either parameter 'scale' or parameter 'cov'"):
        FAMILIES["normal"](dim=2, cov=cov, scale=2.0)


def test_gaussian_mixture_means_follow_the_documented_generator(points):
    t = FAMILIES["gaussian_mixture"](dim=4, num_components=8, mean_center=3.0, mean_spread=1.0, seed=0)
    means = np.random.default_rng(0).normal(3.0, 1.0, size=(8, 4))
    ref = logsumexp(stats.norm.logpdf(points[:, None, :], means, 1.0).sum(-1) - np.log(8), axis=1)
    np.testing.assert_allclose(values(t, points), ref, rtol=RTOL)
    one = FAMILIES["gaussian_mixture"](
        dim=1, means=[[-2.0], [1.0], [4.0]], weights=[1.0, 2.0, 1.0], scale=0.7
    )
    assert grid_log_z(one, -12.0, 12.0, 4001) == pytest.approx(0.0, abs=1e-6)


def test_laplace_and_student_t_match_scipy(points):
    lap = FAMILIES["laplace"](dim=4, loc=0.5, scale=1.5)
    np.testing.assert_allclose(values(lap, points), stats.laplace.logpdf(points, 0.5, 1.5).sum(1), rtol=RTOL)
    st = FAMILIES["student_t"](dim=4, df=3.0, loc=-1.0, scale=0.5)
    np.testing.assert_allclose(values(st, points), stats.t.logpdf(points, 3.0, -1.0, 0.5).sum(1), rtol=RTOL)
    assert lap.log_z == st.log_z == 0.0


def test_funnel_matches_its_definition(points):
    t = FAMILIES["funnel"](dim=4, scale=3.0)
    ref = stats.norm.logpdf(points[:, 0], 0.0, 3.0) + stats.norm.logpdf(
        points[:, 1:], 0.0, np.exp(points[:, :1] / 2)
    ).sum(1)
    np.testing.assert_allclose(values(t, points), ref, rtol=RTOL)
    assert t.log_z == 0.0


def test_many_well_log_z_against_adaptive_quadrature(points):
    one_d, _ = integrate.quad(
        lambda x: np.exp(-(x**4) + 6 * x**2 + 0.5 * x), -np.inf, np.inf, epsabs=0, epsrel=1e-13
    )
    assert double_well_log_z() == pytest.approx(np.log(one_d), abs=1e-12)
    t = FAMILIES["many_well"](dim=32)
    assert t.log_z == pytest.approx(16 * (np.log(one_d) + 0.5 * np.log(2 * np.pi)), abs=1e-9)
    assert t.log_z == pytest.approx(164.6956753, abs=1e-6)
    two = FAMILIES["many_well"](dim=2)
    assert grid_log_z(two, -6.0, 6.0, 1201) == pytest.approx(two.log_z, abs=1e-5)
    four = FAMILIES["many_well"](dim=4)
    a, b = points[:, 0::2], points[:, 1::2]
    np.testing.assert_allclose(
        values(four, points), (-(a**4) + 6 * a**2 + 0.5 * a - 0.5 * b**2).sum(1), rtol=RTOL
    )


def _csv(tmp_path, text: str) -> str:
    path = tmp_path / "d.csv"
    path.write_text(text)
    return str(path)


def test_logistic_regression_matches_numpy(tmp_path):
    data = np.random.default_rng(2).normal(size=(30, 3)) * [1.0, 5.0, 0.1]
    labels = (data[:, 0] + np.random.default_rng(3).normal(size=30) > 0).astype(int)
    text = "a,b,c,y\n" + "\n".join(
        ",".join(map(repr, [*row.tolist(), int(lab)])) for row, lab in zip(data, labels, strict=True)
    )
    t = FAMILIES["logistic_regression"](data=_csv(tmp_path, text), prior_scale=3.0)
    assert t.dim == 4 and t.log_z is None
    x = np.hstack([np.ones((30, 1)), data / data.std(0)])
    w = np.random.default_rng(4).normal(size=(5, 4))
    eta = w @ x.T
    ref = (labels * eta - np.logaddexp(0, eta)).sum(1) + stats.norm.logpdf(w, 0, 3.0).sum(1)
    np.testing.assert_allclose(values(t, w), ref, rtol=RTOL)


def test_regression_data_errors(tmp_path):
    with pytest.raises(TargetError, match="needs params.data"):
        FAMILIES["logistic_regression"]()
    with pytest.raises(TargetError, match="data file not found"):
        FAMILIES["logistic_regression"](data=str(tmp_path / "none.csv"))
    with pytest.raises(TargetError, match=r"d.csv line 3: not a number"):
        FAMILIES["linear_regression"](data=_csv(tmp_path, "a,y\n1,2\nx,3\n"))
    with pytest.raises(TargetError, match="labels in .* must be 0 or 1"):
        FAMILIES["logistic_regression"](data=_csv(tmp_path, "a,y\n1,2\n2,0\n"))
    with pytest.raises(TargetError, match="no column 'z'"):
        FAMILIES["linear_regression"](data=_csv(tmp_path, "a,y\n1,2\n2,0\n"), response_column="z")


def test_linear_regression_evidence_two_ways(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(12, 2))
    y = x @ [1.0, -2.0] + 0.3 * rng.normal(size=12)
    text = "a,b,y\n" + "\n".join(
        ",".join(map(repr, [*r.tolist(), float(v)])) for r, v in zip(x, y, strict=True)
    )
    t = FAMILIES["linear_regression"](
        data=_csv(tmp_path, text), noise_scale=0.5, prior_scale=2.0, standardize=False
    )
    design = np.hstack([np.ones((12, 1)), x])
    marginal = stats.multivariate_normal(np.zeros(12), 0.25 * np.eye(12) + 4.0 * design @ design.T)
    assert t.log_z == pytest.approx(marginal.logpdf(y), abs=1e-9)
    # Bayes' rule at any β: log p(y|β) + log p(β) − log p(β|y) = log p(y).
    precision = design.T @ design / 0.25 + np.eye(3) / 4.0
    mean = np.linalg.solve(precision, design.T @ y / 0.25)
    beta = rng.normal(size=(4, 3))
    posterior = stats.multivariate_normal(mean, np.linalg.inv(precision)).logpdf(beta)
    np.testing.assert_allclose(values(t, beta) - posterior, t.log_z, atol=2e-4)


def test_linear_regression_log_evidence_is_stable_for_collinear_designs():
    x = np.linspace(0, 1, 20)[:, None] * [1.0, 1.0 + 1e-6]
    y = x[:, 0] * 3.0
    direct = stats.multivariate_normal(
        np.zeros(20), np.eye(20) + 100.0 * x @ x.T, allow_singular=True
    ).logpdf(y)
    assert linear_regression_log_evidence(x, y, 1.0, 10.0) == pytest.approx(direct, abs=1e-7)


def test_longley_is_collinear_with_exact_evidence():
    t = load_target("longley_linreg")
    header = (bundled_dir() / "data" / "longley.csv").read_text().splitlines()[0].split(",")
    table = np.loadtxt(bundled_dir() / "data" / "longley.csv", delimiter=",", skiprows=1)
    y = table[:, header.index("TOTEMP")]
    x = np.delete(table, header.index("TOTEMP"), axis=1)
    x = np.hstack([np.ones((16, 1)), (x - x.mean(0)) / x.std(0)])
    y = (y - y.mean()) / y.std()
    cov = 0.01 * np.eye(16) + 100.0 * x @ x.T
    assert (t.dim, t.log_z) == (
        7,
        pytest.approx(stats.multivariate_normal(np.zeros(16), cov).logpdf(y), abs=1e-8),
    )
    posterior_precision = x.T @ x / 0.01 + np.eye(7) / 100.0
    assert np.linalg.cond(posterior_precision) > 1e3


def test_nice_flow_is_normalised_and_invertible():
    two = load_target("nice_flow", {"dim": "2", "layers": "3"})
    assert two.log_z == 0.0
    assert grid_log_z(two, -16.0, 16.0, 801) == pytest.approx(0.0, abs=1e-4)
    import importlib.util

    spec = importlib.util.spec_from_file_location("nice_flow_for_test", two.source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    z = np.random.default_rng(6).normal(size=(8, 6)).astype(np.float32)
    six = load_target("nice_flow", {"dim": "6"})
    x = jax.vmap(lambda v: module.forward(v, dim=6))(jnp.asarray(z))
    np.testing.assert_allclose(values(six, np.asarray(x)), stats.norm.logpdf(z).sum(1), atol=1e-3)
