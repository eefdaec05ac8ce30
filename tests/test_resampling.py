"""Resampling schemes: offspring counts are unbiased, `E[#offspring_i] = N W_i`."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mcd_cli.smc import resampling

WEIGHTS = np.array([0.37, 0.0, 0.21, 0.005, 0.115, 0.3])
N = 8
DRAWS = 4000


@functools.lru_cache(maxsize=None)
def counts(name: str, draws: int = DRAWS) -> np.ndarray:
    fn = resampling.scheme(name)
    keys = jax.random.split(jax.random.key(7), draws)
    idx = np.asarray(jax.vmap(lambda k: fn(k, jnp.asarray(WEIGHTS, jnp.float32), N))(keys))
    assert idx.shape == (draws, N) and idx.min() >= 0 and idx.max() < WEIGHTS.size
    return np.stack([np.bincount(row, minlength=WEIGHTS.size) for row in idx])


@pytest.mark.parametrize("name", sorted(resampling.SCHEMES))
def test_offspring_counts_are_unbiased(name):
    c = counts(name)
    mean, se = c.mean(axis=0), c.std(axis=0, ddof=1) / np.sqrt(DRAWS)
    assert c[:, 1].max() == 0  # a zero weight never has offspring
    assert np.all(np.abs(mean - N * WEIGHTS) <= 4 * se + 1e-9), (mean, N * WEIGHTS, se)


@pytest.mark.parametrize("name, bound", [("systematic", 1.0), ("stratified", 2.0)])
def test_low_variance_schemes_stay_close_to_the_expectation(name, bound):
    """Systematic counts are floor or ceil of N W_i; a stratified count can also gain or lose the
    two strata its interval cuts."""
    c = counts(name)
    assert np.all(np.abs(c - N * WEIGHTS) < bound + 1e-6)
    assert np.all(c.sum(axis=1) == N)


def test_systematic_expectation_over_the_uniform_is_exact():
    """Averaged over a grid of the one uniform u, the counts equal N W_i up to the grid's step."""
    grid = 4096
    u = (np.arange(grid) + 0.5) / grid
    w = jnp.asarray(WEIGHTS, jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32)
    idx = np.asarray(jax.vmap(lambda v: resampling._invert(w, (v + jnp.arange(N)) / N))(jnp.asarray(u, w.dtype)))
    mean = np.stack([np.bincount(row, minlength=WEIGHTS.size) for row in idx]).mean(axis=0)
    # Each breakpoint N·C_i moves the count of two particles at one grid cell: error ≤ 1/grid each.
    assert np.all(np.abs(mean - N * WEIGHTS) <= 2.0 / grid + 1e-5)


def test_multinomial_counts_have_the_multinomial_variance():
    """Var(#offspring_i) = N W_i (1 − W_i), within the sampling error of a variance (4 SE)."""
    c = counts("multinomial")
    expected = N * WEIGHTS * (1.0 - WEIGHTS)
    tolerance = 4.0 * np.sqrt(np.maximum(np.var((c - c.mean(0)) ** 2, axis=0, ddof=1), 1e-12) / DRAWS)
    assert np.all(np.abs(c.var(axis=0, ddof=1) - expected) <= tolerance + 1e-9)


def test_unknown_scheme_names_the_choices():
    with pytest.raises(ValueError, match="systematic, stratified, multinomial"):
        resampling.scheme("residual")
