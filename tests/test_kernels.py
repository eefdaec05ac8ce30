"""Exact identities and statistical properties of every estimator in the kernel registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.stats import norm

from mcd_cli.path import annealing
from mcd_cli.config import SamplerConfig
from mcd_cli.kernels import invariant, registry, uha
from mcd_cli.kernels.base import Transition
from mcd_cli.targets.base import Target

DIM, STEPS, HIDDEN = 3, 8, 16
# Every registered combination, so a new kernel is tested by adding it to the registry.
COMBOS = [(e.forward.name, e.backward.name) for e in registry.estimators()]
FORWARDS = list(registry.FORWARD)
TRAINABLE_BACKWARDS = [name for name, b in registry.BACKWARD.items() if b.trainable]

# Gaussian target N(m, diag s²) scaled so that Z = exp(LOG_Z) ≠ 1.
MEAN = np.array([0.5, -0.3, 0.2])
SCALE = np.array([0.7, 1.1, 0.9])
LOG_Z = 1.3


def gaussian_log_density(x):
    return jnp.sum(norm.logpdf(x, MEAN, SCALE)) + LOG_Z


GAUSSIAN = Target.create(gaussian_log_density, dim=DIM, log_z=LOG_Z, name="gauss")


def perturb_score(params, key, scale=0.3):
    """Random non-zero backward-kernel parameters: a genuinely different learned backward kernel."""
    leaves, treedef = jax.tree.flatten(params.backward)
    keys = jax.random.split(key, max(len(leaves), 1))
    moved = [leaf + scale * jax.random.normal(k, leaf.shape, leaf.dtype) for leaf, k in zip(leaves, keys)]
    return params._replace(backward=jax.tree.unflatten(treedef, moved))


def assert_unbiased(key, params, config, n=20_000):
    """E[Ẑ / Z] = 1 on GAUSSIAN, to 3 standard errors of the mean of n weights."""
    log_w = np.asarray(jax.jit(lambda k: annealing.log_weights(k, params, GAUSSIAN, config, n))(key), np.float64)
    ratio = np.exp(log_w - LOG_Z)
    mean, se = ratio.mean(), ratio.std(ddof=1) / np.sqrt(n)
    assert se < 0.05, f"weights too variable for a meaningful test (se={se})"
    assert abs(mean - 1.0) < 3 * se, f"E[Z_hat/Z] = {mean} ± {se}"


@pytest.mark.parametrize("sampler", FORWARDS)
@pytest.mark.parametrize("backward", TRAINABLE_BACKWARDS)
def test_learned_backward_at_initialisation_equals_ais(sampler, backward):
    key_params, key_w = jax.random.split(jax.random.key(0))
    ais = SamplerConfig(sampler=sampler, backward="ais", steps=STEPS, hidden=HIDDEN)
    mcd = SamplerConfig(sampler=sampler, backward=backward, steps=STEPS, hidden=HIDDEN)
    p_ais = annealing.init_params(key_params, GAUSSIAN, ais)
    p_mcd = annealing.init_params(key_params, GAUSSIAN, mcd)
    lw_ais = annealing.log_weights(key_w, p_ais, GAUSSIAN, ais, 64)
    lw_mcd = annealing.log_weights(key_w, p_mcd, GAUSSIAN, mcd, 64)
    np.testing.assert_allclose(lw_mcd, lw_ais, rtol=0, atol=1e-5)
    # The identity comes from the warm start, not from MCD ignoring its network:
    lw_moved = annealing.log_weights(key_w, perturb_score(p_mcd, key_params), GAUSSIAN, mcd, 64)
    assert np.max(np.abs(np.asarray(lw_moved - lw_ais))) > 1e-2


# The default run takes UHA; ULA (the same code with one sampler fewer) runs with `-m slow`.
UHA_FIRST = [pytest.param(f, marks=pytest.mark.slow) if f == "ula" else f for f in FORWARDS]


@pytest.mark.parametrize("sampler", UHA_FIRST)
def test_the_linear_score_term_starts_at_zero_keeps_z_unbiased_and_is_trained(sampler):
    """`score_linear`: MCD still equals AIS at initialisation, E[Ẑ / Z] = 1 once the term (and the
    network) is moved, and the ELBO's gradient reaches the term."""
    key_params, key_perturb, key_w = jax.random.split(jax.random.key(2), 3)
    ais = SamplerConfig(sampler=sampler, backward="ais", steps=STEPS, hidden=HIDDEN)
    linear = SamplerConfig(sampler=sampler, backward="mcd", steps=STEPS, hidden=HIDDEN, score_linear=True)
    p_ais = annealing.init_params(key_params, GAUSSIAN, ais)
    p_lin = annealing.init_params(key_params, GAUSSIAN, linear)
    blocks = 2 if sampler == "uha" else 1  # UHA's score sees (x, p)
    assert p_lin.backward["linear"].shape == (STEPS + 1, blocks, DIM)
    lw_ais = annealing.log_weights(key_w, p_ais, GAUSSIAN, ais, 64)
    np.testing.assert_allclose(annealing.log_weights(key_w, p_lin, GAUSSIAN, linear, 64), lw_ais, rtol=0, atol=1e-5)

    moved = perturb_score(p_lin, key_perturb, scale=0.05)
    assert_unbiased(key_w, moved, linear)

    def elbo(term):
        params = p_lin._replace(backward={**p_lin.backward, "linear": term})
        return jnp.mean(annealing.log_weights(key_w, params, GAUSSIAN, linear, 256))

    grad = jax.grad(elbo)(p_lin.backward["linear"])
    assert float(jnp.max(jnp.abs(grad))) > 1e-3


