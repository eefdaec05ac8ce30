"""ELBO training: it helps, it compiles once, it resumes exactly, it survives non-finite steps."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from jax.scipy.stats import norm

from mcd_cli.path import annealing
from mcd_cli.train import loop as training, stopping
from mcd_cli.stats import Estimate, combine, summarize
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.targets.base import Target

# A small 8-component mixture in d = 5 (means ~ N(3·1, I)), log Z = 0, started from N(0, 3² I).
_MEANS = jnp.asarray(np.random.default_rng(0).normal(3.0, 1.0, size=(8, 5)), dtype=jnp.float32)


def _mixture(x):
    return logsumexp(jnp.sum(norm.logpdf(x, _MEANS, 1.0), axis=-1)) - jnp.log(8.0)


MIXTURE = Target.create(_mixture, dim=5, initial_scale=3.0, log_z=0.0, name="mixture5")
NARROW = Target.create(
    lambda x: jnp.sum(norm.logpdf(x, 0.0, jnp.sqrt(0.1))), dim=5, initial_scale=3.0, log_z=0.0
)
SMALL = SamplerConfig(sampler="ula", backward="mcd", steps=8, hidden=32)


def _estimate(key, params, target, sconf, num_samples):
    return summarize(annealing.sample_log_weights(key, params, target, sconf, num_samples))


def _train_and_estimate(target, sconf, iterations, seed=0, num_samples=4096):
    tconf = TrainConfig(iterations=iterations, batch_size=64, lr=3e-3)
    state = training.init_train_state(jax.random.key(seed), target, sconf, tconf)
    before = _estimate(jax.random.key(99), state.params, target, sconf, num_samples)
    result = training.fit(state, target, sconf, tconf)
    after = _estimate(jax.random.key(99), result.params, target, sconf, num_samples)
    return before, after, result


def _elbo_se(e: Estimate, log_w_sd: float) -> float:
    return log_w_sd / np.sqrt(e.num_samples)


def _replicate_errors(params, target, sconf, replicates=32, num_samples=256):
    """|log Ẑ − log Z| of independent small-N estimates: mean and its standard error."""
    errors = [
        abs(_estimate(jax.random.key(100 + r), params, target, sconf, num_samples).log_z - target.log_z)
        for r in range(replicates)
    ]
    return combine(errors)


@pytest.mark.slow
def test_training_raises_elbo_and_shrinks_error():
    before, after, result = _train_and_estimate(MIXTURE, SMALL, iterations=300)
    assert result.skipped == 0
    # ELBO: gain far beyond the ELBO estimate's noise (|ELBO| itself bounds its sd scale here).
    elbo_noise = 4 * (abs(before.elbo) + 1.0) / np.sqrt(before.num_samples)
    assert after.elbo > before.elbo + elbo_noise, (before.elbo, after.elbo)
    # log Z error shrinks by more than 3 combined standard errors of the mean error.
    state = training.init_train_state(jax.random.key(0), MIXTURE, SMALL, TrainConfig())
    err_before, se_before = _replicate_errors(state.params, MIXTURE, SMALL)
    err_after, se_after = _replicate_errors(result.params, MIXTURE, SMALL)
    assert err_after < err_before - 3 * np.hypot(se_before, se_after), (err_before, err_after)


@pytest.mark.slow
def test_mcd_beats_ais_on_narrow_gaussian():
    ais_conf = dataclasses.replace(SMALL, backward="ais")
    _, ais, _ = _train_and_estimate(NARROW, ais_conf, iterations=300)
    _, mcd, _ = _train_and_estimate(NARROW, SMALL, iterations=300)
    assert mcd.elbo > ais.elbo + 4 * (abs(ais.elbo) + 1.0) / np.sqrt(ais.num_samples), (ais, mcd)
    assert abs(mcd.log_z) < abs(ais.log_z), (ais, mcd)


def test_a_sharded_training_compiles_its_chunk_once():
    # The command line always shards the particle axis (over one device or more): the first chunk's
    # output state is on the mesh, the fresh state was not, and the second chunk compiled again
    # until make_train_chunk placed the state (on gmm8, d = 2, 23 s). AIS's step sizes: a small program.
    from mcd_cli.runtime import devices

    tconf = TrainConfig(iterations=6, batch_size=8, chunk=3)
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=4)
    state = training.init_train_state(jax.random.key(0), MIXTURE, sconf, tconf)
    update = training.make_train_chunk(MIXTURE, sconf, tconf, sharding=devices.particle_layout(1).particles)
    result = training.fit(state, MIXTURE, sconf, tconf, update=update)
    assert update._cache_size() == 1 and result.state.iteration == 6


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True])
def test_update_compiles_once(sharded):
    # With the particle axis sharded (as every run of the command line has it, over one device or
    # more), the second chunk's state is the first's output, placed on the mesh: still one program.
    from mcd_cli.runtime import devices

    tconf = TrainConfig(iterations=2 if not sharded else 6, batch_size=8, chunk=3)
    sconf = SamplerConfig(sampler="uha", backward="mcd", steps=4, hidden=8)
    state = training.init_train_state(jax.random.key(0), MIXTURE, sconf, tconf)
    sharding = devices.particle_layout(1).particles if sharded else None
    update = training.make_train_chunk(MIXTURE, sconf, tconf, sharding=sharding)
    result = training.fit(state, MIXTURE, sconf, tconf, update=update)
    assert update._cache_size() == 1 and result.state.iteration == tconf.iterations
    # Recovery halves the learning rate, a traced value; chunks ending early at a checkpoint or
    # the cap pass `stop` as a traced value too: still no recompilation.
    halved = result.state._replace(lr_scale=0.5)
    training.fit(
        halved, MIXTURE, sconf, dataclasses.replace(tconf, iterations=7), update=update,
        checkpoint_every=2, on_checkpoint=lambda s, h: None,
    )
    assert update._cache_size() == 1


@pytest.mark.parametrize(
    "objective, backward",
    # The loop is the same for any parameters: the default run trains AIS's step sizes, whose three
    # programs (two chunk lengths and the single update) compile in a fraction of MCD's.
    [pytest.param("elbo", "mcd", marks=pytest.mark.slow), ("logvar", "ais")],
)
def test_chunked_loop_equals_one_update_per_call(objective, backward):
    # The same keys give the same parameters whether updates run one per call or 7 (chunks that do
    # not divide the 20 iterations) / 50 (all in one dispatch) per call (float32: the loop body may
    # be fused differently from the single jitted update).
    target = Target.create(lambda x: -0.5 * jnp.sum(((x - 1.0) / 0.5) ** 2), dim=3, initial_scale=1.0)
    sconf = SamplerConfig(sampler="ula", backward=backward, steps=4, hidden=8)
    results = []
    for chunk in (7, 50):
        tconf = TrainConfig(iterations=20, batch_size=16, chunk=chunk, objective=objective, lr=1e-2)
        state = training.init_train_state(jax.random.key(0), target, sconf, tconf)
        results.append(training.fit(state, target, sconf, tconf))
    # The reference: the public single update called once per iteration on the host.
    tconf = TrainConfig(iterations=20, batch_size=16, objective=objective, lr=1e-2)
    state = training.init_train_state(jax.random.key(0), target, sconf, tconf)
    update = training.make_update(target, sconf, tconf)
    params, opt_state = state.params, state.opt_state
    for i in range(20):
        params, opt_state, _, ok = update(params, opt_state, jax.random.fold_in(state.key, i), jnp.float32(1.0))
        assert bool(ok)
    for result in results:
        assert result.state.iteration == 20
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(result.params)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(results[0].elbo_history, results[1].elbo_history, rtol=1e-6)


def test_resume_is_bit_identical():
    # UHA's step sizes, mass and damping (AIS: the loop and its state are those of any parameters;
    # an MCD network's training compiles several times longer).
    sconf = SamplerConfig(sampler="uha", backward="ais", steps=4, hidden=8)
    tconf = TrainConfig(iterations=10, batch_size=8)
    update = training.make_train_chunk(MIXTURE, sconf, tconf)
    state = training.init_train_state(jax.random.key(0), MIXTURE, sconf, tconf)
    full = training.fit(state, MIXTURE, sconf, tconf, update=update)
    saved = []
    first = training.fit(
        state, MIXTURE, sconf, dataclasses.replace(tconf, iterations=6), update=update,
        checkpoint_every=3, on_checkpoint=lambda s, h: saved.append((s, h)),
    )
    assert [s.iteration for s, _ in saved] == [3, 6, 6]
    assert [len(h) for _, h in saved] == [3, 6, 6]
    resumed = training.fit(first.state, MIXTURE, sconf, tconf, update=update, history=saved[-1][1])
    for a, b in zip(jax.tree.leaves(full.params), jax.tree.leaves(resumed.params)):
        np.testing.assert_array_equal(a, b)
    # The resumed run reports the whole curve, the iterations before the resume included.
    np.testing.assert_array_equal(full.elbo_history, resumed.elbo_history)
    # Without the saved history the iterations before the resume are unknown (NaN), not dropped.
    bare = training.fit(first.state, MIXTURE, sconf, tconf, update=update)
    assert np.isnan(bare.elbo_history[:6]).all()
    np.testing.assert_array_equal(full.elbo_history[6:], bare.elbo_history[6:])


def test_non_finite_updates_are_skipped_and_counted():
    def sometimes_nan(x):
        return jnp.where(x[0] > 2.5, jnp.nan, -0.5 * jnp.sum(x**2))

    target = Target.create(sometimes_nan, dim=2)
    # AIS's step sizes: an MCD network starts with a zero output, as AIS, and compiles far longer.
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=4, hidden=8)
    tconf = TrainConfig(iterations=40, batch_size=64, max_bad_steps=5)
    state = training.init_train_state(jax.random.key(0), target, sconf, tconf)
    result = training.fit(state, target, sconf, tconf)
    assert 0 < result.skipped < 40
    assert np.isnan(result.elbo_history).sum() == result.skipped
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(result.params))


def test_persistent_divergence_recovers_then_gives_up():
    target = Target.create(lambda x: jnp.nan * jnp.sum(x), dim=2)
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=2)
    tconf = TrainConfig(iterations=100, batch_size=4, max_bad_steps=3, max_recoveries=2)
    state = training.init_train_state(jax.random.key(0), target, sconf, tconf)
    seen = []
    with pytest.raises(training.TrainingDiverged, match="diverged"):
        training.fit(state, target, sconf, tconf, callback=lambda i, elbo: seen.append(i))
    # Two recoveries after 3 bad steps each; the 3rd bad streak's last update gives up.
    assert len(seen) == 9


def test_interrupt_carries_last_state():
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=2)
    tconf = TrainConfig(iterations=10, batch_size=4, chunk=2)
    state = training.init_train_state(jax.random.key(0), MIXTURE, sconf, tconf)

    def interrupt(i, elbo):
        if i == 4:
            raise KeyboardInterrupt

    with pytest.raises(training.TrainingInterrupted) as info:
        training.fit(state, MIXTURE, sconf, tconf, callback=interrupt)
    # The state of the chunk (updates 4 and 5) whose progress was being reported, and its history.
    assert info.value.state.iteration == 6
    assert info.value.history.shape == (6,) and np.isfinite(info.value.history).all()


def test_plateau_rule_on_synthetic_curves():
    rng = np.random.default_rng(0)
    window = 50
    noise = rng.normal(size=2 * window)
    # Flat: stops. Rising by 1 per window against unit noise (gain 1 > 2 × 0.2): goes on.
    assert stopping.plateaued(noise, 2 * window, window)
    assert not stopping.plateaued(noise + np.repeat([0.0, 1.0], window), 2 * window, window)
    # Too few updates, or a window mostly skipped: no decision yet.
    assert not stopping.plateaued(noise, 2 * window - 1, window)
    skipped = noise.copy()
    skipped[window : window + 30] = np.nan
    assert not stopping.plateaued(skipped, 2 * window, window)
    # The ring buffer is read in iteration order: update i sits at i mod 2W.
    rising = np.repeat([0.0, 5.0], window) + 0.1 * noise
    assert not stopping.plateaued(rising, 2 * window, window)
    assert stopping.plateaued(np.roll(rising, window), 2 * window, window)  # the "new" half is now lower


def test_training_stops_when_the_elbo_plateaus():
    # Learning rate ~0: the ELBO is flat from the start, so the rule stops at its first check.
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=4)
    tconf = TrainConfig(iterations=500, batch_size=16, lr=1e-9, stop="plateau", plateau_window=10, chunk=5)
    state = training.init_train_state(jax.random.key(0), MIXTURE, sconf, tconf)
    result = training.fit(state, MIXTURE, sconf, tconf)
    assert result.stop_reason == "plateau"
    assert 20 <= result.state.iteration <= 40
    assert result.elbo_history.shape == (result.state.iteration,)
    fixed = training.fit(state, MIXTURE, sconf, dataclasses.replace(tconf, stop="fixed", iterations=30))
    assert fixed.stop_reason == "iterations" and fixed.state.iteration == 30
