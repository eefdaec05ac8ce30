"""Fitting the sampler's parameters: an objective of the batch's log weights, minimised with Adam.

The objective is passed in (`objectives.elbo` by default: maximising the ELBO `E_Q[log w]`, the
paper's choice; `objectives.OBJECTIVES["logvar"]` holds the trajectories fixed); the log weights
come from the annealing loop, written for one particle and vmapped over the batch. The ELBO of
every batch is reported whatever the objective.

On the device, in chunks: `make_train_chunk` compiles `TrainConfig.chunk` updates as one
`lax.while_loop`, with the bookkeeping below carried on the device; the host sees the state only
between chunks (progress, checkpoints, the stopping rule). Chunks end where a checkpoint is due,
so a resumed run takes exactly the same updates as one never interrupted, and a chunk of 1 is the
one-update-per-call loop (same parameters for the same keys).

Divergence: an update whose loss or gradient is not finite is skipped (the parameters and
optimiser state are left as they were) and counted. After `max_bad_steps` consecutive skipped
updates the last snapshot of good parameters is restored and the learning rate halved; after
`max_recoveries` such recoveries `fit` raises `TrainingDiverged`.

Stopping: with `TrainConfig.stop = "plateau"` (`--iterations auto`), training ends at the first
chunk boundary where the ELBO has stopped improving by more than its noise (`plateaued`), or at
`iterations`, the cap. Reproducibility: the key of iteration `i` is `fold_in(state.key, i)`.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from mcd_cli.path import annealing
from mcd_cli.train import objectives
from mcd_cli.smc import resampling
from mcd_cli.kernels import registry
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.smc import segments
from mcd_cli.train import stopping
from mcd_cli.train.state import TrainingDiverged, TrainingInterrupted, TrainResult, TrainState  # noqa: F401 (re-exported)
from mcd_cli.targets.base import Target


def optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping followed by Adam."""
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.adam(config.lr))


def batch_loss(
    params: Any,
    key: jax.Array,
    target: Target,
    sconf: SamplerConfig,
    batch_size: int,
    objective: objectives.Objective,
    sharding: Optional[NamedSharding] = None,
    batch_backward: bool = True,
    train_with: str = "is",
) -> tuple[jax.Array, jax.Array]:
    """The objective of one batch of log weights, and the batch's log weights.

    `sharding` splits the batch's particles over its mesh (`devices.Layout.particles`); the
    parameters stay replicated and XLA inserts the reduction of the batch mean. With
    `batch_backward` a learned backward kernel scores the K transitions in one call
    (`annealing.log_weight`).

    `train_with="smc"`: the batch runs as one SMC population, resampled when its ESS/N falls below
    `sconf.resample`, and the objective is summed over the segments between resamplings
    (`smc.segments`); the second value is then each slot's sum of segment log weights, whose mean
    is the segments' ELBO.
    """
    objective = objectives.as_objective(objective)
    if train_with == "smc":
        return _smc_batch_loss(params, key, target, sconf, batch_size, objective, sharding)
    trainable = registry.estimator(sconf.sampler, sconf.backward).backward.trainable
    log_w = annealing.log_weights(
        key, params, target, sconf, batch_size, detach=objective.detach, sharding=sharding,
        batch_backward=batch_backward and trainable,
    )
    return objective(log_w), log_w


def _smc_batch_loss(params, key, target: Target, sconf: SamplerConfig, batch_size: int, objective, sharding):
    """`batch_loss` with SMC in the loop (`smc.segments.segment_log_weights`): the summed segment
    losses, and each slot's sum of segment log weights."""
    est = registry.estimator(sconf.sampler, sconf.backward)
    if objective.detach:
        annealing.require_detachable(est.forward)
    path = annealing.annealed_path(params.path, target, sconf)
    resolved = est.forward.prepare(params.forward, target.dim)

    def scan(step, carry, xs):
        return annealing.scan_steps(step, carry, xs, sconf.steps, sconf.remat, sconf.unroll)

    loss, elbo, _ = segments.segment_log_weights(
        key, est.forward, est.backward, resampling.scheme(sconf.resampling), path, resolved, params.backward,
        jax.value_and_grad(target.log_density), batch_size, sconf.resample, objective, objective.detach, scan,
        sharding,
    )
    return loss, elbo


