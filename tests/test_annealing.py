import pytest
"""The annealing loop as a library: chunked sampling, and a kernel added without touching any module."""

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli import annealing
from mcd_cli.config import SamplerConfig
from mcd_cli.targets.base import Target


def test_chunking_does_not_change_weights():
    target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    config = SamplerConfig(sampler="ula", backward="ais", steps=4)
    params = annealing.init_params(jax.random.key(0), target, config)
    a = annealing.sample_log_weights(jax.random.key(1), params, target, config, 100, chunk_size=100)
    b = annealing.sample_log_weights(jax.random.key(1), params, target, config, 100, chunk_size=32)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    calls = []
    annealing.sample_log_weights(jax.random.key(1), params, target, config, 100, 32, lambda d, t: calls.append((d, t)))
    assert calls == [(32, 100), (64, 100), (96, 100), (100, 100)]


def _cool_ula_kernel():
    """ULA with 0.8× the noise: a new forward kernel built from the ULA module's own pieces."""
    from jax.scipy.stats import norm

    from mcd_cli.kernels import ula
    from mcd_cli.kernels.base import Transition

    def step(key, state, step, path, resolved, evaluate):
        x, _, target_grad = state
        delta = step.step_size
        noise_scale = 0.8 * jnp.sqrt(2.0 * delta)
        eps = jax.random.normal(key, x.shape)
        x_new = x + delta * path.grad(step.beta, x, target_grad) + noise_scale * eps
        log_forward = jnp.sum(norm.logpdf(eps)) - x.size * jnp.log(noise_scale)
        log_target_new, target_grad_new = evaluate(x_new)
        transition = Transition(
            index=step.index,
            reverse=x,
            mean=x_new + delta * path.grad(step.beta, x_new, target_grad_new),
            scale=noise_scale,
            score_input=x_new,
            score_scale=2.0 * delta,
        )
        return ula.ULAState(x_new, log_target_new, target_grad_new), log_forward, transition

    return ula.KERNEL._replace(name="cool_ula", label="coolULA", step=step)


@pytest.mark.slow
def test_a_new_forward_kernel_runs_through_execute_without_touching_other_modules():
    from jax.scipy.stats import norm

    from mcd_cli.config import TrainConfig
    from mcd_cli.kernels import registry
    from mcd_cli.run import RunPlan, execute

    log_z = 0.7
    target = Target.create(lambda x: jnp.sum(norm.logpdf(x, 0.3, 0.8)) + log_z, dim=2, log_z=log_z)
    kernel = _cool_ula_kernel()
    registry.register(kernel)
    try:
        assert [e.label for e in registry.estimators() if e.forward is kernel] == ["coolULA", "coolULA-MCD"]
        for backward in ("ais", "mcd"):
            sconf = SamplerConfig(sampler="cool_ula", backward=backward, steps=8, hidden=8)
            record = execute(RunPlan(target, sconf, TrainConfig(iterations=3, batch_size=16), num_samples=4096))
            assert record.label == f"coolULA{'-MCD' if backward == 'mcd' else ''}"
            assert abs(record.log_z - log_z) < 4 * record.log_z_stderr + 1e-3, record.as_dict()
    finally:
        registry.unregister(kernel)
    assert "cool_ula" not in registry.FORWARD


@pytest.mark.parametrize("sampler", ["ula", "uha"])
def test_batched_backward_scoring_gives_the_same_weights_and_gradients(sampler):
    # Training scores the K transitions in one batched call after the scan (`batch_backward`):
    # the same sum in another order, so values and gradients agree to float32 rounding.
    target = Target.create(lambda x: -0.5 * jnp.sum((x - 1.0) ** 2 / 0.3), dim=3)
    config = SamplerConfig(sampler=sampler, backward="mcd", steps=6, hidden=8)
    params = annealing.init_params(jax.random.key(0), target, config)
    # Move the network off its zero output layer, so MCD differs from AIS.
    params = jax.tree.map(lambda a: a + 0.05 * jax.random.normal(jax.random.key(3), a.shape, a.dtype), params)

    def loss(p, batched):
        return jnp.mean(annealing.log_weights(jax.random.key(1), p, target, config, 16, batch_backward=batched))

    v0, g0 = jax.value_and_grad(loss)(params, False)
    v1, g1 = jax.value_and_grad(loss)(params, True)
    assert float(v1) == pytest.approx(float(v0), rel=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6 * float(jnp.max(jnp.abs(a)) + 1))