@pytest.mark.parametrize("sampler", UHA_FIRST)
def test_the_learned_backward_variance_starts_at_one_keeps_z_unbiased_and_is_trained(sampler):
    """`learn_backward_variance`: MCD still equals AIS at initialisation, the kernel is the Gaussian
    with the variance scaled by exp(v_k), E[Ẑ / Z] = 1 once v (and the network) is moved, and the
    ELBO's gradient reaches v."""
    key_params, key_perturb, key_w = jax.random.split(jax.random.key(3), 3)
    ais = SamplerConfig(sampler=sampler, backward="ais", steps=STEPS, hidden=HIDDEN)
    config = SamplerConfig(sampler=sampler, backward="mcd", steps=STEPS, hidden=HIDDEN, learn_backward_variance=True)
    p_ais = annealing.init_params(key_params, GAUSSIAN, ais)
    p_var = annealing.init_params(key_params, GAUSSIAN, config)
    assert p_var.backward["log_var"].shape == (STEPS + 1,)
    lw_ais = annealing.log_weights(key_w, p_ais, GAUSSIAN, ais, 64)
    np.testing.assert_allclose(annealing.log_weights(key_w, p_var, GAUSSIAN, config, 64), lw_ais, rtol=0, atol=1e-5)

    # The density itself, against jax.scipy at one step with the network at its warm start.
    mcd = registry.BACKWARD["mcd"]
    log_var = p_var.backward["log_var"].at[2].set(0.7)
    reverse, mean, scale = jnp.array([0.3, -1.2, 2.0]), jnp.array([0.1, 0.0, 1.5]), jnp.array([0.5, 0.8, 1.1])
    t = Transition(index=jnp.asarray(2), reverse=reverse, mean=mean, scale=scale,
                   score_input=jnp.ones(p_var.backward["proj"]["w"].shape[0]), score_scale=jnp.asarray(0.3))
    got = mcd.log_density({**p_var.backward, "log_var": log_var}, t)
    want = jnp.sum(norm.logpdf(reverse, mean, scale * np.exp(0.35)))
    np.testing.assert_allclose(got, want, rtol=1e-6)

    moved = perturb_score(p_var, key_perturb, scale=0.05)
    moved = moved._replace(backward={**moved.backward, "log_var": 0.3 * jax.random.normal(key_perturb, (STEPS + 1,))})
    assert_unbiased(key_w, moved, config)

    def elbo(v):
        params = p_var._replace(backward={**p_var.backward, "log_var": v})
        return jnp.mean(annealing.log_weights(key_w, params, GAUSSIAN, config, 256))

    grad = jax.grad(elbo)(p_var.backward["log_var"])
    assert float(jnp.max(jnp.abs(grad[1:]))) > 1e-3


