"""The transport start (`--init flow`, `mcd_cli.init.flow`): its map and log-Jacobian, the fit, the
change of variables that leaves log Z alone, and the default policy's use of it on the funnel."""

from __future__ import annotations

import contextlib
import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from jax.scipy.stats import norm
from typer.testing import CliRunner

from mcd_cli.cli import app
from mcd_cli.config import SamplerConfig
from mcd_cli.init import flow
from mcd_cli.run.start import initial_target
from mcd_cli.targets import Target
from mcd_cli.targets.transforms import transported


@contextlib.contextmanager
def enable_x64():
    """float64 inside, the setting before it restored after."""
    before = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def _random_params(target, key, scale=0.3):
    """Parameters of `flow.forward` with every weight drawn, so that no layer is the identity."""
    params = flow.init_params(key, target)
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
    return jax.tree_util.tree_unflatten(
        tree, [leaf + scale * jax.random.normal(k, leaf.shape, leaf.dtype) for leaf, k in zip(leaves, keys)]
    )


@pytest.mark.parametrize("dim", [1, 4])
def test_the_log_jacobian_is_the_log_determinant_of_the_map_to_float_precision(dim):
    """`forward`'s `Σ s_i` equals `log|det ∂x/∂z|` from the Jacobian that autodiff builds, and the
    Jacobian of each layer is triangular (the autoregressive masks hold): float64, to 1e-10."""
    with enable_x64():
        target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=dim, initial_mean=0.3, initial_scale=1.7)
        masks = flow.masks(dim, flow.hidden_width(dim))
        params = _random_params(target, jax.random.key(dim))
        jacobians = jax.jit(jax.vmap(jax.jacfwd(lambda z: flow.forward(params, masks, z)[0])))
        log_dets = jax.jit(jax.vmap(lambda z: flow.forward(params, masks, z)[1]))
        z = jax.random.normal(jax.random.key(7), (3, dim), jnp.float64)
        sign, log_det = np.linalg.slogdet(np.asarray(jacobians(z)))
        assert np.all(sign != 0)
        np.testing.assert_allclose(np.asarray(log_dets(z)), log_det, rtol=0, atol=1e-10)
        one = [flow.masks(dim, flow.hidden_width(dim), 1)[0]]  # the first layer alone, ordering 0 … d−1
        layer = {"loc": jnp.zeros(dim), "log_scale": jnp.zeros(dim), "layers": params["layers"][:1]}
        jacobian = np.asarray(jax.jit(jax.jacfwd(lambda z: flow.forward(layer, tuple(one), z)[0]))(jnp.ones(dim)))
        assert np.allclose(np.triu(jacobian, 1), 0.0)


def test_the_map_starts_as_the_start_s_own_affine_map():
    """Output weights at zero: `T(z) = μ0 + σ0 ⊙ z`, log-Jacobian `Σ log σ0`, exactly."""
    with enable_x64():
        target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=3, initial_mean=[1.0, -2.0, 0.5], initial_scale=[0.5, 2.0, 3.0])
        params = flow.init_params(jax.random.key(0), target)
        z = jnp.array([0.3, -1.2, 2.0])
        x, log_det = flow.forward(params, flow.masks(3, flow.hidden_width(3)), z)
        np.testing.assert_allclose(np.asarray(x), target.initial_mean + target.initial_scale * np.asarray(z), rtol=0, atol=1e-15)
        assert float(log_det) == pytest.approx(float(np.sum(np.log(target.initial_scale))), abs=1e-15)


