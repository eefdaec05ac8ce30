"""Beta–Bernoulli with a uniform prior: p ~ Beta(1, 1), the same 20 flips as beta_bernoulli.py.

A second model of the same data, for `mcd compare` (docs/comparing.md): its evidence is
log Z = log B(1 + k, 1 + n − k) − log B(1, 1), so the exact log Bayes factor against
beta_bernoulli.py (prior Beta(2, 3)) is known too.
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.special import betaln

A, B = 1.0, 1.0

y = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1])


def model(y):
    p = numpyro.sample("p", dist.Beta(A, B))
    with numpyro.plate("flips", len(y)):
        numpyro.sample("y", dist.Bernoulli(p), obs=y)


def log_z(y):
    """log p(y) = log B(A + k, B + n − k) − log B(A, B), in float64."""
    k, n = int(np.sum(y)), len(y)
    return float(betaln(A + k, B + n - k) - betaln(A, B))
