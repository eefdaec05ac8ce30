"""A transport start: an inverse autoregressive flow fitted by VI, through which the target is sampled.

Where one step size cannot suit every region of the target (a funnel, whose scale in some
coordinates is a function of others), no effort of HMC moves reaches the narrow regions, and
tempered SMC misses their mass (docs/method.md, "Stuck moves"). The remedy of Hoffman et al.
(2019, "NeuTra-lizing bad geometry in Hamiltonian Monte Carlo using neural transport") is a
change of variables: fit a bijection `x = T(z)` whose pushforward of N(0, I) approximates the
target, then sample the target in `z`, whose density `γ(T(z)) |det ∂T/∂z|` is close to N(0, I)
and so has one scale everywhere. log Z is unchanged by the change of variables, whatever `T`
(`targets.transforms.transported`), so a poor fit costs efficiency, never correctness.

`T` here is the start's affine map (the declared or fitted Gaussian: mean and scale) after
`FLOW_LAYERS` affine autoregressive layers, `z_i ← z_i exp(s_i(z_<i)) + m_i(z_<i)` (Kingma et al.
2016, inverse autoregressive flow), the ordering reversed from one layer to the next. `s` and `m`
come from a masked network (MADE, Germain et al. 2015) with one tanh hidden layer and a masked
linear path, so that the layers hold any lower-triangular linear map too; `s` is bounded by
`LOG_SCALE_BOUND` per layer. Each layer's output weights start at zero: `T` starts as the start's
own Gaussian, and the fit can only be judged by how much it improves on it. Both the map and its
log-Jacobian `Σ s_i` are one pass of each layer (no inverse is needed: the sampler runs in `z`).

The fit maximises the ELBO `E[log γ(T(z)) + log|det ∂T/∂z|] + H(N(0, I))` by Adam over
`FLOW_STEPS` steps of `FLOW_BATCH` draws (the reverse KL, as the Gaussian start's VI fit), in
one `lax.scan`. Such fits are narrower than the target in its tails: the transported target's
weights against N(0, I) are then heavy-tailed (funnel: Pareto k̂ 0.70–0.75 at ELBO −0.07), so the
sampler starts from the narrowest N(0, s² I), s in `SCALE_GRID`, whose weights have k̂ at most
`SCALE_K` (`choose_scale`; funnel: s = 1.5, k̂ 0.16–0.19). Hand-written: NumPyro's IAF (`AutoIAFNormal`) fits a
NumPyro model, and NumPyro is an optional extra here; the map is some 40 lines.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from mcd_cli.targets import Target
    >>> t = Target.create(lambda x: -0.5 * jnp.sum(((x - 2.0) / 0.5) ** 2), dim=3)
    >>> fit = fit_flow(t, jax.random.key(0), steps=300)
    >>> bool(fit.elbo > fit.base_elbo)  # the Gaussian N(0, I) start is poor; the flow moves and shrinks it
    True
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mcd_cli.stats import pareto_k
from mcd_cli.targets.base import Target

FLOW_LAYERS = 4
FLOW_STEPS = 2000
FLOW_BATCH = 256
FLOW_LEARNING_RATE = 3e-3
LOG_SCALE_BOUND = 3.0  # |s_i| per layer: the layers together scale a coordinate by at most e^±12
CHECK_SAMPLES = 4096
SCALE_GRID = (1.0, 1.25, 1.5, 2.0)  # the transported target's start N(0, s² I)
# k̂ a start's weights may reach: a margin below PARETO_K_WARN for the check's noise (at 4,096
# draws, funnel seed 2: k̂ 0.5 at s = 1 on the check, then k̂ above 0.7 in SMC's final weights).
SCALE_K = 0.3


def hidden_width(dim: int) -> int:
    """Hidden units of each layer's network: 4 d, within [16, 256]."""
    return int(min(max(4 * dim, 16), 256))


