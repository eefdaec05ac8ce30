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


def test_moves_by_measurement_stop_when_the_particles_have_moved_and_a_replay_makes_them(monkeypatch):
    """`adaptation.MOVE_STOP`: the tuning run makes at each temperature between MIN_MOVES and
    `refine_steps` moves, stopping at the first after which every coordinate's correlation with its
    value before the moves is at most MOVE_STOP; the record keeps the counts, a replay with the run's
    own key is that run bit for bit, and with another key it makes the same moves; the stationarity
    test makes five temperatures' worth of the most made at one."""
    from mcd_cli.smc import adaptation, diagnostics

    monkeypatch.setattr(adaptation, "MOVE_STOP", 0.2)
    params, path, kernels, settings = setup(CORRELATED, refine_steps=12)
    num = 256
    run = jax.jit(lambda key, frozen=None: smc.run(key, params, path, CORRELATED, num, kernels, settings, frozen=frozen))
    out = run(jax.random.key(1))
    steps = int(out.steps)
    moves = np.asarray(out.trace.moves[:steps])
    chosen = out.tuning
    np.testing.assert_array_equal(np.asarray(chosen.moves), np.asarray(out.trace.moves))
    assert moves[-1] == 0 and np.all((moves[:-1] >= adaptation.MIN_MOVES) & (moves[:-1] <= 12))
    assert moves[:-1].min() < 12  # the rule stopped somewhere before the cap
    assert np.all(np.asarray(out.trace.correlation[: steps - 1])[moves[:-1] < 12] <= 0.2)  # mean ≤ max ≤ 0.2
    assert int(out.drift[4]) == min(max(20, 5 * int(moves.max())), diagnostics.stationarity_moves(12))
    rep = run(jax.random.key(1), chosen)
    for a, b in [(out.log_z, rep.log_z), (out.log_w, rep.log_w), (out.particles, rep.particles),
                 (out.trace.moves, rep.trace.moves), (out.drift[1], rep.drift[1]), (out.drift[4], rep.drift[4])]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = run(jax.random.key(2), chosen)
    np.testing.assert_array_equal(np.asarray(other.trace.moves), np.asarray(out.trace.moves))
    assert not np.array_equal(np.asarray(other.particles), np.asarray(out.particles))


def test_measured_moves_are_the_fixed_moves_first_ones():
    """`move_measured` with a count makes `move_population`'s first moves (the same keys), and with
    the count at the cap, all of them: measured and fixed runs differ only in how many they make."""
    from mcd_cli.smc import adaptation
    from mcd_cli.smc.state import Population

    params, path, kernels, settings = setup(CORRELATED, refine_steps=6)
    evaluate = jax.value_and_grad(CORRELATED.log_density)
    pop = smc.initial_population(jax.random.key(3), 128, path, evaluate, hmc.KERNEL, 3)
    assert isinstance(pop, Population)
    moving = pop.refine
    beta = jnp.asarray(0.5)
    key = jax.random.key(4)
    fixed, accepts = adaptation.move_population(pop, key, beta, hmc.KERNEL, path, evaluate, moving, settings)
    whole, acceptance, made = adaptation.move_measured(pop, key, beta, hmc.KERNEL, path, evaluate, moving, settings, count=jnp.asarray(6))
    np.testing.assert_array_equal(np.asarray(whole.position), np.asarray(fixed.position))
    assert int(made) == 6
    np.testing.assert_allclose(np.asarray(acceptance), np.asarray(jnp.mean(accepts, axis=0)), rtol=1e-6)  # each particle's
    two, _, made = adaptation.move_measured(pop, key, beta, hmc.KERNEL, path, evaluate, moving, settings, count=jnp.asarray(2))
    ref_two = jax.lax.scan(
        lambda s, k: (jax.vmap(lambda kk, ss: hmc.KERNEL.step(kk, ss, beta, path, evaluate, moving, 3))(jax.random.split(k, 128), s)[0], None),
        pop.states, jax.random.split(key, 6)[:2],
    )[0]
    assert int(made) == 2
    np.testing.assert_allclose(np.asarray(two.position), np.asarray(ref_two.position), rtol=1e-6, atol=1e-6)
