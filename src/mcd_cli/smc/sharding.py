"""One population over several devices: particle states sharded, weights replicated.

Across devices (`sharding`, the particle axis of a one-dimensional mesh) the particle states are
sharded and the N log weights and Eve indices replicated: every weight-based decision (ESS, the
bisection on β′, the ancestors drawn from the run's key, the log Ẑ increments) is computed on the
whole population by every device alike, and the selected ancestors are gathered back into the
sharded layout (global resampling, docs/cluster.md). The preconditioner's weighted moments and the
acceptance rate are global means that XLA reduces across devices. The run is therefore the
single-device one up to float rounding: the order of those sums, and the per-particle arithmetic
(XLA may vectorise a batch of N/n particles differently from one of N). Rounding can, rarely, flip
one Metropolis decision (or a resampling boundary); that particle then moves elsewhere and log Ẑ
changes by that particle's share, O(1/N), well inside its Monte Carlo error.

Every helper is the identity when `sharding` is None (one device, no constraint).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
from jax.sharding import NamedSharding, PartitionSpec


def shard(tree: Any, sharding: Optional[NamedSharding]) -> Any:
    """Splits the leading (particle) axis of every leaf of `tree` over `sharding`; None: unchanged."""
    if sharding is None:
        return tree
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


def replicate(tree: Any, sharding: Optional[NamedSharding]) -> Any:
    """Every leaf of `tree` whole on every device of `sharding`'s mesh (an all-gather); None: unchanged."""
    if sharding is None:
        return tree
    whole = NamedSharding(sharding.mesh, PartitionSpec())
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, whole), tree)


def on_every_device(fn: Callable, sharding: Optional[NamedSharding]) -> Callable:
    """`fn` run whole by every device on replicated arguments (`shard_map` with replicated specs).

    XLA would otherwise be free to split a computation on replicated arrays (a cumulative sum, a
    reduction) over the devices, and sum in another order than one device does; here every device
    makes the single-device computation on the same numbers, so its decisions are the same.
    """
    if sharding is None:
        return fn
    return jax.shard_map(fn, mesh=sharding.mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec())
