"""The bundled `nice_mnist` target: data, preprocessing, flow identities and normalisation."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

from mcd_cli.targets import TargetError, load_target

TARGETS = Path(__file__).resolve().parents[1] / "targets"
sys.path.insert(0, str(TARGETS))
import _nice  # noqa: E402


def _extract_module():
    spec = importlib.util.spec_from_file_location("extract_digits", TARGETS / "data" / "extract_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def flow7():
    return _nice.load_flow(7)[0]


def test_digits_file_holds_5000_images_and_the_documented_split():
    digits = _nice.load_digits()
    assert digits["images"].shape == (5000, 28, 28) and digits["images"].dtype == np.uint8
    assert np.bincount(digits["labels"], minlength=10).tolist() == [500] * 10
    train_counts = np.bincount(digits["labels"][~digits["test"]], minlength=10)
    assert train_counts.tolist() == [400] * 10
    assert np.array_equal(digits["test"], _extract_module().test_split(digits["labels"]))


def test_downsample_averages_blocks_and_rounds():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8)
    pooled = _nice.downsample(images, 7)
    expected = np.rint(images[1, 4:8, 8:12].astype(float).mean())
    assert pooled.shape == (3, 7, 7) and pooled[1, 1, 2] == expected
    assert np.array_equal(_nice.downsample(images, 28), images)


def test_logit_pixels_stay_inside_the_logit_of_the_dequantised_range():
    grey = jnp.array([0, 1, 128, 255], dtype=jnp.uint8)
    y = _nice.logit_pixels(jax.random.key(0), grey)
    p = _nice.ALPHA + (1 - 2 * _nice.ALPHA) * jnp.array([[0, 1, 128, 255], [1, 2, 129, 256]]) / 256.0
    lo, hi = jax.scipy.special.logit(p)
    assert bool(jnp.all((y >= lo) & (y <= hi)))


@pytest.mark.parametrize("size", [7, 14])
def test_flow_is_invertible(size):
    params, _ = _nice.load_flow(size)
    dim = size * size
    x = jax.random.normal(jax.random.key(1), (64, dim)) * 2.0
    back = jax.vmap(lambda v: _nice.from_latent(params, _nice.to_latent(params, v)))(x)
    np.testing.assert_allclose(back, x, atol=2e-5, rtol=0)
    h = jax.random.normal(jax.random.key(2), (64, dim))
    again = jax.vmap(lambda v: _nice.to_latent(params, _nice.from_latent(params, v)))(h)
    np.testing.assert_allclose(again, h, atol=2e-5, rtol=0)


def test_log_density_equals_change_of_variables_with_slogdet_of_the_jacobian(flow7):
    xs = _nice.sample(jax.random.key(3), flow7, 8, 49)
    for x in xs:
        sign, logdet = jnp.linalg.slogdet(jax.jacfwd(lambda v: _nice.to_latent(flow7, v))(x))
        direct = jnp.sum(jax.scipy.stats.norm.logpdf(_nice.to_latent(flow7, x))) + logdet
        assert float(sign) == 1.0
        np.testing.assert_allclose(_nice.log_prob(flow7, x), direct, atol=2e-3, rtol=0)


@pytest.mark.parametrize("size", _nice.SIZES)
def test_bundled_target_loads_with_its_dimension_and_log_z_zero(size):
    target = load_target("nice_mnist", {"size": str(size)})
    assert target.dim == size * size and target.log_z == 0.0
    x = jnp.zeros(target.dim)
    value, grad = jax.value_and_grad(target.log_density)(x)
    assert np.isfinite(float(value)) and bool(jnp.all(jnp.isfinite(grad)))


def test_weights_record_the_training_command_and_test_likelihood():
    for size in _nice.SIZES:
        _, arrays = _nice.load_flow(size)
        record = json.loads(str(arrays["record"]))
        assert record["size"] == size
        assert record["command"].startswith("python targets/data/train_nice_mnist.py")
        assert np.isfinite(record["final_test_ll"])
        assert arrays["mean"].shape == arrays["std"].shape == (size * size,)


def test_size_28_is_finite_at_its_exact_draws():
    target = load_target("nice_mnist", {"size": "28"})
    xs = _nice.sample(jax.random.key(0), _nice.load_flow(28)[0], 64, 784)
    assert bool(jnp.all(jnp.isfinite(jax.vmap(target.log_density)(xs))))


def test_missing_weights_are_one_line_naming_the_training_script(monkeypatch, tmp_path):
    monkeypatch.setattr(_nice, "DATA", tmp_path)
    with pytest.raises(TargetError) as err:
        load_target("nice_mnist", {"size": "28"})
    message = str(err.value)
    assert "\n" not in message and "train_nice_mnist.py --size 28" in message


def test_unknown_size_is_one_line():
    with pytest.raises(TargetError, match="size must be 7, 14 or 28, got 9"):
        load_target("nice_mnist", {"size": "9"})


def _fitted_gaussian(key, params, dim, num=20_000):
    """Mean and Cholesky factor of a Gaussian moment-matched to exact draws from the flow."""
    xs = np.asarray(_nice.sample(key, params, num, dim), np.float64)
    return jnp.asarray(xs.mean(0), jnp.float32), jnp.asarray(np.linalg.cholesky(np.cov(xs.T)), jnp.float32)


def _smc_log_z(key, log_p, mean, chol, particles=1024, moves=10, target_ess=0.8):
    """Adaptive tempered SMC from N(mean, LLᵀ) to `log_p`, with preconditioned MALA moves.

    It uses only the unnormalised log density (never the flow's inverse or log-determinant), so
    its estimate of log Z tests the flow's normalisation. Returns (log Ẑ, temperatures).
    """
    dim = mean.shape[0]

    def log_q(x):
        z = jax.scipy.linalg.solve_triangular(chol, x - mean, lower=True)
        return jnp.sum(jax.scipy.stats.norm.logpdf(z)) - jnp.sum(jnp.log(jnp.diag(chol)))

    def log_pi(x, beta):
        return (1.0 - beta) * log_q(x) + beta * log_p(x)

    value_grad = jax.vmap(jax.value_and_grad(log_pi), in_axes=(0, None))

    @jax.jit
    def mala(key, x, beta, eps):
        def step(carry, k):
            x, lp, g = carry
            k1, k2 = jax.random.split(k)
            drift = 0.5 * eps**2 * (g @ chol) @ chol.T
            y = x + drift + eps * jax.random.normal(k1, x.shape) @ chol.T
            lpy, gy = value_grad(y, beta)

            def log_kernel(to, frm, g_frm):  # log N(to; frm + ε²/2 Σ g, ε² Σ), up to a constant
                mean_to = frm + 0.5 * eps**2 * (g_frm @ chol) @ chol.T
                z = jax.scipy.linalg.solve_triangular(chol, (to - mean_to).T, lower=True)
                return -0.5 * jnp.sum(z**2, axis=0) / eps**2

            log_acc = lpy - lp + log_kernel(x, y, gy) - log_kernel(y, x, g)
            accept = jnp.log(jax.random.uniform(k2, lp.shape)) < log_acc
            x = jnp.where(accept[:, None], y, x)
            lp, g = jnp.where(accept, lpy, lp), jnp.where(accept[:, None], gy, g)
            return (x, lp, g), jnp.mean(accept)

        lp, g = value_grad(x, beta)
        (x, _, _), rates = jax.lax.scan(step, (x, lp, g), jax.random.split(key, moves))
        return x, jnp.mean(rates)

    increment = jax.jit(jax.vmap(lambda x: log_p(x) - log_q(x)))
    key, k0 = jax.random.split(key)
    x = mean + jax.random.normal(k0, (particles, dim)) @ chol.T
    beta, log_z, eps, temperatures = 0.0, 0.0, 1.0 / np.sqrt(dim), 0
    while beta < 1.0:
        inc = np.asarray(increment(x), np.float64)

        def ess(b):
            lw = (b - beta) * inc
            w = np.exp(lw - lw.max())
            return w.sum() ** 2 / (w**2).sum() / particles

        lo, hi = beta, 1.0
        if ess(1.0) < target_ess:
            for _ in range(50):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if ess(mid) >= target_ess else (lo, mid)
            new = lo
        else:
            new = 1.0
        lw = (new - beta) * inc
        log_z += float(logsumexp(lw) - np.log(particles))
        key, k_res, k_move = jax.random.split(key, 3)
        x = x[jax.random.categorical(k_res, jnp.asarray(lw), shape=(particles,))]
        beta = new
        x, rate = mala(k_move, x, beta, eps)
        eps *= float(np.exp(float(rate) - 0.6))  # keeps the acceptance rate near 0.6
        temperatures += 1
    return log_z, temperatures


@pytest.mark.slow
def test_flow_is_normalised_by_tempered_smc_from_a_fitted_gaussian(flow7):
    """log Z = 0 at 7 × 7 from 4 independent SMC runs.

    Tolerance: 4 standard errors of their mean, plus half their variance (the downward bias of a
    log of an unbiased estimate of Z, to first order).
    """
    mean, chol = _fitted_gaussian(jax.random.key(10), flow7, 49)
    log_p = lambda x: _nice.log_prob(flow7, x)  # noqa: E731
    estimates = [_smc_log_z(jax.random.key(20 + r), log_p, mean, chol)[0] for r in range(4)]
    se = np.std(estimates, ddof=1) / np.sqrt(len(estimates))
    assert se < 0.1, f"SMC too noisy to test the normalisation: {estimates}"
    assert abs(np.mean(estimates)) < 4 * se + np.var(estimates, ddof=1) / 2, estimates
