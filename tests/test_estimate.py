"""log Z, standard error, ESS and Pareto k̂ from log weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from mcd_cli import estimate


def test_summarize_matches_definitions():
    rng = np.random.default_rng(0)
    log_w = rng.normal(2.0, 1.5, size=5000)
    e = estimate.summarize(log_w)
    w = np.exp(log_w)
    assert e.log_z == pytest.approx(np.log(w.mean()), rel=1e-12)
    ess = w.sum() ** 2 / (w**2).sum()
    assert e.ess == pytest.approx(ess, rel=1e-10)
    assert e.log_z_stderr == pytest.approx(np.sqrt(1 / ess - 1 / w.size), rel=1e-10)
    assert e.elbo == pytest.approx(log_w.mean(), rel=1e-12)
    assert e.num_samples == 5000 and e.num_nonfinite == 0


def test_summarize_is_stable_for_huge_log_weights():
    e = estimate.summarize(np.array([1e4, 1e4 + np.log(3.0)]))
    assert e.log_z == pytest.approx(1e4 + np.log(2.0), rel=1e-12)


def test_standard_error_is_honest_for_lognormal_weights():
    """Over many replicates, the spread of log Ẑ matches the delta-method standard error."""
    rng = np.random.default_rng(1)
    sigma, n, reps = 0.8, 2000, 400
    log_w = rng.normal(-0.5 * sigma**2, sigma, size=(reps, n))  # E[w] = 1, log Z = 0
    estimates = [estimate.summarize(row) for row in log_w]
    spread = np.std([e.log_z for e in estimates], ddof=1)
    mean_se = np.mean([e.log_z_stderr for e in estimates])
    # The sd of a sample sd from `reps` draws is about spread / sqrt(2 reps).
    assert abs(mean_se - spread) < 4 * spread / np.sqrt(2 * reps), (mean_se, spread)


def test_nonfinite_weights_are_counted_and_minus_inf_is_zero_weight():
    e = estimate.summarize(np.array([0.0, 0.0, -np.inf, np.nan, np.inf]))
    assert e.num_nonfinite == 2
    assert e.num_samples == 3
    assert e.log_z == pytest.approx(np.log(2.0 / 3.0))


def test_all_nonfinite_raises():
    with pytest.raises(estimate.AllWeightsNonFinite, match="not finite"):
        estimate.summarize(np.array([np.nan, -np.inf]))


@pytest.mark.parametrize("shape", [0.2, 0.5, 0.9])
def test_pareto_k_recovers_known_tail(shape):
    """Weights with a generalised-Pareto tail of shape k: k̂ ≈ k."""
    rng = np.random.default_rng(2)
    n = 20_000
    u = rng.uniform(size=n)
    w = (u ** (-shape) - 1.0) / shape  # GPD(k, σ=1) draws
    k_hat = estimate.pareto_k(np.log(w))
    # sd of k̂ from M = 3√n ≈ 424 tail points is about (1 + k)/√M ≈ 0.06-0.09.
    assert abs(k_hat - shape) < 4 * (1 + shape) / np.sqrt(3 * np.sqrt(n)), k_hat


def test_pareto_k_is_small_for_light_tails():
    rng = np.random.default_rng(3)
    assert estimate.pareto_k(rng.normal(size=10_000) * 0.3) < 0.3


def test_combine():
    mean, se = estimate.combine([1.0, 2.0, 3.0])
    assert mean == 2.0 and se == pytest.approx(1.0 / np.sqrt(3))
    assert estimate.combine([1.5]) == (1.5, None)