def masks(dim: int, hidden: int, layers: int = FLOW_LAYERS) -> tuple:
    """Per layer, the masks `(input → hidden, hidden → output, input → output)` of MADE with the
    ordering `0 … d−1` (even layers) or its reverse (odd layers): output `i` sees inputs earlier than
    `i` in the ordering, and only those."""
    out = []
    for layer in range(layers):
        order = np.arange(dim) if layer % 2 == 0 else np.arange(dim)[::-1]
        degree = np.empty(dim, int)
        degree[order] = np.arange(dim)  # position of each input in the ordering
        hidden_degree = np.arange(hidden) % max(dim - 1, 1)
        to_hidden = (hidden_degree[:, None] >= degree[None, :]).astype(np.float64)
        to_output = (degree[:, None] > hidden_degree[None, :]).astype(np.float64)
        direct = (degree[:, None] > degree[None, :]).astype(np.float64)
        out.append((to_hidden, to_output, direct))
    return tuple(out)


def init_params(key: jax.Array, target: Target, layers: int = FLOW_LAYERS) -> dict:
    """The parameters of `T` at the identity on top of the target's start: `x = μ0 + σ0 ⊙ z`."""
    dim, hidden = target.dim, hidden_width(target.dim)
    dtype = jnp.result_type(float)
    keys = jax.random.split(key, layers)
    return {
        "loc": jnp.asarray(target.initial_mean, dtype),
        "log_scale": jnp.log(jnp.asarray(target.initial_scale, dtype)),
        "layers": [
            {
                "w_in": jax.random.normal(k, (hidden, dim), dtype) / np.sqrt(dim),
                "b_in": jnp.zeros(hidden, dtype),
                "w_out": jnp.zeros((2 * dim, hidden), dtype),
                "w_direct": jnp.zeros((2 * dim, dim), dtype),
                "b_out": jnp.zeros(2 * dim, dtype),
            }
            for k in keys
        ],
    }


