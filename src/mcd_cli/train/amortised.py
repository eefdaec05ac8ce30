"""The training objective of a conditional target: one sampler for many data.

For a datum x the log weights are those of the annealing loop on `datum_target(target, x)`, with
the datum's features handed to the score network when it is amortised (`sconf.context_dim > 0`).
Training draws `data_batch` data and `batch_size // data_batch` particles for each, and minimises
the average over the drawn data of the per-datum objective (for the ELBO, the mean log weight;
for the log-variance loss, each datum's own variance, since the data's evidences differ). With one
datum (a separate run per datum) it is the ordinary objective of that datum's batch.

The data set is an argument of the compiled functions, not a constant folded into them, so one
compilation serves every datum, and a separate run per datum does not recompile. Training runs
`tconf.chunk` updates per call in one `lax.while_loop`, with `training`'s on-device bookkeeping
(skipped updates, recoveries), and `training.fit` drives it.
The estimates use the ordinary annealing chunk and SMC with the datum as an argument
(`annealing.log_weight_chunk`, `run.perdatum`).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.path import annealing
from mcd_cli.train import objectives
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.targets.conditional import ConditionalTarget
from mcd_cli.train import loop as training

DEFAULT_DATA_BATCH = 16


def datum_log_weights(
    key: jax.Array,
    params,
    target: ConditionalTarget,
    sconf: SamplerConfig,
    x: jax.Array,
    num: int,
    detach: bool = False,
) -> jax.Array:
    """Log weights of `num` particles for the datum `x`, shape `(num,)` (`detach`: trajectories held
    fixed, as the log-variance loss wants)."""
    one, ctx = annealing.datum(target, sconf, x)
    keys = jax.random.split(key, num)
    log_w, _ = jax.vmap(lambda k: annealing.log_weight(k, params, one, sconf, detach, context=ctx))(keys)
    return log_w


def batch_shape(num_data: int, batch_size: int, data_batch: int = DEFAULT_DATA_BATCH) -> tuple[int, int]:
    """`(data, particles per datum)` of a training batch of about `batch_size` particles.

    Example:
        >>> batch_shape(1000, 128), batch_shape(3, 128), batch_shape(1, 128)
        ((16, 8), (3, 42), (1, 128))
    """
    data = max(1, min(num_data, data_batch, batch_size))
    return data, max(1, batch_size // data)


def batch_loss(params, key, data, target, sconf, tconf, objective, data_batch):
    """The objective averaged over a random draw of data, and the batch's log weights `(D, P)`."""
    num_data, per_datum = batch_shape(data.shape[0], tconf.batch_size, data_batch)
    key_data, key_w = jax.random.split(key)
    if num_data == data.shape[0]:
        chosen = data
    else:
        chosen = data[jax.random.choice(key_data, data.shape[0], (num_data,), replace=False)]
    keys = jax.random.split(key_w, num_data)
    log_w = jax.vmap(
        lambda k, x: datum_log_weights(k, params, target, sconf, x, per_datum, objective.detach)
    )(keys, chosen)
    return jnp.mean(jax.vmap(objective)(log_w)), log_w


def _update_fn(target, sconf, tconf, objective, data_batch) -> Callable:
    """The pure update `(params, opt_state, key, lr_scale, data) -> (params, opt_state, elbo, ok)`.

    The contract of `training.make_update`, with the data set as a last argument: a non-finite
    loss or gradient leaves the parameters unchanged and returns `ok = False`.
    """
    objective = objectives.as_objective(objective or tconf.objective)

    def loss(params, key, data):
        return batch_loss(params, key, data, target, sconf, tconf, objective, data_batch)

    return training.guarded_update(loss, tconf)


@functools.lru_cache(maxsize=8)
def compiled_chunk(
    target: ConditionalTarget,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    data_batch: int = DEFAULT_DATA_BATCH,
    objective: Optional[objectives.Objective] = None,
) -> Callable:
    """The jitted `(state, stop, data) -> (state, elbos)`: up to `tconf.chunk` updates over `data`
    in one `lax.while_loop`, with `training`'s on-device bookkeeping (see `training.make_train_chunk`)."""
    update_fn = _update_fn(target, sconf, tconf, objective, data_batch)
    length = int(tconf.chunk)

    @jax.jit
    def run(state, stop, data):
        update = lambda p, s, k, lr: update_fn(p, s, k, lr, data)  # noqa: E731
        return training.chunk_loop(update, tconf, length)(state, stop)

    return run


def make_train_chunk(
    target: ConditionalTarget,
    sconf: SamplerConfig,
    tconf: TrainConfig,
    data: np.ndarray,
    data_batch: int = DEFAULT_DATA_BATCH,
) -> Callable:
    """A chunk with `training.fit`'s `update` signature `(state, stop) -> (state, elbos)`, over `data`."""
    run = compiled_chunk(target, sconf, tconf, data_batch)
    data = jnp.asarray(data)
    return lambda state, stop: run(state, stop, data)
