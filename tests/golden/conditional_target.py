
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import multivariate_normal, norm

W = np.array([[0.5, -1.0], [1.2, 0.3], [-0.7, 0.8]], dtype=np.float32)
dim = 2
data = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32) * 1.5

def log_density(z, x):
    return jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, W @ z, 0.5))

def log_z(x):
    return multivariate_normal.logpdf(x, jnp.zeros(3), W @ W.T + 0.25 * jnp.eye(3))
