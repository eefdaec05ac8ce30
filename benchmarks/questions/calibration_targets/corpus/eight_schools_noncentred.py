"""Eight schools (Rubin 1981), non-centred, in PyMC: mu ~ N(0, 5²), tau ~ HalfCauchy(5) (d = 10).

The SAT coaching experiments as in PyMC's and Stan's examples: y_j ~ N(mu + tau·eta_j, sigma_j²)
with eta_j ~ N(0, 1). The free variables are mu, tau (value variable tau_log__) and the eight
eta, in that order, so d = 10. The same model and data as targets/numpyro/eight_schools.py, so the
same log Z (−31.311347).

The evidence has no closed form, but mu and eta integrate out analytically: given tau,
y ~ N(0, diag(sigma² + tau²) + 5² 11ᵀ). `log_z` is the remaining one-dimensional integral over
tau, by adaptive quadrature (scipy.integrate.quad) in float64.
"""

import numpy as np
import pymc as pm
from scipy.integrate import quad
from scipy.stats import halfcauchy, multivariate_normal

MU_SCALE, TAU_SCALE = 5.0, 5.0

y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])

with pm.Model(coords={"school": ["A", "B", "C", "D", "E", "F", "G", "H"]}) as model:
    mu = pm.Normal("mu", mu=0.0, sigma=MU_SCALE)
    tau = pm.HalfCauchy("tau", beta=TAU_SCALE)
    eta = pm.Normal("eta", mu=0.0, sigma=1.0, dims="school")
    theta = pm.Deterministic("theta", mu + tau * eta, dims="school")
    pm.Normal("obs", mu=theta, sigma=sigma, observed=y, dims="school")


def log_z(y, sigma):
    """log p(y) = log ∫ HalfCauchy(tau; 5) N(y; 0, diag(sigma² + tau²) + 5² 11ᵀ) dtau."""
    n = len(y)

    def log_marginal(tau):
        cov = np.diag(sigma**2 + tau**2) + MU_SCALE**2 * np.ones((n, n))
        return multivariate_normal(np.zeros(n), cov).logpdf(y)

    shift = log_marginal(0.0)  # the largest value over tau here; keeps the integrand near 1
    value, _ = quad(
        lambda tau: halfcauchy(scale=TAU_SCALE).pdf(tau) * np.exp(log_marginal(tau) - shift),
        0.0,
        np.inf,
        epsabs=0.0,
        epsrel=1e-10,
        limit=200,
    )
    return float(np.log(value) + shift)
