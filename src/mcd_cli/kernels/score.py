"""The residual score network `s̃_θ(k, z)` of the paper's appendix, as pure init/apply functions.

Architecture: project the input `z` to `d_h`; embed the step index `k` to `d_t` with a learned
table; then `blocks` residual blocks of
`LayerNorm → swish → Linear(d_h → 2 d_h) + Linear(d_t → 2 d_h) → swish → Linear(2 d_h → d_h)`;
then a final linear layer to the output dimension, initialised to zero so that the network
outputs exactly zero at initialisation (the warm start that makes MCD equal AIS).

Amortised over data (a conditional target), the network also takes the datum's features `c`:
a learned linear embedding `Linear(d_c → d_h)` of `c` is added to the projection of `z`, so one
network serves every datum.

With `linear=True` (not in the paper) the output also gets a per-step diagonal linear term
`Σ_j a_kj ⊙ z_j`, `z` split into blocks of the output's size (x for ULA; x and p for UHA), zero at
the start. A Gaussian target's backward correction is linear in x with a scale that changes along
the path; the blocks normalise their input (LayerNorm), so they cannot make an output that grows
with |x| at a step-dependent rate, and the residual path's linear part is the same at every step.
Measured at d = 20, K = 64, 1,000 updates (docs/benchmarks.md, "What was tried on the two cells"):
the final ELBO of UHA-MCD rises from −5.0 to −2.45 on gauss_narrow and from −1.89 to −1.45 on gmm8.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_glorot = jax.nn.initializers.glorot_normal()


def _dense(key: jax.Array, n_in: int, n_out: int) -> dict:
    return {"w": _glorot(key, (n_in, n_out)), "b": jnp.zeros((n_out,))}


def _apply_dense(p: dict, x: jax.Array) -> jax.Array:
    return x @ p["w"] + p["b"]


def init(
    key: jax.Array,
    in_dim: int,
    out_dim: int,
    steps: int,
    hidden: int = 128,
    time_dim: int = 16,
    blocks: int = 3,
    context_dim: int = 0,
    linear: bool = False,
) -> dict:
    """Parameters of a score network mapping `(k, z ∈ R^in_dim)` to `R^out_dim`, `k ∈ 0..steps`.

    With `context_dim > 0` it also takes a context vector of that size (see `apply`); its embedding
    is drawn from `fold_in(key, 1)`, so the other parameters are those of the unconditional network.

    Example:
        >>> p = init(jax.random.key(0), in_dim=3, out_dim=3, steps=8, hidden=16)
        >>> apply(p, 2, jnp.ones(3)).tolist()
        [0.0, 0.0, 0.0]
    """
    keys = jax.random.split(key, 2 + 3 * blocks)
    block_params = []
    for i in range(blocks):
        k1, k2, k3 = keys[2 + 3 * i : 5 + 3 * i]
        block_params.append(
            {
                "norm_scale": jnp.ones((hidden,)),
                "norm_bias": jnp.zeros((hidden,)),
                "up": _dense(k1, hidden, 2 * hidden),
                "time": _dense(k2, time_dim, 2 * hidden),
                "down": _dense(k3, 2 * hidden, hidden),
            }
        )
    params = {
        "proj": _dense(keys[0], in_dim, hidden),
        "embed": jax.random.normal(keys[1], (steps + 1, time_dim)),
        "blocks": block_params,
        "out": {"w": jnp.zeros((hidden, out_dim)), "b": jnp.zeros((out_dim,))},
    }
    if context_dim:
        params["context"] = _dense(jax.random.fold_in(key, 1), context_dim, hidden)
    if linear:
        if in_dim % out_dim:
            raise ValueError(f"a linear score term needs the input size ({in_dim}) to be a multiple of the output's ({out_dim})")
        params["linear"] = jnp.zeros((steps + 1, in_dim // out_dim, out_dim))
    return params


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-6) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def apply(params: dict, k: jax.Array, z: jax.Array, context: jax.Array | None = None) -> jax.Array:
    """Network output for one point `z` (shape `(in_dim,)`) at step index `k` (integer), given the
    datum's features `context` (shape `(context_dim,)`) when the network was built with them."""
    h = _apply_dense(params["proj"], z)
    if context is not None:
        h = h + _apply_dense(params["context"], context)
    emb = params["embed"][k]
    for blk in params["blocks"]:
        r = jax.nn.swish(_layer_norm(h, blk["norm_scale"], blk["norm_bias"]))
        r = _apply_dense(blk["up"], r) + _apply_dense(blk["time"], emb)
        r = _apply_dense(blk["down"], jax.nn.swish(r))
        h = h + r
    out = _apply_dense(params["out"], h)
    if "linear" in params:
        a = params["linear"][k]
        out = out + jnp.sum(a * z.reshape(a.shape), axis=0)
    return out
