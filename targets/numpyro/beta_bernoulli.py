"""Conjugate Beta–Bernoulli model: p ~ Beta(2, 3), y_i | p ~ Bernoulli(p), 20 flips; exact log Z.

The latent p lives on (0, 1); the target is its density on the unconstrained line, x = logit(p),
which includes the log-Jacobian log p(1 − p) of the sigmoid. The evidence is a ratio of Beta
functions: log Z = log B(a + k, b + n − k) − log B(a, b) for k successes in n flips.
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.special import betaln

A, B = 2.0, 3.0

y = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1])


def model(y):
    p = numpyro.sample("p", dist.Beta(A, B))
    with numpyro.plate("flips", len(y)):
        numpyro.sample("y", dist.Bernoulli(p), obs=y)


def log_z(y):
    """log p(y) = log B(A + k, B + n − k) − log B(A, B), in float64."""
    k, n = int(np.sum(y)), len(y)
    return float(betaln(A + k, B + n - k) - betaln(A, B))