def init_train_state(
    key: jax.Array,
    target: Target,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    step_sizes: Optional[np.ndarray] = None,
    betas: Optional[np.ndarray] = None,
) -> TrainState:
    """Initial parameters (MCD warm-started to AIS) and optimiser state.

    `step_sizes`: per-step initial sizes δ_1 … δ_K (e.g. from `pilot.curvature_step_sizes`);
    default: `sconf.init_step_size` at every step. `betas`: the learned schedule's start
    (`annealing.init_params`).

    Example:
        >>> import jax.numpy as jnp
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
        >>> s = init_train_state(jax.random.key(0), t, SamplerConfig(steps=4, hidden=8), TrainConfig(iterations=3))
        >>> s.iteration
        0
    """
    key_params, key_train = jax.random.split(key)
    params = annealing.init_params(key_params, target, sconf, step_sizes=step_sizes, betas=betas)
    opt_state = optimizer(tconf).init(params)
    return TrainState(
        params=params,
        opt_state=opt_state,
        key=key_train,
        snapshot_params=params,
        snapshot_opt_state=opt_state,
        recent=np.full(2 * tconf.plateau_window, np.nan, dtype=np.float32),
    )


def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _update_fn(
    target: Target, sconf: SamplerConfig, tconf: TrainConfig, objective, sharding: Optional[NamedSharding] = None
) -> Callable:
    """The pure update `(params, opt_state, key, lr_scale) -> (params, opt_state, elbo, ok)`.

    `sharding` (of the particle axis; the batch size a multiple of its device count) shards the
    batch over its devices.
    """
    objective = objectives.as_objective(objective or tconf.objective)

    def loss(params, key):
        return batch_loss(
            params, key, target, sconf, tconf.batch_size, objective, sharding, tconf.batch_backward, tconf.train_with
        )

    return guarded_update(loss, tconf)


def guarded_update(loss: Callable, tconf: TrainConfig) -> Callable:
    """`update(params, opt_state, key, lr_scale, *args) -> (params, opt_state, elbo, ok)` for a
    `loss(params, key, *args) -> (loss, log_w)`: one clipped Adam step scaled by `lr_scale`, left
    undone (`ok = False`) when the loss, a log weight or a gradient is not finite."""
    opt = optimizer(tconf)
    grad_fn = jax.value_and_grad(loss, has_aux=True)

    def update(params, opt_state, key, lr_scale, *args):
        (value, log_w), grads = grad_fn(params, key, *args)
        updates, new_opt_state = opt.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: lr_scale * u, updates)
        new_params = optax.apply_updates(params, updates)
        ok = jnp.isfinite(value) & jnp.all(jnp.isfinite(log_w)) & _all_finite(grads)
        keep = lambda new, old: jnp.where(ok, new, old)  # noqa: E731
        new_params = jax.tree.map(keep, new_params, params)
        new_opt_state = jax.tree.map(keep, new_opt_state, opt_state)
        return new_params, new_opt_state, jnp.mean(log_w), ok

    return update


@functools.lru_cache(maxsize=8)
def make_update(target: Target, sconf: SamplerConfig, tconf: TrainConfig, objective=None, sharding=None) -> Callable:
    """One jitted update `(params, opt_state, key, lr_scale) -> (params, opt_state, elbo, ok)`.

    `objective` defaults to the one `tconf.objective` names; `elbo` is the batch's mean log weight.
    `lr_scale` multiplies Adam's step and is traced (changing it does not recompile). A
    non-finite loss or gradient returns the inputs unchanged with `ok = False`. `fit` runs the
    same update inside `make_train_chunk`; this single step is what the speed benchmark times.
    """
    return jax.jit(_update_fn(target, sconf, tconf, objective, sharding))


