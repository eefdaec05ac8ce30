"""Normal data, unknown mean and variance, Normal–inverse-gamma prior, in NumPyro (d = 2); exact log Z.

24 pendulum measurements of g (m/s²). The conjugate prior of a normal sample:
sigma2 ~ InvGamma(2, 0.002), mu | sigma2 ~ N(9.8, sigma2 / 0.1), y_i ~ N(mu, sigma2). The latents
are mu and sigma2 (positive: the target sees log sigma2), so d = 2. The evidence is the
normal–inverse-gamma closed form (`log_z(y)` below); marginally y is a multivariate Student t with
2·a0 degrees of freedom. The same model and data as normal_nig_pymc.py.
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import numpy as jnp
from scipy.special import gammaln

M0, KAPPA0, A0, B0 = 9.8, 0.1, 2.0, 0.002

y = np.array([
    9.769, 9.751, 9.791, 9.793, 9.773, 9.798, 9.800, 9.728, 9.762, 9.802, 9.768, 9.795,
    9.864, 9.768, 9.807, 9.829, 9.794, 9.805, 9.829, 9.778, 9.933, 9.822, 9.839, 9.828,
])


def model(y):
    sigma2 = numpyro.sample("sigma2", dist.InverseGamma(A0, B0))
    mu = numpyro.sample("mu", dist.Normal(M0, jnp.sqrt(sigma2 / KAPPA0)))
    with numpyro.plate("measurements", len(y)):
        numpyro.sample("y", dist.Normal(mu, jnp.sqrt(sigma2)), obs=y)


def log_z(y):
    """log p(y) = −n/2 log 2π + ½ log(κ0/κn) + a0 log b0 − an log bn + log Γ(an) − log Γ(a0), in float64."""
    y = np.asarray(y, dtype=np.float64)
    n, mean = len(y), float(np.mean(y))
    kappa_n, a_n = KAPPA0 + n, A0 + n / 2
    b_n = B0 + 0.5 * np.sum((y - mean) ** 2) + KAPPA0 * n * (mean - M0) ** 2 / (2 * kappa_n)
    return float(
        -n / 2 * np.log(2 * np.pi) + 0.5 * np.log(KAPPA0 / kappa_n)
        + A0 * np.log(B0) - a_n * np.log(b_n) + gammaln(a_n) - gammaln(A0)
    )
