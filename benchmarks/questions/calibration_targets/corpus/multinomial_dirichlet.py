"""Multinomial counts with a concentrated Dirichlet prior, in PyMC: K = 4 parties, p ~ Dirichlet(38, 31, 19, 12) (d = 3); exact log Z.

A poll of 40 voters (12, 15, 9, 4 for four parties), counts ~ Multinomial(40, p), with the
previous election's shares as a prior worth 100 voters: p ~ Dirichlet(38, 31, 19, 12). The free
variable p lives on the simplex: the target sees PyMC's simplex coordinates p_simplex__
(K − 1 = 3 of them, log-Jacobian included). The evidence is the Dirichlet–multinomial closed form
log N! − Σ log c_k! + log Γ(A) − log Γ(A + N) + Σ_k [log Γ(α_k + c_k) − log Γ(α_k)]
(`log_z(votes)`).
"""

import numpy as np
import pymc as pm
from scipy.special import gammaln

ALPHA = np.array([38.0, 31.0, 19.0, 12.0])

votes = np.array([12, 15, 9, 4])

with pm.Model(coords={"party": ["A", "B", "C", "D"]}) as model:
    p = pm.Dirichlet("p", a=ALPHA, dims="party")
    pm.Multinomial("poll", n=votes.sum(), p=p, observed=votes, dims="party")


def log_z(votes):
    """log p(votes) = log N! − Σ log c_k! + log Γ(A) − log Γ(A + N) + Σ_k [log Γ(α_k + c_k) − log Γ(α_k)], in float64."""
    c = np.asarray(votes, dtype=np.float64)
    total, prior = c.sum(), ALPHA.sum()
    return float(
        gammaln(total + 1) - np.sum(gammaln(c + 1))
        + gammaln(prior) - gammaln(prior + total) + np.sum(gammaln(ALPHA + c) - gammaln(ALPHA))
    )
