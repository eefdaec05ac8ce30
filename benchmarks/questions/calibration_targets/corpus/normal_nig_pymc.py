"""Normal data, unknown mean and variance, Normal–inverse-gamma prior, in PyMC (d = 2); exact log Z.

The same model and data as normal_nig.py (NumPyro): 24 pendulum measurements of g (m/s²),
sigma2 ~ InvGamma(2, 0.002), mu | sigma2 ~ N(9.8, sigma2 / 0.1), y_i ~ N(mu, sigma2). The free
variables are sigma2 (PyMC's value variable sigma2_log__) and mu, in that order, so d = 2. The
observations are a pm.Data container, so `--data y.csv` replaces them and `log_z(y)` follows.
"""

import numpy as np
import pymc as pm
from scipy.special import gammaln

M0, KAPPA0, A0, B0 = 9.8, 0.1, 2.0, 0.002

with pm.Model() as model:
    y = pm.Data("y", np.array([
        9.769, 9.751, 9.791, 9.793, 9.773, 9.798, 9.800, 9.728, 9.762, 9.802, 9.768, 9.795,
        9.864, 9.768, 9.807, 9.829, 9.794, 9.805, 9.829, 9.778, 9.933, 9.822, 9.839, 9.828,
    ]))
    sigma2 = pm.InverseGamma("sigma2", alpha=A0, beta=B0)
    mu = pm.Normal("mu", mu=M0, sigma=pm.math.sqrt(sigma2 / KAPPA0))
    pm.Normal("obs", mu=mu, sigma=pm.math.sqrt(sigma2), observed=y)


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
