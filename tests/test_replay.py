"""Adaptive tempering replayed: a run through the temperatures and refinement tuning another run
chose (`smc.run_replay`) is that run when given its own key, and its Ẑ is unbiased where the
adaptive run's is not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mcd_cli import smc
from mcd_cli.path import annealing
from mcd_cli.smc import resampling
from mcd_cli.config import SamplerConfig
from mcd_cli.kernels import hmc, mala
from mcd_cli.targets import Target

SCALES = jnp.array([0.5, 1.0, 2.0])
CORRELATED = Target.create(lambda x: -0.5 * jnp.sum(((x - 2.0) / SCALES) ** 2) - 0.3 * x[0] * x[1], dim=3)


def setup(target, kernel=hmc.KERNEL, refine_steps=5, max_steps=32):
    config = SamplerConfig(backward="ais", adaptive=True, refine=kernel.name, resample=0.5)
    params = annealing.init_params(jax.random.key(0), target, config)
    path = annealing.annealed_path(params.path, target, config)
    kernels = smc.Kernels(None, None, kernel, resampling.multinomial)
    settings = smc.Settings(
        resample=0.5, refine_steps=refine_steps, leapfrog=3, refine_every_step=True, adaptive=True,
        target_ess=0.5, max_steps=max_steps,
    )
    return params, path, kernels, settings


@pytest.mark.parametrize("kernel, num, precond_shape", [
    (hmc.KERNEL, 64, (3, 3)),  # at least DENSE_PER_DIM particles per dimension: the covariance factor
    (hmc.KERNEL, 16, (3,)),  # too few: the variance
    (mala.KERNEL, 32, (3,)),  # MALA moves: the variance
])
def test_replaying_a_runs_own_choices_with_its_key_is_that_run(kernel, num, precond_shape):
    params, path, kernels, settings = setup(CORRELATED, kernel)
    run = jax.jit(lambda key, frozen=None: smc.run(key, params, path, CORRELATED, num, kernels, settings, frozen=frozen))
    out = run(jax.random.key(1))
    chosen = out.tuning
    assert chosen.refine.inv_mass.shape == (settings.max_steps, *precond_shape)
    steps = int(out.steps)
    assert steps >= 3 and bool(np.all(np.isfinite(np.asarray(chosen.refine.step_size[: steps - 1]))))
    rep = run(jax.random.key(1), chosen)
    assert int(rep.steps) == steps
    for a, b in [(out.log_z, rep.log_z), (out.log_w, rep.log_w), (out.particles, rep.particles),
                 (out.eve, rep.eve), (out.drift[0], rep.drift[0]), (out.drift[1], rep.drift[1]), (out.drift[2], rep.drift[2]),
                 (out.trace.beta, rep.trace.beta), (out.trace.step_size, rep.trace.step_size)]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # with another key the schedule is the chosen one, the particles are not
    other = run(jax.random.key(2), chosen)
    np.testing.assert_array_equal(np.asarray(other.trace.beta), np.asarray(out.trace.beta))
    assert not np.array_equal(np.asarray(other.particles), np.asarray(out.particles))


@pytest.mark.slow
def test_a_replayed_run_is_unbiased_where_adapting_from_the_particles_is_not():
    """N(4·1, I) in d = 2 from N(0, I), populations of 16 particles: Z = 1. Over 1,000 runs the
    replayed runs' E[Ẑ] is 1 within 3 standard errors; the adaptive runs' (β, step size and
    variance chosen from each run's own 16 particles) is below it by more than 5."""
    d, shift, num, runs = 2, 4.0, 16, 1000
    target = Target.create(lambda x: -0.5 * jnp.sum((x - shift) ** 2) - 0.5 * d * jnp.log(2 * jnp.pi), dim=d)
    params, path, kernels, settings = setup(target, refine_steps=2)
    chosen = smc.run(jax.random.key(99), params, path, target, num, kernels, settings).tuning

    def log_z(key, frozen):
        out = smc.run(key, params, path, target, num, kernels, settings, frozen=frozen)
        return out.log_z + jax.scipy.special.logsumexp(out.log_w) - jnp.log(num)

    keys = jax.random.split(jax.random.key(5), runs)
    for frozen, check in ((chosen, lambda m, se: abs(m - 1.0) < 3 * se), (None, lambda m, se: m < 1.0 - 5 * se)):
        z = np.exp(np.asarray(jax.jit(jax.vmap(lambda k: log_z(k, frozen)))(keys), np.float64))
        mean, se = z.mean(), z.std() / np.sqrt(runs)
        assert check(mean, se), (frozen is None, mean, se)