def _step(update: Callable, tconf: TrainConfig, state: TrainState) -> tuple[TrainState, jax.Array]:
    """One update with the divergence bookkeeping on the device; returns the state and the ELBO
    (NaN when the update was skipped)."""
    window = 2 * tconf.plateau_window
    i = state.iteration
    params, opt_state, elbo, ok = update(state.params, state.opt_state, jax.random.fold_in(state.key, i), state.lr_scale)
    iteration = i + 1
    snapshot = ok & (iteration % tconf.snapshot_every == 0)
    bad_streak = jnp.where(ok, 0, state.bad_streak + 1)
    recover = bad_streak >= tconf.max_bad_steps
    pick = lambda cond, a, b: jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)  # noqa: E731
    elbo = jnp.where(ok, elbo, jnp.nan).astype(state.recent.dtype)
    new = state._replace(
        params=pick(recover, state.snapshot_params, params),
        opt_state=pick(recover, state.snapshot_opt_state, opt_state),
        iteration=iteration,
        lr_scale=jnp.where(recover, 0.5 * state.lr_scale, state.lr_scale),
        skipped=state.skipped + jnp.where(ok, 0, 1),
        recoveries=state.recoveries + jnp.where(recover, 1, 0),
        bad_streak=jnp.where(recover, 0, bad_streak),
        snapshot_params=pick(snapshot, params, state.snapshot_params),
        snapshot_opt_state=pick(snapshot, opt_state, state.snapshot_opt_state),
        recent=state.recent.at[i % window].set(elbo),
    )
    return new, elbo


@functools.lru_cache(maxsize=8)
def make_train_chunk(
    target: Target,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    objective: Optional[objectives.Objective] = None,
    chunk: Optional[int] = None,
    sharding: Optional[NamedSharding] = None,
) -> Callable:
    """`(state, stop) -> (state, elbos)`: up to `chunk` (default `tconf.chunk`) updates in one call.

    `sharding` (of the particle axis) shards each update's batch over its devices (`make_update`);
    the state is then placed on its mesh, replicated, before each call, as the chunk's outputs
    leave it, so that the second chunk, whose state is the first's output, runs the first's
    program. (An array's type includes its mesh: a fresh state's, on none, is another input type,
    traced and compiled again; on gmm8, d = 2, a second compilation of 23 s, as long as the first.)
    With several processes a fresh state becomes a global array from each process's copy
    (tests/test_devices.py, two processes, slow).

    `state` is a `TrainState` whose counters are device scalars (`fit` converts); a
    `lax.while_loop` runs updates while `state.iteration < stop`, at most `chunk` of them, and
    stops for good after `max_recoveries` recoveries (the host then raises). `elbos` has one
    entry per slot of the chunk, NaN for skipped updates and unused slots.
    """
    update = _update_fn(target, sconf, tconf, objective, sharding)
    compiled = jax.jit(chunk_loop(update, tconf, int(chunk or tconf.chunk)))
    if sharding is None:
        return compiled
    replicated = NamedSharding(sharding.mesh, PartitionSpec())

    def global_leaf(leaf):
        # With several processes the mesh holds devices this process cannot address (`device_put`
        # refuses them): a chunk's output is already on the mesh, and a fresh leaf is made a global
        # array from each process's copy of its (replicated) value.
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return leaf
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):  # a typed key: its bits
            bits = jax.make_array_from_process_local_data(replicated, np.asarray(jax.random.key_data(leaf)))
            return jax.random.wrap_key_data(bits, impl=jax.random.key_impl(leaf))
        return jax.make_array_from_process_local_data(replicated, np.asarray(leaf))

    def placed(state, stop):
        if jax.process_count() == 1:
            return compiled(jax.device_put(state, replicated), stop)
        return compiled(jax.tree.map(global_leaf, state), stop)

    placed._cache_size = compiled._cache_size  # the programs compiled (tests)
    return placed