def forward(params: dict, layer_masks: tuple, z: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(x, log|det ∂x/∂z|)` at one point `z` of shape `(d,)`."""
    dim = z.shape[-1]
    log_det = jnp.zeros((), z.dtype)
    for p, (to_hidden, to_output, direct) in zip(params["layers"], layer_masks):
        h = jnp.tanh((p["w_in"] * to_hidden) @ z + p["b_in"])
        out = (p["w_out"] * jnp.concatenate([to_output, to_output])) @ h
        out = out + (p["w_direct"] * jnp.concatenate([direct, direct])) @ z + p["b_out"]
        shift, s = out[:dim], LOG_SCALE_BOUND * jnp.tanh(out[dim:] / LOG_SCALE_BOUND)
        z = z * jnp.exp(s) + shift
        log_det = log_det + jnp.sum(s)
    x = params["loc"] + jnp.exp(params["log_scale"]) * z
    return x, log_det + jnp.sum(params["log_scale"])


class FlowFit(NamedTuple):
    """A fitted transport map: `transform(z) -> (x, log|det ∂x/∂z|)`, its ELBO and its start's
    (the Gaussian it began as, on the same draws), the Pareto k̂ of its importance weights, and the
    seconds the fit took."""

    transform: Any
    elbo: float
    base_elbo: float
    pareto_k: float
    steps: int
    seconds: float
    params: Any = None
    transform_of: Any = None  # params -> the transform they give (`transform` is that of `params`)


def _log_weight(target: Target, layer_masks: tuple):
    half_log_2pi = 0.5 * np.log(2 * np.pi)

    def one(params, z, constants):  # the target's constants (a fitted start's) are an argument
        x, log_det = forward(params, layer_masks, z)
        return target.rebuilt(constants).log_density(x) + log_det + jnp.sum(0.5 * z * z + half_log_2pi)

    return one


def fit_flow(
    target: Target,
    key: jax.Array,
    *,
    steps: int = FLOW_STEPS,
    batch: int = FLOW_BATCH,
    learning_rate: float = FLOW_LEARNING_RATE,
    layers: int = FLOW_LAYERS,
    check_samples: int = CHECK_SAMPLES,
) -> FlowFit:
    """Fits `T` to `target` from its declared start (see the module docstring). A step whose loss
    is not finite (draws where `log γ` is −inf) is skipped (`optax.apply_if_finite`).

    Raises:
        ValueError: no step of the fit had a finite loss.
    """
    t0 = time.perf_counter()
    k_init, k_fit, k_check = jax.random.split(key, 3)
    layer_masks = masks(target.dim, hidden_width(target.dim), layers)
    params = init_params(k_init, target, layers)
    log_weight = jax.vmap(_log_weight(target, layer_masks), (None, 0, None))
    dtype = params["loc"].dtype
    # The target's constants (a fitted start's whitening) are the programs' arguments, not their
    # constants: the same programs whatever the seed, found in the persistent compilation cache.
    constants = target.constants

    def loss(params, key, constants):
        z = jax.random.normal(key, (batch, target.dim), dtype)
        return -jnp.mean(log_weight(params, z, constants))

    schedule = optax.cosine_decay_schedule(learning_rate, steps)
    opt = optax.apply_if_finite(optax.chain(optax.clip_by_global_norm(10.0), optax.adam(schedule)), steps)

    @jax.jit
    def run(params, key, constants):
        def one(carry, key):
            params, state = carry
            value, grads = jax.value_and_grad(loss)(params, key, constants)
            updates, state = opt.update(grads, state, params)
            return (optax.apply_updates(params, updates), state), jnp.isfinite(value)

        (params, state), finite = jax.lax.scan(one, (params, opt.init(params)), jax.random.split(key, steps))
        return params, jnp.sum(finite)

    base = params
    params, finite = run(params, k_fit, constants)
    if int(finite) == 0:
        raise ValueError("the flow's ELBO was not finite at any step (log γ is −inf where the start puts its draws)")
    z = jax.random.normal(k_check, (check_samples, target.dim), dtype)
    check = jax.jit(log_weight)
    log_w = np.asarray(check(params, z, constants), np.float64)
    base_w = np.asarray(check(base, z, constants), np.float64)
    elbo = float(np.mean(log_w)) if np.all(np.isfinite(log_w)) else float("-inf")
    base_elbo = float(np.mean(base_w)) if np.all(np.isfinite(base_w)) else float("-inf")
    k = float(pareto_k(log_w)) if np.isfinite(elbo) else float("inf")

    def transform_of(fitted):
        return lambda z: forward(fitted, layer_masks, z)

    return FlowFit(
        transform_of(params), elbo, base_elbo, k, int(finite), time.perf_counter() - t0, params, transform_of
    )


def choose_scale(target: Target, key: jax.Array, num_samples: int = CHECK_SAMPLES) -> tuple[float, tuple[float, ...]]:
    """The narrowest s in `SCALE_GRID` whose start N(0, s² I) gives `target` (a transported one,
    close to N(0, I)) importance weights with Pareto k̂ at most `SCALE_K`, else the s of the
    lowest k̂; with each s's k̂, all on common draws.

    Example:
        >>> from mcd_cli.targets import Target
        >>> narrow = Target.create(lambda z: -0.5 * jnp.sum((z / 0.8) ** 2), dim=4)
        >>> choose_scale(narrow, jax.random.key(0))[0]  # N(0, I) covers N(0, 0.8²): bounded weights
        1.0
        >>> wide = Target.create(lambda z: -0.5 * jnp.sum((z / 3.0) ** 2), dim=4)
        >>> choose_scale(wide, jax.random.key(0))[0]  # every s is too narrow (k = 1 − s²/9): the widest
        2.0
    """
    u = jax.random.normal(key, (num_samples, target.dim), jnp.result_type(float))

    @jax.jit
    def weights(s, u, constants):  # s, the draws and the target's constants traced: one compile for the grid
        log_q = -0.5 * jnp.sum(u * u, axis=1)  # up to constants common to every s, with z = s u
        return jax.vmap(target.rebuilt(constants).log_density)(s * u) + target.dim * jnp.log(s) - log_q

    ks = []
    for s in SCALE_GRID:
        w = np.asarray(weights(jnp.asarray(s, u.dtype), u, target.constants), np.float64)
        ks.append(float(pareto_k(w)) if np.all(np.isfinite(w)) else float("inf"))
    fine = [s for s, k in zip(SCALE_GRID, ks) if k <= SCALE_K]
    return (fine[0] if fine else SCALE_GRID[int(np.argmin(ks))]), tuple(ks)
