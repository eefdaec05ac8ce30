"""Posterior draws from a run's final SMC populations: each resampled to equal weights, then
mapped from the sampler's space back to the user's named values.

An SMC population ends as N weighted particles `(u_i, W_i)`, in the space the sampler ran in (the
target whitened, given heavier tails, or a NumPyro model's unconstrained space), that together
approximate the target: for a model, its posterior. `posterior_draws` makes them N equally
weighted draws by systematic resampling (`resampling.systematic`: every particle is kept
`⌊N W_i⌋` or `⌈N W_i⌉` times), then maps each draw through `Target.user_values` (the composed
inverse of the run's transforms, ending in the user's `x` or a NumPyro model's constrained sites),
vmapped and compiled, once the run is over. Each population is one chain.

Keys: population `j` of a repeat is resampled with `fold_in(draws key, j)`, the draws key being
`fold_in(estimation key, DRAWS_STREAM)` of that repeat (the key its populations fold their index
into, `run.estimate`): the draws follow from the seed, and drawing them changes none of the run's
random numbers.

The draws are as good as the populations: they are approximate, their quality follows the run's
verdict (docs/json.md, "Posterior draws").

Example:
    >>> import jax.numpy as jnp
    >>> from mcd_cli.targets import Target
    >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    >>> particles = jnp.arange(8.0).reshape(4, 2)  # one population of 4 particles in d = 2
    >>> log_w = jnp.log(jnp.array([0.5, 0.5, 0.0, 0.0]))
    >>> draws = posterior_draws(t, jax.random.key(0), [(particles, log_w)])
    >>> draws["x"].shape, sorted(draws["x"][0, :, 0].tolist())  # (chains, draws, d): particles 0 and 1, twice each
    ((1, 4, 2), [0.0, 0.0, 2.0, 2.0])
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.smc import resampling
from mcd_cli.smc import normalised

# fold_in(a repeat's estimation key, DRAWS_STREAM): the key of its draws' resampling. Its
# populations use fold_in(estimation key, j) for j = 0, 1, …: the stream lies far beyond any count.
DRAWS_STREAM = 0xD5A75


def equal_weights(key: jax.Array, particles: jax.Array, log_w: jax.Array) -> jax.Array:
    """One population's N weighted particles `(N, d)` as N equally weighted ones: systematic
    resampling by the normalised weights `softmax(log_w)` (a NaN weight counts as zero)."""
    idx = resampling.systematic(key, normalised(log_w), log_w.shape[0])
    return particles[idx]


def posterior_draws(target: Any, key: jax.Array, populations: Sequence[tuple[Any, Any]]) -> dict[str, np.ndarray]:
    """The populations' equally weighted draws as the user's named values.

    Args:
        target: the target the populations were run on (with its transforms: `Target.user_values`).
        key: the draws key (`fold_in(estimation key, DRAWS_STREAM)`); population j uses `fold_in(key, j)`.
        populations: each population's `(particles (N, d), log weights (N,))`, all of one size N.

    Returns:
        `{name: array (chains, draws, *shape)}`, one chain per population, N draws each, in the
        order of `target.user_values` (`x` of shape `(d,)` for a plain target).
    """
    particles = jnp.stack([jnp.asarray(p) for p, _ in populations])
    log_w = jnp.stack([jnp.asarray(w) for _, w in populations])
    chains, num, dim = particles.shape
    keys = jax.vmap(lambda j: jax.random.fold_in(key, j))(jnp.arange(chains))
    draws = jax.jit(jax.vmap(equal_weights))(keys, particles, log_w)
    values = jax.jit(jax.vmap(target.user_values))(draws.reshape(chains * num, dim))
    return {name: np.asarray(v).reshape(chains, num, *np.shape(v)[1:]) for name, v in jax.device_get(values).items()}


def concatenate(draws: Sequence[Optional[dict]]) -> Optional[dict[str, np.ndarray]]:
    """The repeats' draws as one set of chains, repeat by repeat (None when no repeat kept any).

    Example:
        >>> one = {"x": np.zeros((2, 3, 1))}
        >>> concatenate([one, one])["x"].shape, concatenate([None])
        ((4, 3, 1), None)
    """
    kept = [d for d in draws if d is not None]
    if not kept:
        return None
    return {name: np.concatenate([d[name] for d in kept]) for name in kept[0]}