@pytest.mark.parametrize("sampler,backward", COMBOS)
def test_unbiased_for_gaussian_target(sampler, backward):
    """E[Ẑ / Z] = 1 for any fixed parameters; checked to 3 standard errors of the mean."""
    config = SamplerConfig(sampler=sampler, backward=backward, steps=STEPS, hidden=HIDDEN)
    key_params, key_perturb, key_w = jax.random.split(jax.random.key(1), 3)
    params = annealing.init_params(key_params, GAUSSIAN, config)
    if registry.BACKWARD[backward].trainable:
        params = perturb_score(params, key_perturb, scale=0.05)
    assert_unbiased(key_w, params, config)


def test_appendix_a_closed_forms():
    """Proposition 3: mean and variance of the AIS log weight under the Gaussian AR kernel."""
    s0_sq, s_sq, steps, alpha = 4.0, 0.25, 10, 0.6
    beta_k = (s_sq / s0_sq) ** (1.0 / steps)
    sig_sq = s0_sq * beta_k ** np.arange(steps + 1)  # σ_k², k = 0..K

    xi_sq = np.empty(steps + 1)
    xi_sq[0] = s0_sq
    for k in range(1, steps + 1):
        xi_sq[k] = alpha**2 * xi_sq[k - 1] + (1 - alpha**2) * sig_sq[k]
    exp_mean = 0.5 * np.log(2 * np.pi * s0_sq) + 0.5 * (beta_k - 1) * sum(
        xi_sq[k - 1] / sig_sq[k] for k in range(1, steps + 1)
    )
    exp_var = (beta_k - 1) ** 2 * (
        sum(xi_sq[k - 1] ** 2 / (2 * sig_sq[k] ** 2) for k in range(1, steps + 1))
        + sum(
            alpha ** (2 * (l - k)) * xi_sq[k - 1] ** 2 / (sig_sq[k] * sig_sq[l])
            for k in range(1, steps + 1)
            for l in range(k + 1, steps + 1)
        )
    )

    sig_sq_j = jnp.asarray(sig_sq, dtype=jnp.float32)

    def log_gamma(k, x):
        unnormalised = -0.5 * x**2 / sig_sq_j[k]
        return jnp.where(k == 0, norm.logpdf(x, 0.0, jnp.sqrt(s0_sq)), unnormalised)

    def kernel(key, k, x):
        return alpha * x + jnp.sqrt((1 - alpha**2) * sig_sq_j[k]) * jax.random.normal(key)

    n = 200_000
    run = jax.jit(
        jax.vmap(
            lambda key: invariant.log_weight(
                key, lambda k: jnp.sqrt(s0_sq) * jax.random.normal(k), log_gamma, kernel, steps
            )[0]
        )
    )
    log_w = np.asarray(run(jax.random.split(jax.random.key(2), n)), np.float64)
    mean, var = log_w.mean(), log_w.var(ddof=1)
    se_mean = np.sqrt(var / n)
    se_var = np.sqrt((np.mean((log_w - mean) ** 4) - var**2) / n)
    assert abs(mean - exp_mean) < 4 * se_mean, (mean, exp_mean, se_mean)
    assert abs(var - exp_var) < 4 * se_var, (var, exp_var, se_var)


def _quartic_grad(x):
    return jax.grad(lambda y: -0.25 * jnp.sum(y**4) - 0.5 * jnp.sum(y[:-1] * y[1:]))(x)


