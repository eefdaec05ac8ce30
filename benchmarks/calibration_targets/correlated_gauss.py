"""A normalised correlated Gaussian in d = 6 (log Z = 0), scales from 0.05 to 2, no declared start."""

import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import multivariate_normal

dim = 6
log_z = 0.0
_scales = np.geomspace(0.05, 2.0, dim)
_corr = np.eye(dim) + 0.6 * (np.eye(dim, k=1) + np.eye(dim, k=-1))
_cov = _scales[:, None] * _corr * _scales[None, :]
_mean = np.linspace(-1.0, 3.0, dim)


def log_density(x):
    return multivariate_normal.logpdf(x, jnp.asarray(_mean), jnp.asarray(_cov))