def chunk_loop(update: Callable, tconf: TrainConfig, length: int) -> Callable:
    """The traceable body of `make_train_chunk` for any pure `update(params, opt_state, key,
    lr_scale) -> (params, opt_state, elbo, ok)` (the amortised trainer passes its own)."""

    def run(state, stop):
        def more(carry):
            state, _, j = carry
            return (j < length) & (state.iteration < stop) & (state.recoveries <= tconf.max_recoveries)

        def body(carry):
            state, elbos, j = carry
            state, elbo = _step(update, tconf, state)
            return state, elbos.at[j].set(elbo), j + 1

        elbos = jnp.full((length,), jnp.nan, state.recent.dtype)
        state, elbos, _ = jax.lax.while_loop(more, body, (state, elbos, jnp.asarray(0, jnp.int32)))
        return state, elbos

    return run


_COUNTERS = ("iteration", "lr_scale", "skipped", "recoveries", "bad_streak")


def _to_device(state: TrainState) -> TrainState:
    return state._replace(
        iteration=jnp.asarray(state.iteration, jnp.int32),
        lr_scale=jnp.asarray(state.lr_scale, jnp.float32),
        skipped=jnp.asarray(state.skipped, jnp.int32),
        recoveries=jnp.asarray(state.recoveries, jnp.int32),
        bad_streak=jnp.asarray(state.bad_streak, jnp.int32),
        recent=jnp.asarray(state.recent, jnp.float32),
    )


def _to_host(state: TrainState) -> TrainState:
    counters = jax.device_get({name: getattr(state, name) for name in _COUNTERS})
    return state._replace(
        iteration=int(counters["iteration"]),
        lr_scale=float(counters["lr_scale"]),
        skipped=int(counters["skipped"]),
        recoveries=int(counters["recoveries"]),
        bad_streak=int(counters["bad_streak"]),
        recent=np.asarray(state.recent),
    )


def _full_history(history: Optional[np.ndarray], state: TrainState, tconf: TrainConfig) -> np.ndarray:
    """The ELBO history `fit` fills in: room for every iteration up to the cap (or to `state.iteration`,
    if past it), NaN where not yet run, with `history`'s entries before `state.iteration` kept."""
    earlier = np.asarray(history if history is not None else (), dtype=np.float64)[: state.iteration]
    full = np.full(max(tconf.iterations, state.iteration), np.nan)
    full[: earlier.size] = earlier
    return full