def _leapfrog_map(z, step_size=0.3, inverse_mass=jnp.array([1.0, 0.5, 2.0])):
    x, p = z[:DIM], z[DIM:]
    x_new, p_new, _, _ = uha.leapfrog(
        x, p, _quartic_grad(x), step_size, inverse_mass, lambda y: (_quartic_grad(y), None)
    )
    return jnp.concatenate([x_new, p_new])


def test_leapfrog_is_volume_preserving():
    z = jnp.array([0.3, -1.2, 0.8, 0.5, 0.1, -0.7])
    jac = np.asarray(jax.jacfwd(_leapfrog_map)(z), dtype=np.float64)
    np.testing.assert_allclose(np.linalg.det(jac), 1.0, atol=1e-5)
    assert not np.allclose(jac, np.eye(2 * DIM), atol=1e-2)  # a non-trivial map


def test_leapfrog_inverse_is_flip_map_flip():
    flip = jnp.array([1.0] * DIM + [-1.0] * DIM)
    z = jnp.array([0.3, -1.2, 0.8, 0.5, 0.1, -0.7])
    forward = _leapfrog_map(z)
    back = flip * _leapfrog_map(flip * forward)
    np.testing.assert_allclose(back, z, atol=1e-5)
    assert not np.allclose(forward, z, atol=1e-2)


@pytest.mark.parametrize("sampler,backward", COMBOS)
def test_one_target_gradient_per_step(sampler, backward):
    traces = []
    evaluations = []

    def counted(x):
        traces.append(1)
        jax.debug.callback(lambda: evaluations.append(1))
        return gaussian_log_density(x)

    target = Target.create(counted, dim=DIM)
    config = SamplerConfig(sampler=sampler, backward=backward, steps=STEPS, hidden=HIDDEN)
    params = annealing.init_params(jax.random.key(0), target, config)
    log_w, _ = jax.jit(lambda k: annealing.log_weight(k, params, target, config))(jax.random.key(1))
    jax.block_until_ready(log_w)
    jax.effects_barrier()
    assert len(evaluations) == STEPS + 1
    assert len(traces) == 2  # once for x_0, once inside the scan body


@pytest.mark.parametrize("sampler", FORWARDS)
@pytest.mark.parametrize("backward", TRAINABLE_BACKWARDS)
@pytest.mark.slow
def test_rematerialised_scan_matches(sampler, backward):
    """Remat changes memory, not values: same log weights and gradients."""
    plain = SamplerConfig(sampler=sampler, backward=backward, steps=STEPS, hidden=HIDDEN)
    remat = SamplerConfig(sampler=sampler, backward=backward, steps=STEPS, hidden=HIDDEN, remat=True)
    params = perturb_score(annealing.init_params(jax.random.key(0), GAUSSIAN, plain), jax.random.key(3))

    def loss(p, config):
        return jnp.mean(annealing.log_weights(jax.random.key(4), p, GAUSSIAN, config, 16))

    v1, g1 = jax.value_and_grad(loss)(params, plain)
    v2, g2 = jax.value_and_grad(loss)(params, remat)
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_learned_schedule_starts_at_the_linear_one():
    """A learned schedule starts linear: the same weights as the fixed schedule."""
    base = SamplerConfig(sampler="ula", backward="ais", steps=STEPS)
    learned = SamplerConfig(sampler="ula", backward="ais", steps=STEPS, learn_schedule=True)
    target = GAUSSIAN.with_initial(mean=0.2, scale=1.5)
    p1 = annealing.init_params(jax.random.key(0), target, base)
    p2 = annealing.init_params(jax.random.key(0), target, learned)
    lw1 = annealing.log_weights(jax.random.key(5), p1, target, base, 32)
    lw2 = annealing.log_weights(jax.random.key(5), p2, target, learned, 32)
    np.testing.assert_allclose(lw1, lw2, atol=1e-4)
