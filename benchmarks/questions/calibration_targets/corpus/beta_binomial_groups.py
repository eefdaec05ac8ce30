"""Three independent Beta–binomial groups, in PyMC: p_g ~ Beta(2, 2), k_g ~ Binomial(n_g, p_g) (d = 3); exact log Z.

Successful operations at three hospitals (14 of 18, 17 of 25, 10 of 12), each with its own success
probability and nothing shared between them. The free variable p (one per hospital) lives on (0, 1):
the target sees PyMC's log-odds p_logodds__, log-Jacobians included. The evidence is a product of
three Beta–binomial evidences, log Z = Σ_g [log C(n_g, k_g) + log B(a + k_g, b + n_g − k_g) − log B(a, b)]
(`log_z(n, k)`).
"""

import numpy as np
import pymc as pm
from scipy.special import betaln, gammaln

A, B = 2.0, 2.0
n = np.array([18, 25, 12])
k = np.array([14, 17, 10])

with pm.Model(coords={"hospital": ["north", "south", "east"]}) as model:
    p = pm.Beta("p", alpha=A, beta=B, dims="hospital")
    pm.Binomial("successes", n=n, p=p, observed=k, dims="hospital")


def log_z(n, k):
    """log p(k) = Σ_g [log C(n_g, k_g) + log B(A + k_g, B + n_g − k_g) − log B(A, B)], in float64."""
    n, k = np.asarray(n, dtype=np.float64), np.asarray(k, dtype=np.float64)
    log_choose = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return float(np.sum(log_choose + betaln(A + k, B + n - k) - betaln(A, B)))
