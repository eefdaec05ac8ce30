"""Gamma–Poisson with exposure, in NumPyro: failures of ten pumps over their operating times (d = 1); exact log Z.

The pump data of Gaver and O'Muircheartaigh (1987), as in the BUGS examples: failures_i of pump i
in t_i thousand hours, failures_i ~ Poisson(rate · t_i), here with one rate for all pumps (pooled)
and rate ~ Gamma(1, 1). The latent rate is positive: the target sees log rate. The evidence is
Σ_i [k_i log t_i − log k_i!] + a log b − log Γ(a) + log Γ(a + S) − (a + S) log(b + T), S = Σ k_i,
T = Σ t_i (`log_z(exposure, failures)`).
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.special import gammaln

A0, B0 = 1.0, 1.0

exposure = np.array([94.3, 15.7, 62.9, 126.0, 5.24, 31.4, 1.05, 1.05, 2.1, 10.5])
failures = np.array([5, 1, 5, 14, 3, 19, 1, 1, 4, 22])


def model(exposure, failures):
    rate = numpyro.sample("rate", dist.Gamma(A0, B0))
    with numpyro.plate("pumps", len(exposure)):
        numpyro.sample("failures", dist.Poisson(rate * exposure), obs=failures)


def log_z(exposure, failures):
    """log p(failures) = Σ [k log t − log k!] + a log b − log Γ(a) + log Γ(a + S) − (a + S) log(b + T), in float64."""
    t, k = np.asarray(exposure, dtype=np.float64), np.asarray(failures, dtype=np.float64)
    s, total = float(np.sum(k)), float(np.sum(t))
    return float(
        np.sum(k * np.log(t) - gammaln(k + 1))
        + A0 * np.log(B0) - gammaln(A0) + gammaln(A0 + s) - (A0 + s) * np.log(B0 + total)
    )
