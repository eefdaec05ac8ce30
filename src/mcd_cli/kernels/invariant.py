"""Classical AIS with π_k-invariant forward kernels (the reference point of the paper's §2).

When every forward kernel `F_k` leaves `π_k` invariant and the backward kernel is its reversal,
the weight collapses to `log w = Σ_{k=1}^K [log γ_k(x_{k-1}) − log γ_{k-1}(x_{k-1})]`, with
`γ_0 = π0` normalised. The unadjusted samplers (`ula`, `uha`) are not invariant and carry the full
`log B − log F` ratio instead; this module is the exact baseline that Proposition 3 of the paper
(Appendix A) computes in closed form, and what the ratio form reduces to for invariant kernels.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def log_weight(
    key: jax.Array,
    sample_initial: Callable[[jax.Array], jax.Array],
    log_gamma: Callable[[jax.Array, jax.Array], jax.Array],
    kernel: Callable[[jax.Array, jax.Array, jax.Array], jax.Array],
    steps: int,
) -> tuple[jax.Array, jax.Array]:
    """AIS log weight of one particle.

    Args:
        key: PRNG key.
        sample_initial: `key -> x_0 ~ π0`.
        log_gamma: `(k, x) -> log γ_k(x)` for `k = 0..K`, with `γ_0 = π0` normalised.
        kernel: `(key, k, x) -> x'`, a draw from a π_k-invariant kernel `F_k(x' | x)`.
        steps: K.

    Returns:
        `(log_w, x_K)`.
    """
    key_init, key_steps = jax.random.split(key)
    x0 = sample_initial(key_init)

    def step(carry, inputs):
        x, log_w = carry
        k, step_key = inputs
        log_w = log_w + log_gamma(k, x) - log_gamma(k - 1, x)
        return (kernel(step_key, k, x), log_w), None

    inputs = (jnp.arange(1, steps + 1), jax.random.split(key_steps, steps))
    (x_final, log_w), _ = jax.lax.scan(step, (x0, jnp.zeros(())), inputs)
    return log_w, x_final