def _chunk_end(iteration: int, tconf: TrainConfig, checkpoint_every: int) -> int:
    """Where the chunk starting at `iteration` stops: `tconf.chunk` updates later, at the cap, or at
    the next checkpoint, whichever comes first (so a resumed run takes the same chunks' updates)."""
    stop = min(tconf.iterations, iteration + int(tconf.chunk))
    if checkpoint_every > 0:
        stop = min(stop, (iteration // checkpoint_every + 1) * checkpoint_every)
    return stop


def _advance(
    run_chunk: Callable, state: TrainState, tconf: TrainConfig, checkpoint_every: int
) -> tuple[TrainState, np.ndarray]:
    """One chunk on the device from a host state: the host state after it, and the ELBOs of the
    updates it ran (float64, NaN where skipped)."""
    stop = _chunk_end(state.iteration, tconf, checkpoint_every)
    new_state, elbos = run_chunk(_to_device(state), jnp.asarray(stop, jnp.int32))
    new_state = _to_host(new_state)
    return new_state, np.asarray(elbos, dtype=np.float64)[: new_state.iteration - state.iteration]


def _report(callback: Optional[Callable[[int, float], None]], first: int, elbos: np.ndarray) -> None:
    """Calls `callback(iteration, elbo)` for each of a chunk's updates, from iteration `first` on."""
    if callback is not None:
        for j, elbo in enumerate(elbos):
            callback(first + j, float(elbo))


def _diverged(state: TrainState, tconf: TrainConfig) -> bool:
    """Rule "diverged": more recoveries than `max_recoveries` (the chunk loop has stopped for good)."""
    return state.recoveries > tconf.max_recoveries


def _divergence_error(state: TrainState, tconf: TrainConfig) -> TrainingDiverged:
    """The error `fit` raises when training diverged, with what to try instead."""
    return TrainingDiverged(
        f"training diverged: {tconf.max_bad_steps} consecutive non-finite updates after "
        f"{tconf.max_recoveries} recoveries at iteration {state.iteration}; try a smaller "
        "--lr, fewer --steps, --init vi, or a target with finite log density and gradient"
    )


def fit(
    state: TrainState,
    target: Target,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    *,
    callback: Optional[Callable[[int, float], None]] = None,
    checkpoint_every: int = 0,
    on_checkpoint: Optional[Callable[[TrainState, np.ndarray], None]] = None,
    update: Optional[Callable] = None,
    objective: Optional[objectives.Objective] = None,
    history: Optional[np.ndarray] = None,
    seconds: Optional[float] = None,
    min_updates: Optional[int] = None,
) -> TrainResult:
    """Runs the updates `state.iteration … tconf.iterations − 1` (or until the ELBO plateaus, or
    until `seconds` have passed, or until their rate says `min_updates` will not be reached).

    Args:
        state: from `init_train_state`, or a saved state to resume.
        target, sconf, tconf: what is trained and how.
        callback: `callback(iteration, elbo)` on the host for every update (after its chunk).
        checkpoint_every: call `on_checkpoint(state, history)` every this many iterations (0:
            never), and once at the end; `history` is the ELBO of iterations `0 … state.iteration − 1`.
        on_checkpoint: saves a state and its history (e.g. `checkpoint.save_state`).
        update: a prebuilt `make_train_chunk(...)`, to share one compilation between calls.
        objective: what to minimise (default: the one `tconf.objective` names); ignored with `update`.
        history: the ELBOs of the iterations before `state.iteration` (a resumed state's, as its
            checkpoint kept them), so that a resumed run reports the same history as one that ran
            through; missing entries are NaN.
        seconds: stop at the end of the first chunk that ends after this many seconds of wall time
            (stop reason "time"; None: no bound). The updates made are those of a run of
            `state.iteration` updates without the bound, chunk for chunk: the count reproduces them.
        min_updates: with `seconds`, stop at the end of a chunk after the second when the updates
            made by then, and the chunks that the rate of those after the first (which compiles)
            adds until the clock stops them (the chunk running at `seconds` included), come to
            fewer than this (stop reason "slow"): training that cannot make them in its time is
            stopped early, not run to its end.

    Raises:
        TrainingDiverged: see the module docstring.
        TrainingInterrupted: on KeyboardInterrupt, carrying the last consistent state (a chunk
            boundary).
    """
    run_chunk = update or make_train_chunk(target, sconf, tconf, objective)
    history = _full_history(history, state, tconf)
    stop_reason = "iterations"
    t0 = time.perf_counter()
    steady: Optional[tuple[int, float]] = None  # (iteration, time) at the end of the first chunk
    try:
        while state.iteration < tconf.iterations:
            i0 = state.iteration
            new_state, elbos = _advance(run_chunk, state, tconf, checkpoint_every)
            history[i0 : new_state.iteration] = elbos
            if _diverged(new_state, tconf):
                _report(callback, i0, elbos)
                raise _divergence_error(new_state, tconf)
            state = new_state
            _report(callback, i0, elbos)
            if on_checkpoint is not None and checkpoint_every > 0 and state.iteration % checkpoint_every == 0:
                on_checkpoint(state, history[: state.iteration])
            reason, steady = stopping.stop_reason(
                state.iteration, state.recent, tconf, t0, steady, seconds, min_updates, clock=time.perf_counter
            )
            if reason is not None:
                stop_reason = reason
                break
    except KeyboardInterrupt:
        raise TrainingInterrupted(state, history[: state.iteration]) from None
    if on_checkpoint is not None and checkpoint_every > 0:
        on_checkpoint(state, history[: state.iteration])
    return TrainResult(
        state=state,
        elbo_history=history[: state.iteration],
        skipped=state.skipped,
        recoveries=state.recoveries,
        seconds=time.perf_counter() - t0,
        stop_reason=stop_reason,
    )