def test_the_transported_density_is_the_pulled_back_one_and_keeps_log_z():
    """`transported`'s log density is `log γ(T(z)) + log|det ∂T/∂z|` for a map with every weight
    drawn; importance sampling of it from N(0, 3² I) (wider than it: bounded weights) gives the
    target's log Z (a Gaussian's, known) within four of its own standard errors."""
    with enable_x64():
        scale = np.array([0.5, 2.0, 1.5])
        target = Target.create(lambda x: jnp.sum(norm.logpdf(x, 1.0, scale)), dim=3, log_z=0.0)
        masks = flow.masks(3, flow.hidden_width(3))
        params = _random_params(target, jax.random.key(3), scale=0.1)
        moved = transported(target, lambda z: flow.forward(params, masks, z))
        z = jnp.array([0.1, 0.2, -0.4])
        x, log_det = flow.forward(params, masks, z)
        assert float(moved.log_density(z)) == pytest.approx(float(target.log_density(x) + log_det), abs=1e-12)
        assert moved.log_z == 0.0
        n = 200_000
        z = 3.0 * jax.random.normal(jax.random.key(11), (n, 3), jnp.float64)
        log_w = np.asarray(jax.jit(jax.vmap(moved.log_density))(z) - jnp.sum(norm.logpdf(z, 0.0, 3.0), axis=1))
        w = np.exp(log_w - log_w.max())
        log_z = float(logsumexp(log_w) - math.log(n))
        se = float(np.std(w) / np.mean(w) / math.sqrt(n))
        assert abs(log_z) < 4 * se + 1e-12, (log_z, se)


def test_the_fit_covers_a_funnel_and_its_start_is_widened_where_its_tails_are_heavy():
    """A 4-d funnel from N(0, I): the fitted flow raises the ELBO from below −1 nat to within 0.15
    of log Z = 0, and the start chosen in its variables is wider than N(0, I) (the reverse-KL fit is
    narrower than the funnel's tails)."""
    with enable_x64():
        funnel = Target.create(
            lambda x: norm.logpdf(x[0], 0.0, 3.0) + jnp.sum(norm.logpdf(x[1:], 0.0, jnp.exp(x[0] / 2))), dim=4, log_z=0.0
        )
        fit = flow.fit_flow(funnel, jax.random.key(0), steps=800)
        assert fit.base_elbo < -1.0 and fit.elbo > -0.15 and fit.steps == 800
        scale, ks = flow.choose_scale(transported(funnel, fit.transform), jax.random.key(1))
        assert scale > 1.0 and ks[0] > flow.SCALE_K


def test_a_start_the_flow_cannot_improve_is_kept_with_a_warning(monkeypatch):
    """A standard normal target: auto's start is exact, every weight is equal, the flow (starting
    as that start) cannot raise the ELBO, and `--init flow` keeps the start, saying so."""
    monkeypatch.setattr(flow, "fit_flow", functools.partial(flow.fit_flow, steps=200))
    target = Target.create(lambda x: jnp.sum(norm.logpdf(x)), dim=3, log_z=0.0)
    auto = initial_target(target, SamplerConfig(init="auto"), seed=0)
    moved, method, warnings = initial_target(target, SamplerConfig(init="flow"), seed=0)
    assert "+flow" not in method and method == auto[1]
    assert any("flow" in w and "not above" in w for w in warnings)


@pytest.mark.slow
def test_init_flow_on_the_funnel_from_the_command_line():
    """`mcd estimate funnel --init flow`: the record names the flow start, the estimate is `ok`
    and within three of its standard errors of log Z = 0 (without the flow, every calibration run
    on the funnel was −0.10 to −0.29 nats and `warn`)."""
    result = CliRunner().invoke(app, ["estimate", "funnel", "--init", "flow", "--seed", "1", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["init_method"].startswith("auto:target+flow(elbo=")
    assert record["status"] == "ok"
    assert abs(record["error"]) <= 3 * record["log_z_stderr"]


@pytest.mark.slow
def test_the_default_policy_turns_to_the_flow_when_moves_get_stuck():
    """The default run on the funnel: the first pilot's particles are stuck, the policy's next
    pilot samples through a fitted flow, and the reported run, through it, is `ok` and within three
    standard errors of log Z = 0."""
    result = CliRunner().invoke(app, ["estimate", "funnel", "--seed", "0", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    stages = record["policy"]["stages"]
    assert "moves_stuck" in stages[0]["reason_codes"] and "fitted flow" in stages[0]["decision"]
    assert all(s["effort"].get("transport") for s in stages[1:])
    assert record["status"] == "ok" and abs(record["error"]) <= 3 * record["log_z_stderr"]
