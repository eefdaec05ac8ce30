"""A normalised narrow Gaussian N(1.5, 0.03² I) in d = 10 (log Z = 0), no declared start."""

import jax.numpy as jnp
from jax.scipy.stats import norm

dim = 10
log_z = 0.0


def log_density(x):
    return jnp.sum(norm.logpdf(x, 1.5, 0.03))
