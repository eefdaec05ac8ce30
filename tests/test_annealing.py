import pytest
"""The annealing loop as a library: chunked sampling, and a kernel added without touching any module."""

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.path import annealing
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


@pytest.mark.parametrize("sampler", [pytest.param("ula", marks=pytest.mark.slow), "uha"])  # ula: the slower
def test_batched_backward_scoring_gives_the_same_weights_and_gradients(sampler):
    # Training scores the K transitions in one batched call after the scan (`batch_backward`):
    # the same sum in another order, so values and gradients agree to float32 rounding.
    target = Target.create(lambda x: -0.5 * jnp.sum((x - 1.0) ** 2 / 0.3), dim=3)
    config = SamplerConfig(sampler=sampler, backward="mcd", steps=6, hidden=8, blocks=1)  # one block: compiles faster
    params = annealing.init_params(jax.random.key(0), target, config)
    # Move the network off its zero output layer, so MCD differs from AIS.
    params = jax.tree.map(lambda a: a + 0.05 * jax.random.normal(jax.random.key(3), a.shape, a.dtype), params)

    def loss(p, batched):
        return jnp.mean(annealing.log_weights(jax.random.key(1), p, target, config, 16, batch_backward=batched))

    # Compiled, as training runs it (op by op, the gradient compiled a few hundred small programs).
    value_and_grad = jax.jit(jax.value_and_grad(loss), static_argnums=1)
    v0, g0 = value_and_grad(params, False)
    v1, g1 = value_and_grad(params, True)
    assert float(v1) == pytest.approx(float(v0), rel=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6 * float(jnp.max(jnp.abs(a)) + 1))


@pytest.mark.slow
def test_the_compiled_chunk_takes_the_network_as_an_argument_not_a_constant(no_persistent_cache):
    """An untrained MCD network (output layer zero) gives exactly the AIS weights, also in a chunk
    of 2,048 particles. XLA on the CPU (jaxlib 0.10.2) miscompiles a vmapped product with an
    all-zero matrix that is a compile-time constant once the batch reaches about 2,048 rows: about
    every other compilation returned garbage (−inf, ±1e30) for every particle. The estimators pass
    the parameters to the compiled function as arguments, where it does not happen; this test
    fails if a compiled entry point ever closes over them. Six fresh compilations, since a bad one
    was about one in two (a copy of the chunk that closes over the parameters failed 2 of 4); the
    session's persistent compilation cache is off here, or it would hand back the first one."""
    target = Target.create(lambda x: -0.5 * jnp.sum((x - 0.5) ** 2), dim=3)
    mcd = SamplerConfig(sampler="ula", backward="mcd", steps=6, hidden=32)
    ais = SamplerConfig(sampler="ula", backward="ais", steps=6)
    params = annealing.init_params(jax.random.key(0), target, mcd)
    reference = np.asarray(
        annealing.log_weight_chunk(target, ais, 64)(params._replace(backward=None), jax.random.key(1), 0)
    )
    assert np.all(np.isfinite(reference))
    for _ in range(6):
        jax.clear_caches()
        weights = np.asarray(annealing.log_weight_chunk(target, mcd, 2048)(params, jax.random.key(1), 0))
        assert np.all(np.isfinite(weights))
        np.testing.assert_allclose(weights[:64], reference, rtol=1e-5, atol=1e-5)
