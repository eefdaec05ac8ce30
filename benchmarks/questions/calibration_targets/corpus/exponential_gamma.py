"""Exponential waiting times with a Gamma prior on the rate, in NumPyro (d = 1); exact log Z.

25 times (minutes) between calls to a help desk, t_i ~ Exponential(rate), rate ~ Gamma(2, 8)
(shape 2, rate 8: a call every 4 minutes a priori). The latent rate is positive: the target sees
log rate, log-Jacobian included. The evidence is the Gamma–exponential closed form
a log b − log Γ(a) + log Γ(a + n) − (a + n) log(b + Σ t) (`log_z(t)`).
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.special import gammaln

A0, B0 = 2.0, 8.0

t = np.array([
    0.82, 1.03, 2.18, 5.23, 4.64, 2.56, 5.61, 28.08, 2.70, 4.66, 1.93, 0.01, 0.43,
    7.53, 6.64, 2.52, 4.26, 11.00, 5.11, 5.76, 9.69, 2.95, 7.86, 1.74, 1.21,
])


def model(t):
    rate = numpyro.sample("rate", dist.Gamma(A0, B0))
    with numpyro.plate("calls", len(t)):
        numpyro.sample("t", dist.Exponential(rate), obs=t)


def log_z(t):
    """log p(t) = a log b − log Γ(a) + log Γ(a + n) − (a + n) log(b + Σ t), in float64."""
    n, total = len(t), float(np.sum(t))
    return float(A0 * np.log(B0) - gammaln(A0) + gammaln(A0 + n) - (A0 + n) * np.log(B0 + total))
