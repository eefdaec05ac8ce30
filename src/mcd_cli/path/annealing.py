"""The annealing loop: one particle from `π0` to the target through K steps of any kernel pair.

`log w = −log π0(x_0) + [forward's initial terms] + Σ_k [log B_{k-1} − log F_k] + [final terms]`,
where the final terms are `log γ(x_K)` (and, for UHA, the momentum's density). Written for one
particle; `log_weights` vmaps it, and `log_weight_chunk` compiles a fixed-size chunk of particles
whose keys are `fold_in(key, i)`, so results do not depend on the chunk size.

Exactly `K + 1` target gradients per trajectory: one at `x_0`, one per step at the new position,
whose value and gradient the kernel carries to the next step.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from mcd_cli.config import SamplerConfig
    >>> from mcd_cli.targets import Target
    >>> target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    >>> config = SamplerConfig(sampler="uha", backward="mcd", steps=8, hidden=16)
    >>> params = init_params(jax.random.key(0), target, config)
    >>> log_weights(jax.random.key(1), params, target, config, 4).shape
    (4,)
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from mcd_cli.path import schedules
from mcd_cli.config import SamplerConfig
from mcd_cli.kernels import registry
from mcd_cli.kernels.base import AnnealedPath, Step
from mcd_cli.targets.base import Target
from mcd_cli.targets.conditional import ConditionalTarget, context, datum_target


class PathParams(NamedTuple):
    """Learned parameters of the path, shared by every kernel pair."""

    step_size: dict  # the step-size MLP of δ_k
    schedule: Optional[dict]  # learned β (None: linear β_k = k / K)


class SamplerParams(NamedTuple):
    """Everything a run learns: the path, the forward kernel's and the backward kernel's parameters."""

    path: PathParams
    forward: Any
    backward: Any


def init_params(
    key: jax.Array, target: Target, config: SamplerConfig, step_sizes: Optional[np.ndarray] = None,
    betas: Optional[np.ndarray] = None,
) -> SamplerParams:
    """Initial parameters of the configured estimator (MCD starts equal to AIS).

    The key is split into (path, forward, backward) keys, whatever the kernels. `step_sizes`
    (shape `(K,)`, e.g. from `step_sizes.curvature_step_sizes`) sets the initial δ_k per step;
    default: `config.init_step_size` at every step. `betas` (shape `(K + 1,)`, with
    `config.learn_schedule`) starts the learned schedule there (`schedules.schedule_from_betas`;
    `run.start`'s tempered start); default: linear.
    """
    est = registry.estimator(config.sampler, config.backward)
    k_path, k_forward, k_backward = jax.random.split(key, 3)
    if config.step_size == "pilot" or step_sizes is not None:
        # One parameter per step, so any per-step sizes are representable (the curvature run's);
        # without sizes, constant ones give the same structure (a template to load into).
        if step_sizes is None:
            step_sizes = np.full(config.steps, config.init_step_size)
        step_size = schedules.per_step_sizes(step_sizes, config.max_step_size)
    else:
        step_size = schedules.init_step_size(k_path, config.init_step_size, config.max_step_size)
    path = PathParams(
        step_size=step_size,
        schedule=(
            None if not config.learn_schedule
            else schedules.init_schedule(config.steps) if betas is None
            else schedules.schedule_from_betas(betas)
        ),
    )
    in_dim = est.forward.score_input_dim(target.dim)
    return SamplerParams(
        path=path,
        forward=est.forward.init_params(k_forward, target.dim, config),
        backward=est.backward.init_params(k_backward, in_dim, target.dim, config.steps, config),
    )


def annealed_path(params: PathParams, target: Target, config: SamplerConfig) -> AnnealedPath:
    """Resolves the per-step quantities from the parameters (once per trajectory)."""
    return AnnealedPath(
        step_sizes=schedules.step_sizes(params.step_size, config.steps, config.max_step_size),
        betas=schedules.betas(params.schedule, config.steps),
        init_mean=jnp.asarray(target.initial_mean, dtype=jnp.result_type(float)),
        init_scale=jnp.asarray(target.initial_scale, dtype=jnp.result_type(float)),
    )


def remat_segments(steps: int) -> tuple[int, int]:
    """Splits K steps into `(outer, inner)` segments with `outer · inner = K`, `inner ≈ √K`."""
    inner = max(d for d in range(1, math.isqrt(steps) + 1) if steps % d == 0)
    return steps // inner, inner


def scan_steps(step: Callable, carry: Any, xs: Any, steps: int, remat: bool, unroll: int = 1) -> Any:
    """Runs `step` over the K per-step inputs `xs`; returns the final carry.

    `unroll` steps are fused into one iteration of the compiled loop (`lax.scan(..., unroll=)`):
    fewer, larger kernels per step on an accelerator, at the cost of compile time.

    With `remat`, the scan is split into `outer × inner` segments and each segment is a
    `jax.checkpoint`: reverse-mode differentiation then stores only the `outer` carries between
    segments plus one segment's `inner` carries, instead of every intermediate of every step
    (memory O(√K) in the trajectory instead of O(K)), at the cost of a second forward pass.
    """
    if not remat:
        carry, _ = jax.lax.scan(step, carry, xs, unroll=max(1, min(unroll, steps)))
        return carry
    outer, inner = remat_segments(steps)
    segmented = jax.tree.map(lambda a: a.reshape((outer, inner) + a.shape[1:]), xs)
    step_ckpt = jax.checkpoint(step, prevent_cse=False)

    @jax.checkpoint
    def segment(c, seg_xs):
        c, _ = jax.lax.scan(step_ckpt, c, seg_xs, unroll=max(1, min(unroll, inner)))
        return c, None

    carry, _ = jax.lax.scan(segment, carry, segmented)
    return carry


def require_detachable(forward: Any) -> None:
    """ValueError unless the forward kernel has a density at fixed points (the log-variance loss)."""
    if not forward.detachable:
        raise ValueError(
            f"the {forward.label} forward kernel has no density at fixed points, so its trajectories "
            "cannot be held fixed; train it with the ELBO"
        )


def log_weight(
    key: jax.Array,
    params: SamplerParams,
    target: Target,
    config: SamplerConfig,
    detach: bool = False,
    context: Optional[jax.Array] = None,
    batch_backward: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Log importance weight and final position of one particle.

    With `detach`, the trajectory is held fixed: its value is the same, but derivatives in the
    parameters are taken at the fixed points (the kernels' log densities there), never along the
    trajectory (the log-variance loss; needs a `detachable` forward kernel).

    `context` (a datum's features, for an amortised score network) is handed to the backward
    kernel with every transition; None for an unconditional target.

    With `batch_backward`, the scan over steps only moves the particle and stacks the K
    transitions; the backward kernel then scores all K in one batched call (the same sum, in
    another order). A learned backward kernel's network then runs as a few large operations
    instead of a few small ones per step, which is what an accelerator needs (training; docs/
    method.md, "Training"). It stores the K transitions, so it is not combined with `remat`.
    """
    est = registry.estimator(config.sampler, config.backward)
    forward, backward = est.forward, est.backward
    path = annealed_path(params.path, target, config)
    resolved = forward.prepare(params.forward, target.dim)
    evaluate = jax.value_and_grad(target.log_density)
    key_x, key_kernel, key_steps = jax.random.split(key, 3)

    if detach:
        require_detachable(forward)
    x0 = path.sample_initial(key_x)
    if detach:
        x0 = jax.lax.stop_gradient(x0)
    log_target0, target_grad0 = evaluate(x0)
    state, log_w0 = forward.init(key_kernel, x0, log_target0, target_grad0, resolved)
    log_w0 = log_w0 - path.initial_log_density(x0)

    def move(state, inputs):
        k, delta, beta, step_key = inputs
        if detach:
            state = jax.lax.stop_gradient(state)
        state, log_forward, transition = forward.step(
            step_key, state, Step(k, beta, delta, detach), path, resolved, evaluate
        )
        if context is not None:
            transition = transition._replace(context=context)
        return state, log_forward, transition

    def one_step(carry, inputs):
        state, log_w = carry
        state, log_forward, transition = move(state, inputs)
        log_backward = backward.log_density(params.backward, transition)
        return (state, log_w + log_backward - log_forward), None

    inputs = (
        jnp.arange(1, config.steps + 1),
        path.step_sizes,
        path.betas[1:],
        jax.random.split(key_steps, config.steps),
    )
    if batch_backward and not config.remat:

        def forward_only(carry, inputs):
            state, log_w = carry
            state, log_forward, transition = move(state, inputs)
            return (state, log_w - log_forward), transition

        unroll = max(1, min(config.unroll, config.steps))
        (state, log_w), transitions = jax.lax.scan(forward_only, (state, log_w0), inputs, unroll=unroll)
        log_w = log_w + jnp.sum(jax.vmap(lambda t: backward.log_density(params.backward, t))(transitions))
    else:
        state, log_w = scan_steps(one_step, (state, log_w0), inputs, config.steps, config.remat, config.unroll)
    if detach:
        state = jax.lax.stop_gradient(state)
    return log_w + forward.finish(state, resolved), state.position


def log_weights(
    key: jax.Array,
    params: SamplerParams,
    target: Target,
    config: SamplerConfig,
    num: int,
    detach: bool = False,
    sharding: Optional[NamedSharding] = None,
    batch_backward: bool = False,
) -> jax.Array:
    """Log importance weights of `num` independent particles, shape `(num,)`.

    `sharding` (of the particle axis, `devices.Layout.particles`) splits the particles over its
    mesh; the keys, hence the weights, are those of the unsharded call. `batch_backward`: see
    `log_weight`.
    """
    keys = jax.random.split(key, num)
    if sharding is not None:
        keys = jax.lax.with_sharding_constraint(keys, sharding)
    log_w, _ = jax.vmap(
        lambda k: log_weight(k, params, target, config, detach, batch_backward=batch_backward)
    )(keys)
    return log_w


@functools.lru_cache(maxsize=16)
def log_weight_chunk(
    target: Target, config: SamplerConfig, chunk_size: int, sharding: Optional[NamedSharding] = None
) -> Callable[..., jax.Array]:
    """Compiled `(params, key, first_index[, x]) -> log weights of particles first_index … + chunk_size`.

    Particle `i` uses the key `fold_in(key, i)`. For a `ConditionalTarget` the datum `x` is a fourth
    argument (traced, so one compilation serves every datum): the particles run on
    `datum_target(target, x)`, with the datum's features as the score network's context when
    `config.context_dim > 0`. With `sharding` (of the particle axis; `chunk_size` a multiple of its
    device count) each device computes its share of the particles and the weights come back
    replicated, so every process holds the whole chunk. Cached, so repeated estimates of the same
    target and configuration compile once.
    """

    @jax.jit
    def chunk(params, key, first_index, x=None):
        one, ctx = datum(target, config, x)
        indices = first_index + jnp.arange(chunk_size)
        if sharding is not None:
            indices = jax.lax.with_sharding_constraint(indices, sharding)
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(indices)
        log_w, _ = jax.vmap(lambda k: log_weight(k, params, one, config, context=ctx))(keys)
        if sharding is not None:
            log_w = jax.lax.with_sharding_constraint(log_w, NamedSharding(sharding.mesh, PartitionSpec()))
        return log_w

    return chunk


def datum(target: Any, config: SamplerConfig, x: Optional[jax.Array]) -> tuple[Target, Optional[jax.Array]]:
    """The `Target` the particles run on and the score network's context: `target` itself and None,
    or, for a conditional target, the datum `x`'s target and (amortised) its features."""
    if not isinstance(target, ConditionalTarget):
        return target, None
    return datum_target(target, x), (context(target, x) if config.context_dim else None)


def sample_log_weights(
    key: jax.Array,
    params: SamplerParams,
    target: Target,
    config: SamplerConfig,
    num_samples: int = 16_384,
    chunk_size: int = 1024,
    callback: Optional[Callable[[int, int], None]] = None,
    sharding: Optional[NamedSharding] = None,
    x: Optional[Any] = None,
) -> np.ndarray:
    """`num_samples` log weights (float64 on the host), generated `chunk_size` particles at a time
    (of the datum `x` for a conditional target, `log_weight_chunk`).

    Memory is bounded by one chunk on the device plus the N scalars kept on the host. With
    `sharding` (of the particle axis) the chunk size is rounded up to a multiple of its device count;
    the particles past `num_samples` are dropped, so the weights do not change.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    chunk_size = max(1, min(chunk_size, num_samples))
    if sharding is not None:
        count = sharding.mesh.devices.size
        chunk_size = -(-chunk_size // count) * count
    chunk = log_weight_chunk(target, config, chunk_size, sharding)
    out = np.empty(num_samples, dtype=np.float64)
    for start in range(0, num_samples, chunk_size):
        first = jnp.asarray(start, dtype=jnp.uint32)
        values = np.asarray(chunk(params, key, first) if x is None else chunk(params, key, first, jnp.asarray(x)))
        stop = min(start + chunk_size, num_samples)
        out[start:stop] = values[: stop - start]
        if callback is not None:
            callback(stop, num_samples)
    return out
