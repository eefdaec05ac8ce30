"""Fitting the sampler's parameters: an objective of the batch's log weights, minimised with Adam.

The objective is passed in (`objectives.elbo` by default: maximising the ELBO `E_Q[log w]`, the
paper's choice); the log weights come from the annealing loop, written for one particle and vmapped
over the batch. All noise is Gaussian and reparameterised, so the objective is differentiated end
to end. One jitted update is built per run (`make_update`); it never recompiles inside the loop.
The ELBO of every batch is reported whatever the objective.

Divergence: an update whose loss or gradient is not finite is skipped inside the jitted step (the
parameters and optimiser state are left as they were) and counted. After `max_bad_steps`
consecutive skipped updates the trainer restores the last snapshot of good parameters, halves the
learning rate and goes on; after `max_recoveries` such recoveries it raises `TrainingDiverged`.

Reproducibility: the key of iteration `i` is `fold_in(state.key, i)` and everything the loop
carries lives in `TrainState`, so a run resumed from a saved state is identical to one that was
never interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding

from mcd_cli import annealing, objectives
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import RunFailed
from mcd_cli.targets.base import Target


class TrainingDiverged(RunFailed):
    """Training kept producing non-finite losses or gradients after every allowed recovery."""


class TrainingInterrupted(Exception):
    """Training was interrupted (Ctrl-C); `state` is the last consistent `TrainState`."""

    def __init__(self, state: "TrainState"):
        super().__init__(f"training interrupted at iteration {state.iteration}")
        self.state = state


class TrainState(NamedTuple):
    """Everything needed to continue training exactly where it stopped (a checkpoint saves it whole)."""

    params: Any
    opt_state: Any
    key: jax.Array
    iteration: int = 0
    lr_scale: float = 1.0
    skipped: int = 0
    recoveries: int = 0
    bad_streak: int = 0
    snapshot_params: Any = None
    snapshot_opt_state: Any = None


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `fit` returns: the final state and the ELBO of every iteration run (NaN if skipped)."""

    state: TrainState
    elbo_history: np.ndarray
    skipped: int
    recoveries: int
    seconds: float

    @property
    def params(self) -> Any:
        return self.state.params


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
) -> tuple[jax.Array, jax.Array]:
    """The objective of one batch of log weights, and the batch's log weights.

    `sharding` splits the batch's particles over its mesh (`devices.Layout.particles`); the
    parameters stay replicated and XLA inserts the reduction of the batch mean.
    """
    log_w = annealing.log_weights(key, params, target, sconf, batch_size, sharding)
    return objective(log_w), log_w


def init_train_state(
    key: jax.Array, target: Target, sconf: SamplerConfig, tconf: TrainConfig
) -> TrainState:
    """Initial parameters (MCD warm-started to AIS) and optimiser state.

    Example:
        >>> import jax.numpy as jnp
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
        >>> s = init_train_state(jax.random.key(0), t, SamplerConfig(steps=4, hidden=8), TrainConfig(iterations=3))
        >>> s.iteration
        0
    """
    key_params, key_train = jax.random.split(key)
    params = annealing.init_params(key_params, target, sconf)
    opt_state = optimizer(tconf).init(params)
    return TrainState(
        params=params,
        opt_state=opt_state,
        key=key_train,
        snapshot_params=params,
        snapshot_opt_state=opt_state,
    )


def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


@functools.lru_cache(maxsize=8)
def make_update(
    target: Target,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    objective: Optional[objectives.Objective] = None,
    sharding: Optional[NamedSharding] = None,
) -> Callable:
    """The jitted update `(params, opt_state, key, lr_scale) -> (params, opt_state, elbo, ok)`.

    `objective` defaults to the one `tconf.objective` names; `elbo` is the batch's mean log weight.
    `sharding` (of the particle axis; the batch size a multiple of its device count) shards the
    batch over its devices.
    Cached, so the repeats of a run and the seeds of a benchmark compile the update once.

    `lr_scale` multiplies Adam's step (it is halved by recoveries) and is a traced argument, so
    changing it does not recompile. A non-finite loss or gradient returns the inputs unchanged
    with `ok = False`.
    """
    opt = optimizer(tconf)
    objective = objective or objectives.OBJECTIVES[tconf.objective]
    grad_fn = jax.value_and_grad(batch_loss, has_aux=True)

    @jax.jit
    def update(params, opt_state, key, lr_scale):
        (loss, log_w), grads = grad_fn(params, key, target, sconf, tconf.batch_size, objective, sharding)
        updates, new_opt_state = opt.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: lr_scale * u, updates)
        new_params = optax.apply_updates(params, updates)
        ok = jnp.isfinite(loss) & jnp.all(jnp.isfinite(log_w)) & _all_finite(grads)
        keep = lambda new, old: jnp.where(ok, new, old)  # noqa: E731
        new_params = jax.tree.map(keep, new_params, params)
        new_opt_state = jax.tree.map(keep, new_opt_state, opt_state)
        return new_params, new_opt_state, jnp.mean(log_w), ok

    return update


