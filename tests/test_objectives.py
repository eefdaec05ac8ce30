"""Objectives are values passed to training: closed forms, and training follows the one it is given."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.stats import norm

from mcd_cli import annealing, objectives, training
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.targets.base import Target

NARROW = Target.create(lambda x: jnp.sum(norm.logpdf(x, 0.5, 0.4)), dim=3, log_z=0.0)
SCONF = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8)


def test_closed_forms_and_gradients():
    log_w = jnp.array([-1.0, 0.5, 2.0, -3.5])
    assert float(objectives.elbo(log_w)) == pytest.approx(-float(np.mean(log_w)))
    assert float(objectives.log_variance(log_w)) == pytest.approx(float(np.var(np.asarray(log_w))))
    # d var / d log w_i = 2 (log w_i − mean) / n: couples the whole batch.
    grad = jax.grad(objectives.log_variance)(log_w)
    np.testing.assert_allclose(grad, 2 * (log_w - log_w.mean()) / log_w.size, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(objectives.elbo)(log_w), -np.ones(4) / 4, rtol=1e-6)


def test_training_minimises_the_objective_it_is_given():
    tconf = TrainConfig(iterations=5, batch_size=16, lr=1e-2)
    state = training.init_train_state(jax.random.key(0), NARROW, SCONF, tconf)
    # A constant objective has zero gradient: Adam leaves every parameter where it was.
    still = training.fit(state, NARROW, SCONF, tconf, objective=lambda log_w: 0.0 * jnp.sum(log_w))
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(still.params)):
        np.testing.assert_array_equal(a, b)
    moved = training.fit(state, NARROW, SCONF, tconf)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(moved.params)))


def test_log_variance_training_shrinks_the_variance_of_log_weights():
    tconf = TrainConfig(iterations=60, batch_size=64, lr=1e-2, objective="logvar")
    state = training.init_train_state(jax.random.key(1), NARROW, SCONF, tconf)
    result = training.fit(state, NARROW, SCONF, tconf)

    def variance(params):
        log_w = annealing.sample_log_weights(jax.random.key(7), params, NARROW, SCONF, 4096)
        return float(np.var(log_w)), np.var(log_w) * np.sqrt(2.0 / 4095)

    before, se_before = variance(state.params)
    after, se_after = variance(result.params)
    assert after < before - 3 * np.hypot(se_before, se_after), (before, after)
