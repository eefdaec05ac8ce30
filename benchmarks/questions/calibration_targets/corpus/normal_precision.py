"""Normal data with a known mean and unknown precision, Gamma prior on the precision, in PyMC (d = 1); exact log Z.

20 weighings (g) of a 100 g reference mass on a balance whose precision is unknown:
y_i ~ N(100, 1/tau), tau ~ Gamma(2, 0.5) (shape 2, rate 0.5: a prior mean precision of 4, a
standard deviation near 0.5 g). The free variable tau is positive: the target sees tau_log__.
The evidence is the Gamma–normal closed form
−n/2 log 2π + a log b − log Γ(a) + log Γ(a + n/2) − (a + n/2) log(b + ½ Σ (y_i − 100)²)
(`log_z(y)`); the weighings are a pm.Data container.
"""

import numpy as np
import pymc as pm
from scipy.special import gammaln

MU, A0, B0 = 100.0, 2.0, 0.5

with pm.Model() as model:
    y = pm.Data("y", np.array([
        99.20, 99.56, 100.19, 99.94, 100.14, 99.99, 100.04, 99.32, 100.11, 99.88,
        99.46, 99.87, 100.38, 100.00, 99.75, 100.37, 99.27, 99.98, 99.69, 100.18,
    ]))
    tau = pm.Gamma("tau", alpha=A0, beta=B0)
    pm.Normal("weighings", mu=MU, tau=tau, observed=y)


def log_z(y):
    """log p(y) = −n/2 log 2π + a log b − log Γ(a) + log Γ(a + n/2) − (a + n/2) log(b + ½ Σ (y − μ)²), in float64."""
    y = np.asarray(y, dtype=np.float64)
    n, a_n = len(y), A0 + len(y) / 2
    b_n = B0 + 0.5 * np.sum((y - MU) ** 2)
    return float(-n / 2 * np.log(2 * np.pi) + A0 * np.log(B0) - gammaln(A0) + gammaln(a_n) - a_n * np.log(b_n))