def _advance(state: TrainState, params, opt_state, ok: bool, tconf: TrainConfig) -> TrainState:
    """Host-side bookkeeping of one update: counters, snapshots, recoveries."""
    iteration = state.iteration + 1
    if ok:
        snapshot = iteration % tconf.snapshot_every == 0
        return state._replace(
            params=params,
            opt_state=opt_state,
            iteration=iteration,
            bad_streak=0,
            snapshot_params=params if snapshot else state.snapshot_params,
            snapshot_opt_state=opt_state if snapshot else state.snapshot_opt_state,
        )
    bad_streak = state.bad_streak + 1
    if bad_streak < tconf.max_bad_steps:
        return state._replace(iteration=iteration, skipped=state.skipped + 1, bad_streak=bad_streak)
    recoveries = state.recoveries + 1
    if recoveries > tconf.max_recoveries:
        raise TrainingDiverged(
            f"training diverged: {tconf.max_bad_steps} consecutive non-finite updates after "
            f"{state.recoveries} recoveries at iteration {iteration}; try a smaller --lr, fewer "
            f"--steps, or a target with finite log density and gradient"
        )
    return state._replace(
        params=state.snapshot_params,
        opt_state=state.snapshot_opt_state,
        iteration=iteration,
        skipped=state.skipped + 1,
        bad_streak=0,
        recoveries=recoveries,
        lr_scale=state.lr_scale * 0.5,
    )


def fit(
    state: TrainState,
    target: Target,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    *,
    callback: Optional[Callable[[int, float], None]] = None,
    checkpoint_every: int = 0,
    on_checkpoint: Optional[Callable[[TrainState], None]] = None,
    update: Optional[Callable] = None,
    objective: Optional[objectives.Objective] = None,
) -> TrainResult:
    """Runs the updates `state.iteration … tconf.iterations − 1`.

    Args:
        state: from `init_train_state`, or a saved state to resume.
        target, sconf, tconf: what is trained and how.
        callback: `callback(iteration, elbo)` on the host after every update (progress display).
        checkpoint_every: call `on_checkpoint(state)` every this many iterations (0: never), and
            once at the end.
        on_checkpoint: saves a state (e.g. `checkpoint.save_state`).
        update: a prebuilt `make_update(...)`, to share one compilation between calls.
        objective: what to minimise (default: the one `tconf.objective` names); ignored with `update`.

    Raises:
        TrainingDiverged: see the module docstring.
        TrainingInterrupted: on KeyboardInterrupt, carrying the last consistent state.
    """
    update = update or make_update(target, sconf, tconf, objective)
    start_iteration = state.iteration
    history = np.full(max(tconf.iterations - start_iteration, 0), np.nan)
    t0 = time.perf_counter()
    try:
        while state.iteration < tconf.iterations:
            i = state.iteration
            params, opt_state, elbo, ok = update(
                state.params,
                state.opt_state,
                jax.random.fold_in(state.key, i),
                jnp.asarray(state.lr_scale, dtype=jnp.float32),
            )
            ok, elbo = bool(ok), float(elbo)
            state = _advance(state, params, opt_state, ok, tconf)
            if ok:
                history[i - start_iteration] = elbo
            if callback is not None:
                callback(i, elbo if ok else float("nan"))
            if on_checkpoint is not None and checkpoint_every > 0 and state.iteration % checkpoint_every == 0:
                on_checkpoint(state)
    except KeyboardInterrupt:
        raise TrainingInterrupted(state) from None
    if on_checkpoint is not None and checkpoint_every > 0:
        on_checkpoint(state)
    return TrainResult(
        state=state,
        elbo_history=history,
        skipped=state.skipped,
        recoveries=state.recoveries,
        seconds=time.perf_counter() - t0,
    )
