"""Objectives are values passed to training: closed forms, and training follows the one it is given."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.stats import norm

from mcd_cli.path import annealing
from mcd_cli.train import objectives
from mcd_cli.path import schedules
from mcd_cli.train import loop as training
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


@pytest.mark.slow
def test_training_minimises_the_objective_it_is_given():
    tconf = TrainConfig(iterations=5, batch_size=16, lr=1e-2)
    state = training.init_train_state(jax.random.key(0), NARROW, SCONF, tconf)
    # A constant objective has zero gradient: Adam leaves every parameter where it was.
    still = training.fit(state, NARROW, SCONF, tconf, objective=lambda log_w: 0.0 * jnp.sum(log_w))
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(still.params)):
        np.testing.assert_array_equal(a, b)
    moved = training.fit(state, NARROW, SCONF, tconf)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(moved.params)))


@pytest.mark.slow
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


def test_log_variance_gradient_is_taken_at_fixed_trajectories():
    # 1-D ULA with AIS backward, K = 2, linear β: the log weight of a fixed trajectory is the
    # closed form below, a function of the step sizes δ_k only. The log-variance loss's gradient
    # must be that of var(log w_θ(τ)) at the simulated τ, held fixed; the ELBO's differs (it
    # follows the reparameterised moves), so the test can tell the two apart.
    mu, sd, steps, batch = 0.7, 0.3, 2, 64
    target = Target.create(lambda x: jnp.sum(norm.logpdf(x, mu, sd)), dim=1, initial_scale=1.0)
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=steps)
    params = annealing.init_params(jax.random.key(0), target, sconf)
    key = jax.random.key(1)
    betas = jnp.linspace(0.0, 1.0, steps + 1)

    def grad_k(beta, x):
        return beta * (-(x - mu) / sd**2) + (1.0 - beta) * (-x)

    def trajectory(k, deltas):
        # The loop's own key layout: (x0, kernel, steps); one normal draw per step.
        k_x, _, k_steps = jax.random.split(k, 3)
        xs = [jax.random.normal(k_x, (1,))]
        for j, step_key in enumerate(jax.random.split(k_steps, steps)):
            eps = jax.random.normal(step_key, (1,))
            x = xs[-1]
            xs.append(x + deltas[j] * grad_k(betas[j + 1], x) + jnp.sqrt(2 * deltas[j]) * eps)
        return jnp.stack(xs)

    def closed_form(step_params, xs):
        deltas = schedules.step_sizes(step_params, steps, sconf.max_step_size)
        log_w = norm.logpdf(xs[-1, 0], mu, sd) - norm.logpdf(xs[0, 0])
        for j in range(steps):
            b, d, x_prev, x_next = betas[j + 1], deltas[j], xs[j, 0], xs[j + 1, 0]
            scale = jnp.sqrt(2 * d)
            log_w += norm.logpdf(x_prev, x_next + d * grad_k(b, x_next), scale)
            log_w -= norm.logpdf(x_next, x_prev + d * grad_k(b, x_prev), scale)
        return log_w

    keys = jax.random.split(key, batch)
    deltas0 = schedules.step_sizes(params.path.step_size, steps, sconf.max_step_size)
    fixed = jax.lax.stop_gradient(jax.vmap(lambda k: trajectory(k, deltas0))(keys))
    want = jax.grad(lambda p: jnp.var(jax.vmap(lambda xs: closed_form(p, xs))(fixed)))(params.path.step_size)

    def loss(p, objective):
        return training.batch_loss(params._replace(path=params.path._replace(step_size=p)), key, target, sconf, batch, objective)[0]

    got = jax.grad(loss)(params.path.step_size, objectives.OBJECTIVES["logvar"])
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    # Same values either way; the reparameterised derivative of the same loss is another one.
    through = jax.grad(loss)(params.path.step_size, objectives.Objective("var", objectives.log_variance, detach=False))
    gap = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(through)))
    assert gap > 1e-3 * max(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(want))


def test_log_variance_refuses_a_kernel_without_a_fixed_point_density():
    sconf = SamplerConfig(sampler="uha", backward="mcd", steps=2, hidden=8)
    params = annealing.init_params(jax.random.key(0), NARROW, sconf)
    with pytest.raises(ValueError, match="ELBO"):
        training.batch_loss(params, jax.random.key(1), NARROW, sconf, 4, objectives.OBJECTIVES["logvar"])


def test_the_configs_objective_names_are_the_objectives():
    """`config.OBJECTIVES` (what a TrainConfig accepts, below the training floor) names exactly the
    objectives `train.objectives` defines."""
    from mcd_cli import config
    from mcd_cli.train.objectives import OBJECTIVES

    assert tuple(OBJECTIVES) == config.OBJECTIVES
