"""The particle system in training: a batch run as one SMC population, its loss taken per segment.

Training with SMC in the loop (`TrainConfig.train_with = "smc"`) simulates the batch as the
estimator will run it: the particles move through the K steps of the fixed schedule together and
are resampled whenever their ESS/N falls below the threshold (and after the last step, which closes
the last segment). Between two resamplings (a *segment* `s`) each particle gathers the incremental
log weights of `smc.step`,

    log w_s(i) = Σ_{k in s} [log γ̃_k(s_k) − log γ̃_{k−1}(s_{k−1}) + log B_{k−1} − log F_k],

and the objective (`objectives`) is applied to each segment's log weights on its own; the loss is
the sum over segments. The particles a resampling hands to the next segment are held fixed
(`stop_gradient`): no derivative flows through a resampling (the indices are not differentiable)
nor back into an earlier segment. So each segment's kernels are trained on particles distributed as
the SMC estimator's are at that point of the path, not as the particles of an importance sampler
that drifted away from the annealed densities since step 0 (Sequential Controlled Langevin
Diffusions, Chen et al. 2025, train the same way, with the log-variance loss).

With the ELBO the segment loss is `−mean(log w_s)`, differentiated through the segment's
reparameterised moves; with the log-variance loss it is `var(log w_s)` with the trajectory held
fixed (`Step.detach`). The batch's reported ELBO is `Σ_s mean(log w_s)`, a lower bound on
`E[log Ẑ_SMC] ≤ log Z` (Jensen in each segment), equal to the importance sampler's ELBO when
the batch is never resampled before the end.

`segment_log_weights` returns, for every slot `i` of the batch, `Σ_s log w_s(i)`, whose mean is that
ELBO, and the summed segment losses.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, BackwardKernel, ForwardKernel, Step
from mcd_cli.smc.sharding import shard
from mcd_cli.smc.state import Resampler, ess_fraction, normalised, take
from mcd_cli.smc.base import annealed_log_density, init_state

# `(states, log w, segment loss, ELBO per slot, log Ẑ so far, segments)`: the carry between steps.
Carry = tuple


def initial_batch(
    key_x: jax.Array, key_init: jax.Array, forward: ForwardKernel, path: AnnealedPath, resolved: Any,
    evaluate: Callable, num: int, sharding: Optional[NamedSharding] = None,
) -> Carry:
    """The carry before the first step: `num` particles drawn from π0 (held fixed, no derivative
    through the draws) with keys `split(key_x, num)`, their forward kernel's states (`init_state`,
    keys `split(key_init, num)`), and nothing summed yet."""
    x0 = jax.vmap(path.sample_initial)(jax.random.split(key_x, num))
    x0 = shard(jax.lax.stop_gradient(x0), sharding)
    log_target0, target_grad0 = jax.vmap(evaluate)(x0)
    states, log_w0 = init_state(jax.random.split(key_init, num), x0, log_target0, target_grad0, forward, resolved, path)
    zero = jnp.zeros((), log_w0.dtype)
    return states, log_w0, zero, jnp.zeros_like(log_w0), zero, jnp.asarray(0, jnp.int32)


def build_segment_step(
    forward: ForwardKernel, backward: BackwardKernel, resample: Resampler, path: AnnealedPath, resolved: Any,
    backward_params: Any, evaluate: Callable, num: int, threshold: float, loss: Callable[[jax.Array], jax.Array],
    detach: bool = False, sharding: Optional[NamedSharding] = None,
) -> Callable:
    """`(carry, (k, δ_k, β_{k−1}, β_k, key)) -> (carry, None)`: step k of the batch: move and
    reweight (`smc.step`'s incremental weight); where ESS/N < `threshold` or k = K the segment ends:
    its loss, ELBO and log mean weight are added, and the particles resampled, held fixed."""
    steps = path.step_sizes.shape[0]
    log_gamma = annealed_log_density(forward, resolved, path)

    def step(carry: Carry, inputs) -> tuple[Carry, None]:
        states, log_w, total, elbo, log_z, segments = carry
        zero = jnp.zeros((), log_z.dtype)
        k, delta, beta_prev, beta, step_key = inputs
        k_move, k_resample = jax.random.split(step_key)
        if detach:
            states = jax.lax.stop_gradient(states)
        moved, log_forward, transition = jax.vmap(
            lambda kk, s: forward.step(kk, s, Step(k, beta, delta, detach), path, resolved, evaluate)
        )(shard(jax.random.split(k_move, num), sharding), states)
        log_backward = jax.vmap(lambda t: backward.log_density(backward_params, t))(transition)
        log_w = log_w + log_gamma(beta, moved) - log_gamma(beta_prev, states) + log_backward - log_forward
        fixed_w = jax.lax.stop_gradient(log_w)
        end = (ess_fraction(fixed_w) < threshold) | (k == steps)
        total = total + jnp.where(end, loss(log_w), zero)
        elbo = elbo + jnp.where(end, log_w, jnp.zeros_like(log_w))
        finite = jnp.where(jnp.isnan(fixed_w), -jnp.inf, fixed_w)
        log_z = log_z + jnp.where(end, logsumexp(finite) - math.log(num), zero)
        idx = resample(k_resample, normalised(fixed_w), num)
        chosen = jax.lax.stop_gradient(take(moved, idx))
        states = jax.tree.map(lambda a, b: jnp.where(end, a, b), chosen, moved)
        log_w = jnp.where(end, jnp.zeros_like(log_w), log_w)
        return (shard(states, sharding), log_w, total, elbo, log_z, segments + end.astype(jnp.int32)), None

    return step


def segment_log_weights(
    key: jax.Array,
    forward: ForwardKernel,
    backward: BackwardKernel,
    resample: Resampler,
    path: AnnealedPath,
    resolved: Any,
    backward_params: Any,
    evaluate: Callable,
    num: int,
    threshold: float,
    loss: Callable[[jax.Array], jax.Array],
    detach: bool = False,
    scan: Optional[Callable] = None,
    sharding: Optional[NamedSharding] = None,
) -> tuple[jax.Array, jax.Array, dict]:
    """One batch of `num` particles through the K steps, resampled when ESS/N < `threshold`.

    Args:
        key: the batch's key.
        forward, backward: the kernels; `resolved` the forward kernel's prepared parameters,
            `backward_params` the backward kernel's.
        resample: the resampling function.
        path: the annealed path (its β and δ may carry derivatives).
        evaluate: `x -> (log γ(x), ∇log γ(x))`.
        num: particles.
        threshold: resample when ESS/N falls below it (0: never before the last step; 1: after every step).
        loss: the objective of one segment's log weights.
        detach: hold the trajectories fixed (the log-variance loss).
        scan: `(step, carry, xs) -> carry` over the K steps (default `lax.scan`; training passes
            `annealing.scan_steps` to checkpoint long schedules).
        sharding: the particle axis over a mesh of devices.

    Returns:
        `(loss, elbo, info)`: the sum of the segment losses; per slot `Σ_s log w_s(i)`, shape
        `(num,)`; and `info` with the number of segments and the batch's SMC `log_z` (no derivative).
    """
    steps = path.step_sizes.shape[0]
    key_x, key_init, key_steps = jax.random.split(key, 3)
    carry = initial_batch(key_x, key_init, forward, path, resolved, evaluate, num, sharding)
    step = build_segment_step(
        forward, backward, resample, path, resolved, backward_params, evaluate, num, threshold, loss, detach, sharding
    )
    inputs = (
        jnp.arange(1, steps + 1),
        path.step_sizes,
        path.betas[:-1],
        path.betas[1:],
        jax.random.split(key_steps, steps),
    )
    if scan is None:
        carry, _ = jax.lax.scan(step, carry, inputs)
    else:
        carry = scan(step, carry, inputs)
    _, _, total, elbo, log_z, segments = carry
    return total, elbo, {"segments": segments, "log_z": jax.lax.stop_gradient(log_z)}
