"""An equal mixture of two well-separated Gaussians in d = 4 (log Z = 0), declared start N(0, 3² I)."""

import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.scipy.stats import norm

dim = 4
log_z = 0.0
initial = {"mean": 0.0, "scale": 3.0}


def log_density(x):
    a = jnp.sum(norm.logpdf(x, -2.0, 0.7))
    b = jnp.sum(norm.logpdf(x, 2.5, 1.0))
    return logsumexp(jnp.stack([a, b])) - jnp.log(2.0)
