"""Training with SMC in the loop (`smc.segments`, `--train-with smc`): the per-segment loss, its
gradient against a closed form, and the options around it."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import one_line_error
from mcd_cli.path import annealing
from mcd_cli.train import objectives
from mcd_cli.smc import resampling
from mcd_cli.train import loop as training
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.kernels import ais, ula
from mcd_cli.kernels.base import AnnealedPath
from mcd_cli.smc import segments
from mcd_cli.targets.base import Target

# γ(x) = e^C N(x; 0, I) with π0 = N(0, I): every annealed density is the standard normal (times
# e^{β C}), so the particles of an SMC that resamples after every step are N(0, I) at the start of
# every step (exactly at step 1, in the limit of many particles after that).
D, K, C = 2, 4, 1.5
DELTAS = jnp.array([0.3, 0.2, 0.4, 0.1])
BETAS = jnp.linspace(0.0, 1.0, K + 1)


def _log_density(x):
    return C - 0.5 * jnp.sum(x**2) - 0.5 * D * math.log(2 * math.pi)


def step_elbo(delta):
    """E[log G] per coordinate of one ULA step with the AIS reversal, from x ~ N(0, 1):
    x' = (1 − δ) x + √(2δ) ξ and log G = −x'²/2 + x²/2 − (x − (1 − δ) x')²/(4δ) + ξ²/2, so
    E[log G] = −δ²/2 − [δ (2 − δ)² + 2 (1 − δ)²] / 4 + 1/2 (zero at δ = 0)."""
    return -(delta**2) / 2 - (delta * (2 - delta) ** 2 + 2 * (1 - delta) ** 2) / 4 + 0.5


def _segment_loss(sizes, key, threshold, num=20_000, objective=objectives.elbo):
    path = AnnealedPath(step_sizes=sizes, betas=BETAS, init_mean=jnp.zeros(D), init_scale=jnp.ones(D))
    evaluate = jax.value_and_grad(_log_density)
    loss, elbo, info = segments.segment_log_weights(
        key, ula.KERNEL, ais.KERNEL, resampling.multinomial, path, (), (), evaluate, num, threshold, objective
    )
    return loss, (elbo, info)


# The threshold is traced: the runs with and without resampling share one compilation.
_GRAD = jax.jit(jax.value_and_grad(_segment_loss, has_aux=True))


def _gradients(threshold, seeds=8):
    out = [_GRAD(DELTAS, jax.random.key(s), jnp.float32(threshold)) for s in range(seeds)]
    grads = np.array([np.asarray(g) for _, g in out])
    return grads, [aux for (_, aux), _ in out], [float(loss) for (loss, _), _ in out]


def test_segment_gradient_matches_the_closed_form():
    """Resampled after every step, each step is its own segment whose particles start as N(0, I):
    the ELBO loss's derivative in δ_k is −D · d/dδ E[log G](δ_k), in closed form, for every k —
    with no contribution through the resampled particles from the earlier steps' δ."""
    grads, aux, losses = _gradients(threshold=2.0)  # ESS/N < 2 always: resample after every step
    expected = -D * np.asarray(jax.vmap(jax.grad(step_elbo))(DELTAS))
    mean, se = grads.mean(0), grads.std(0, ddof=1) / math.sqrt(len(grads))
    assert np.all(np.abs(mean - expected) < 4 * se + 1e-4), (mean, expected, se)
    for elbo, info in aux:
        assert int(info["segments"]) == K
    # The loss is the negative sum of the segments' mean log weights, and its mean is the closed form.
    for (elbo, _), loss in zip(aux, losses):
        assert loss == pytest.approx(-float(jnp.mean(elbo)), rel=1e-5, abs=1e-5)
    elbos = np.array([float(jnp.mean(elbo)) for elbo, _ in aux])
    closed = C + D * float(jnp.sum(jax.vmap(step_elbo)(DELTAS)))
    assert abs(elbos.mean() - closed) < 4 * elbos.std(ddof=1) / math.sqrt(len(elbos)) + 1e-4


def test_without_resampling_it_is_the_importance_samplers_gradient():
    """Never resampled (threshold 0), the batch is one segment: the importance sampler's ELBO, whose
    particles drift from N(0, I) (variance (1 − δ)² v + 2δ after each step), so its gradient is not
    the closed form above: the comparison above can fail."""
    grads, aux, _ = _gradients(threshold=0.0)
    expected = -D * np.asarray(jax.vmap(jax.grad(step_elbo))(DELTAS))
    mean, se = grads.mean(0), grads.std(0, ddof=1) / math.sqrt(len(grads))
    assert np.any(np.abs(mean - expected) > 10 * se)
    assert all(int(info["segments"]) == 1 for _, info in aux)


def test_segments_follow_the_ess():
    """A threshold between 0 and 1 resamples at some steps and not at others; the last step always
    closes a segment, and the per-slot sums stay finite."""
    (_, (elbo, info)), _ = _GRAD(DELTAS, jax.random.key(3), jnp.float32(0.97))  # compiled above
    assert 1 < int(info["segments"]) < K
    assert np.all(np.isfinite(np.asarray(elbo)))


def _problem(sampler="ula", blocks=SamplerConfig.blocks):
    target = Target.create(lambda x: -0.5 * jnp.sum((x - 1.0) ** 2 / 0.3), dim=3)
    sconf = SamplerConfig(sampler=sampler, backward="mcd", steps=4, hidden=8, blocks=blocks, resample=0.5)
    return target, sconf, annealing.init_params(jax.random.key(0), target, sconf)


def test_batch_loss_with_smc_in_the_loop_for_both_objectives():
    target, sconf, params = _problem()
    for name in ("elbo", "logvar"):
        # The value and its gradient in one compiled program, as training takes them (op by op,
        # the two compiled many small programs each).
        loss = functools.partial(training.batch_loss, key=jax.random.key(1), target=target, sconf=sconf,
                                 batch_size=32, objective=name, train_with="smc")
        (value, per_slot), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        assert np.isfinite(float(value)) and per_slot.shape == (32,)
        assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
    # The score network's last layer starts at zero, so MCD starts as AIS; the loss moves it.
    leaves = jax.tree.leaves(grads.backward)
    assert any(np.any(np.asarray(g) != 0.0) for g in leaves)
    uha_target, uha_conf, uha_params = _problem("uha")
    with pytest.raises(ValueError, match="fixed points"):
        training.batch_loss(uha_params, jax.random.key(1), uha_target, uha_conf, 8, "logvar", train_with="smc")
    value, _ = jax.jit(
        lambda p: training.batch_loss(p, jax.random.key(1), uha_target, uha_conf, 32, "elbo", train_with="smc")
    )(uha_params)
    assert np.isfinite(float(value))


@pytest.mark.slow
def test_training_with_smc_in_the_loop_raises_the_segment_elbo():
    target, sconf, _ = _problem(blocks=1)  # one residual block: the training loop compiles a third faster
    tconf = TrainConfig(iterations=150, batch_size=128, lr=3e-3, train_with="smc")
    state = training.init_train_state(jax.random.key(0), target, sconf, tconf)
    history = training.fit(state, target, sconf, tconf).elbo_history
    first, last = history[:30], history[-30:]
    noise = math.sqrt(first.var(ddof=1) / 30 + last.var(ddof=1) / 30)
    assert last.mean() - first.mean() > 4 * noise, (first.mean(), last.mean(), noise)


def test_train_with_is_checked():
    with pytest.raises(ValueError, match="train_with"):
        TrainConfig(train_with="mcmc")
    assert TrainConfig().train_with == "is"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--resample", "0"], "--resample"),
        (["--schedule", "adaptive", "--resample", "0.5"], "--schedule adaptive"),
    ],
)
def test_train_with_smc_refuses_runs_it_cannot_train(mcd, gauss_yaml, args, words):
    code, _, err = mcd(["estimate", gauss_yaml, "--train-with", "smc", "--iterations", "5", "--steps", "4", *args])
    assert code == 2
    assert words in one_line_error(err)
