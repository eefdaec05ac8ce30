"""Training objectives: a batch of log weights -> the scalar that training minimises.

An objective sees the whole batch, so it may couple the particles (the log-variance loss does);
it is not assumed to be a mean of per-particle losses.

- `elbo`: `−mean(log w)`, the negative evidence lower bound (the paper's objective), differentiated
  through the reparameterised trajectories.
- `log_variance`: `var(log w)`, the log-variance loss (Richter et al. 2020), zero exactly when every
  weight is equal, i.e. when the sampler's path measure matches the target's.

Example:
    >>> import jax.numpy as jnp
    >>> float(elbo(jnp.array([-1.0, -3.0]))), float(log_variance(jnp.array([-1.0, -3.0])))
    (2.0, 1.0)
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

Objective = Callable[[jax.Array], jax.Array]


def elbo(log_w: jax.Array) -> jax.Array:
    """Negative ELBO of the batch, `−mean(log w)`."""
    return -jnp.mean(log_w)


def log_variance(log_w: jax.Array) -> jax.Array:
    """Variance of the batch's log weights (population variance, `mean((log w − mean)²)`)."""
    return jnp.var(log_w)


OBJECTIVES: dict[str, Objective] = {"elbo": elbo, "logvar": log_variance}
