"""Conjugate Beta–binomial model: p ~ Beta(2, 3), k | p ~ Binomial(20, p), k = 14; exact log Z.

The 14 heads in 20 flips of beta_bernoulli.py, counted: the evidence of the count is that of the
flips times C(20, 14). The NumPyro copy of targets/pymc/beta_binomial.py (the same log Z). The
target is the density of x = logit(p), log-Jacobian log p(1 − p) included; the evidence is
log Z = log C(n, k) + log B(a + k, b + n − k) − log B(a, b).
"""

import numpyro
import numpyro.distributions as dist
from scipy.special import betaln, gammaln

A, B = 2.0, 3.0

n, k = 20, 14


def model(n, k):
    p = numpyro.sample("p", dist.Beta(A, B))
    numpyro.sample("heads", dist.Binomial(n, p), obs=k)


def log_z(n, k):
    """log p(k) = log C(n, k) + log B(A + k, B + n − k) − log B(A, B), in float64."""
    log_choose = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return float(log_choose + betaln(A + k, B + n - k) - betaln(A, B))
