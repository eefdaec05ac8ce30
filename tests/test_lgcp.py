"""The bundled `lgcp_pines` target: data, binning, and the float32 density and its derivatives
against an independent float64 computation (scipy's multivariate normal on a covariance built from
the cells' centres in the unit square, and the Poisson term in numpy)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.stats import multivariate_normal

from mcd_cli.targets import check, load_target

TARGETS = Path(__file__).resolve().parents[1] / "targets"
DATA = TARGETS / "data" / "fpines.csv"
GRID = 40
sys.path.insert(0, str(TARGETS))
import lgcp_pines  # noqa: E402


def _points() -> np.ndarray:
    with DATA.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return np.array([[float(r["data_x"]), float(r["data_y"])] for r in rows])


def _counts(points: np.ndarray) -> np.ndarray:
    """Counts per cell, row-major over (x bin, y bin); histogram2d puts the right edge in the last bin."""
    counts, _, _ = np.histogram2d(points[:, 0], points[:, 1], bins=GRID, range=[[0, 1], [0, 1]])
    return counts.reshape(-1)


class Reference:
    """The model in float64, written from its definition in other terms than the target's: the
    kernel 1.91·exp(−r/β) on the distance r between cell centres in the unit square (grid-index
    distance / 40, so the same kernel), scipy's multivariate normal, numpy's Poisson term."""

    def __init__(self):
        self.counts = _counts(_points())
        centres = (np.indices((GRID, GRID)).reshape(2, -1).T + 0.5) / GRID
        self.cov = 1.91 * np.exp(-cdist(centres, centres) / (1.0 / 33.0))
        self.mean = np.log(126.0) - 1.91 / 2
        self.prior = multivariate_normal(np.full(GRID**2, self.mean), self.cov)
        self.precision = np.linalg.inv(self.cov)

    def log_density(self, x: np.ndarray) -> float:
        return float(self.prior.logpdf(x) + np.sum(self.counts * x - np.exp(x) / GRID**2))

    def magnitude(self, x: np.ndarray) -> float:
        """The sum of the terms' sizes: float32 rounding is relative to this, not to their sum."""
        return float(abs(self.prior.logpdf(x)) + abs(self.counts @ x) + np.sum(np.exp(x)) / GRID**2)

    def grad(self, x: np.ndarray) -> np.ndarray:
        return -self.precision @ (x - self.mean) + self.counts - np.exp(x) / GRID**2


@pytest.fixture(scope="module")
def ref():
    return Reference()


@pytest.fixture(scope="module")
def target():
    return load_target("lgcp_pines")


@pytest.fixture(scope="module")
def points(ref):
    """Points as float32 arrays: the prior mean, a prior draw, a draw shifted up by 4 (intensities
    e⁴ ≈ 55 times the prior's), and a draw with 5% of the cells raised by 8."""
    rng = np.random.default_rng(0)
    chol = np.linalg.cholesky(ref.cov)

    def draw():
        return ref.mean + chol @ rng.standard_normal(GRID**2)

    spikes = np.where(rng.random(GRID**2) < 0.05, 8.0, 0.0)
    xs = {"mean": np.full(GRID**2, ref.mean), "prior draw": draw(), "large": draw() + 4.0,
          "spiky": draw() + spikes}
    return {k: v.astype(np.float32) for k, v in xs.items()}


def test_bin_counts_sum_to_126_and_match_a_direct_count(ref):
    points = _points()
    assert points.shape == (126, 2) and ref.counts.sum() == 126
    direct = np.zeros(GRID**2)
    for u, v in points:
        i, j = min(int(u * GRID), GRID - 1), min(int(v * GRID), GRID - 1)
        direct[GRID * i + j] += 1
    np.testing.assert_array_equal(direct, ref.counts)
    np.testing.assert_array_equal(lgcp_pines.COUNTS, ref.counts)
    assert lgcp_pines.MEAN == pytest.approx(ref.mean, abs=1e-15)
    # A point on the upper or right edge goes into the last row or column.
    edge = lgcp_pines.bin_counts(np.array([[1.0, 0.5], [0.0, 1.0], [1.0, 1.0]]))
    assert edge[GRID - 1, GRID // 2] == edge[0, GRID - 1] == edge[GRID - 1, GRID - 1] == 1 and edge.sum() == 3


def test_loads_as_a_bundled_target_and_passes_check(target):
    same = load_target(str(TARGETS / "lgcp_pines.py"))
    assert (target.name, target.dim) == ("lgcp_pines", 1600)
    # The shipped log Z is the reference computation's, which its two methods agreed on.
    reference = json.loads((TARGETS / "data" / "lgcp_reference_cpu" / "grid40.json").read_text())
    assert reference["agree"] is True and reference["density_check"] is not None
    assert target.log_z == pytest.approx(reference["log_z"], abs=1e-6)
    assert same.dim == 1600
    np.testing.assert_allclose(target.initial_mean, np.log(126) - 1.91 / 2, rtol=1e-12)
    np.testing.assert_allclose(target.initial_scale, np.sqrt(1.91), rtol=1e-12)
    report = check(target, num_points=4)
    assert report.ok, report.problems


@pytest.mark.parametrize("label", ["mean", "prior draw", "large", "spiky"])
def test_log_density_matches_float64_to_float32_precision(target, ref, points, label):
    x = points[label]
    ours = float(jax.jit(target.log_density)(jnp.asarray(x)))
    exact = ref.log_density(x.astype(np.float64))
    # Measured: at most 2.4e-7 of the magnitude (float32's unit roundoff is 6e-8).
    assert abs(ours - exact) <= 1e-6 * ref.magnitude(x.astype(np.float64)), (ours, exact)


def test_gradient_is_finite_and_matches_a_finite_difference(target, ref, points):
    rng = np.random.default_rng(1)
    grad = jax.jit(jax.grad(target.log_density))
    for label in ("prior draw", "large"):
        x = points[label].astype(np.float64)
        g = np.asarray(grad(jnp.asarray(points[label])), dtype=np.float64)
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, ref.grad(x), atol=1e-6 * np.abs(ref.grad(x)).max())
        v = rng.standard_normal(GRID**2)
        v /= np.linalg.norm(v)
        h = 1e-4
        fd = (ref.log_density(x + h * v) - ref.log_density(x - h * v)) / (2 * h)
        assert g @ v == pytest.approx(fd, abs=1e-5 * np.linalg.norm(g)), label


def test_hessian_vector_products_and_batches_follow_the_custom_rule(target, ref, points):
    """The quadratic form has its own derivative rule; second derivatives and vmap must still be right."""
    x = points["prior draw"]
    v = np.random.default_rng(2).standard_normal(GRID**2).astype(np.float32)
    hvp = jax.jvp(jax.grad(target.log_density), (jnp.asarray(x),), (jnp.asarray(v),))[1]
    exact = -ref.precision @ v - np.exp(x.astype(np.float64)) / GRID**2 * v
    np.testing.assert_allclose(np.asarray(hvp), exact, atol=1e-6 * np.abs(exact).max())
    batch = jnp.asarray(np.stack(list(points.values())))
    values, grads = jax.jit(jax.vmap(jax.value_and_grad(target.log_density)))(batch)
    for i, x in enumerate(points.values()):
        x = x.astype(np.float64)
        assert abs(float(values[i]) - ref.log_density(x)) <= 1e-6 * ref.magnitude(x)
        exact = ref.grad(x)
        np.testing.assert_allclose(np.asarray(grads[i]), exact, atol=1e-6 * np.abs(exact).max())
