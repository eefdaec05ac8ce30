"""Bounded parameterisations of step sizes, annealing schedule, damping and mass."""

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.path import schedules
from mcd_cli.kernels import score, uha
from mcd_cli.path.annealing import remat_segments


def test_step_sizes_start_flat_and_stay_bounded():
    params = schedules.init_step_size(jax.random.key(0), 0.05, 0.25)
    np.testing.assert_allclose(schedules.step_sizes(params, 16, 0.25), 0.05, rtol=1e-5)
    wild = jax.tree.map(lambda a: 100.0 * jnp.ones_like(a), params)
    sizes = np.asarray(schedules.step_sizes(wild, 16, 0.25))
    assert np.all(sizes > 0) and np.all(sizes <= 0.25)


def test_betas_fixed_and_learned():
    np.testing.assert_allclose(schedules.betas(None, 4), [0, 0.25, 0.5, 0.75, 1.0])
    params = schedules.init_schedule(4)
    np.testing.assert_allclose(schedules.betas(params, 4), [0, 0.25, 0.5, 0.75, 1.0], atol=1e-6)
    moved = {"b": jnp.array([3.0, -2.0, 0.5, -7.0])}
    betas = np.asarray(schedules.betas(moved, 4))
    assert betas[0] == 0.0 and abs(betas[-1] - 1.0) < 1e-6 and np.all(np.diff(betas) > 0)


def test_damping_and_mass():
    assert abs(float(uha.damping_of(uha.init_damping(0.9))) - 0.9) < 1e-5
    for u in (-50.0, 50.0):
        h = float(uha.damping_of({"u": jnp.asarray(u)}))
        assert 0.01 - 1e-6 <= h <= 0.99 + 1e-6
    np.testing.assert_allclose(uha.mass_of(uha.init_mass(3), 3), 1.0)
    np.testing.assert_allclose(uha.mass_of(None, 3), 1.0)


def test_score_network_starts_at_zero_and_depends_on_step():
    params = score.init(jax.random.key(0), in_dim=4, out_dim=2, steps=5, hidden=8)
    assert np.all(np.asarray(score.apply(params, 3, jnp.ones(4))) == 0.0)
    params["out"]["w"] = jnp.ones_like(params["out"]["w"])
    a, b = score.apply(params, 1, jnp.ones(4)), score.apply(params, 2, jnp.ones(4))
    assert a.shape == (2,) and not np.allclose(a, b)


def test_remat_segments_multiply_to_steps():
    for steps in (1, 7, 12, 64, 256, 1000):
        outer, inner = remat_segments(steps)
        assert outer * inner == steps and inner <= outer
    assert remat_segments(1024) == (32, 32)
