"""Poisson counts with a Gamma prior on the rate, in PyMC (d = 1); exact log Z.

Emergency admissions on 30 consecutive nights, counts_i ~ Poisson(lam), lam ~ Gamma(3, 1)
(shape 3, rate 1). The free variable lam is positive: the target sees lam_log__, log-Jacobian
included. The evidence is the Gamma–Poisson (negative binomial) closed form
a log b − log Γ(a) + log Γ(a + S) − (a + S) log(b + n) − Σ log k_i!, S = Σ k_i (`log_z(counts)`).
"""

import numpy as np
import pymc as pm
from scipy.special import gammaln

A0, B0 = 3.0, 1.0

counts = np.array([3, 3, 2, 8, 3, 4, 10, 4, 3, 2, 4, 9, 3, 3, 4, 1, 5, 6, 3, 3, 3, 3, 4, 3, 0, 5, 2, 4, 1, 7])

with pm.Model() as model:
    lam = pm.Gamma("lam", alpha=A0, beta=B0)
    pm.Poisson("admissions", mu=lam, observed=counts)


def log_z(counts):
    """log p(counts) = a log b − log Γ(a) + log Γ(a + S) − (a + S) log(b + n) − Σ log k_i!, in float64."""
    k = np.asarray(counts, dtype=np.float64)
    n, s = len(k), float(np.sum(k))
    return float(
        A0 * np.log(B0) - gammaln(A0) + gammaln(A0 + s) - (A0 + s) * np.log(B0 + n) - np.sum(gammaln(k + 1))
    )
