"""A normalised correlated Gaussian in d = 6 (log Z = 0), scales from 0.05 to 2, no declared start.

Correlation ρ^|i − j| with ρ = 0.8 (an AR(1) matrix, positive definite for any d). The first version
had 0.6 on the first off-diagonals only, which is not positive definite for d = 6 (smallest
eigenvalue −0.08): its log density was NaN everywhere, which `mcd check` reports.
"""

import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import multivariate_normal

dim = 6
log_z = 0.0
_scales = np.geomspace(0.05, 2.0, dim)
_corr = 0.8 ** np.abs(np.subtract.outer(np.arange(dim), np.arange(dim)))
_cov = _scales[:, None] * _corr * _scales[None, :]
_mean = np.linspace(-1.0, 3.0, dim)


def log_density(x):
    return multivariate_normal.logpdf(x, jnp.asarray(_mean), jnp.asarray(_cov))
