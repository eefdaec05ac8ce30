"""Conjugate Beta–binomial model in PyMC: p ~ Beta(2, 3), k | p ~ Binomial(20, p), k = 14; exact log Z.

The same model and data as targets/numpyro/beta_binomial.py (the 14 heads in 20 flips of
targets/numpyro/beta_bernoulli.py, counted: its evidence is that of the flips times C(20, 14)).
The latent p lives on (0, 1); the target is its density on PyMC's unconstrained line, the log-odds
x = logit(p), which includes the log-Jacobian log p(1 − p). The evidence is
log Z = log C(n, k) + log B(a + k, b + n − k) − log B(a, b).
"""

import numpy as np
import pymc as pm
from scipy.special import betaln, gammaln

A, B = 2.0, 3.0
n, k = 20, 14

with pm.Model() as model:
    p = pm.Beta("p", A, B)
    pm.Binomial("heads", n=n, p=p, observed=k)


def log_z(n, k):
    """log p(k) = log C(n, k) + log B(A + k, B + n − k) − log B(A, B), in float64."""
    log_choose = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return float(log_choose + betaln(A + k, B + n - k) - betaln(A, B))
