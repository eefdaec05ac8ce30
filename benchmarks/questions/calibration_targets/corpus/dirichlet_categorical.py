"""Categorical answers with a Dirichlet prior, in NumPyro: K = 5 categories, p ~ Dirichlet(2·1) (d = 4); exact log Z.

40 answers to a five-point survey item (0 = strongly disagree … 4 = strongly agree),
y_i ~ Categorical(p), p ~ Dirichlet(2, 2, 2, 2, 2). The latent p lives on the simplex; the target
sees NumPyro's stick-breaking coordinates (K − 1 = 4 of them, log-Jacobian included). The evidence
of the sequence of answers is the Dirichlet–categorical (Pólya) closed form
log Γ(A) − log Γ(A + n) + Σ_k [log Γ(α_k + n_k) − log Γ(α_k)], A = Σ α_k (`log_z(y)`).
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import numpy as jnp
from scipy.special import gammaln

ALPHA = np.array([2.0, 2.0, 2.0, 2.0, 2.0])

y = np.array([
    3, 1, 2, 4, 4, 1, 1, 4, 0, 2, 3, 3, 4, 3, 3, 4, 1, 3, 2, 3,
    4, 3, 2, 3, 1, 2, 2, 1, 0, 4, 1, 2, 2, 1, 4, 4, 2, 3, 4, 3,
])


def model(y):
    p = numpyro.sample("p", dist.Dirichlet(jnp.asarray(ALPHA)))
    with numpyro.plate("answers", len(y)):
        numpyro.sample("y", dist.Categorical(probs=p), obs=y)


def log_z(y):
    """log p(y) = log Γ(A) − log Γ(A + n) + Σ_k [log Γ(α_k + n_k) − log Γ(α_k)], in float64."""
    counts = np.bincount(np.asarray(y), minlength=len(ALPHA))
    return float(
        gammaln(ALPHA.sum()) - gammaln(ALPHA.sum() + counts.sum()) + np.sum(gammaln(ALPHA + counts) - gammaln(ALPHA))
    )
