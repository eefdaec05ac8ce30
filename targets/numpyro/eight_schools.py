"""Eight schools (Rubin 1981), non-centred: mu ~ N(0, 5²), tau ~ HalfCauchy(5), theta = mu + tau·eta.

The hierarchical model of the SAT coaching experiments in eight schools, as in the NumPyro and Stan
examples: y_j ~ N(theta_j, sigma_j²) with eta_j ~ N(0, 1). The latents are mu, tau (positive: the
target sees log tau) and eta, so d = 10.

The evidence has no closed form, but mu and eta integrate out analytically: given tau,
y ~ N(0, diag(sigma² + tau²) + 5² 11ᵀ). `log_z` is the remaining one-dimensional integral over tau,
by adaptive quadrature (scipy.integrate.quad) in float64.
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.integrate import quad
from scipy.stats import halfcauchy, multivariate_normal

MU_SCALE, TAU_SCALE = 5.0, 5.0

y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def model(y, sigma):
    mu = numpyro.sample("mu", dist.Normal(0.0, MU_SCALE))
    tau = numpyro.sample("tau", dist.HalfCauchy(TAU_SCALE))
    with numpyro.plate("schools", len(y)):
        eta = numpyro.sample("eta", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + tau * eta, sigma), obs=y)


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

