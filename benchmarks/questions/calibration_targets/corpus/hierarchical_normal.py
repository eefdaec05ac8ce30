"""Hierarchical normal with known variances and a half-normal group scale, centred, in NumPyro (d = 9).

Seven trials of a blood-pressure drug, each reporting its mean change in systolic pressure (mmHg)
and that estimate's standard error: y_j ~ N(theta_j, sigma_j²), theta_j ~ N(mu, tau²),
mu ~ N(0, 10²), tau ~ HalfNormal(5), written centred as a user would. The latents are mu, tau
(the target sees log tau) and the seven theta, so d = 9.

The evidence has no closed form, but mu and theta integrate out analytically: given tau,
y ~ N(0, diag(sigma² + tau²) + 10² 11ᵀ). `log_z` is the remaining one-dimensional integral over
tau, by adaptive quadrature (scipy.integrate.quad) in float64.
"""

import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.integrate import quad
from scipy.stats import halfnorm, multivariate_normal

MU_SCALE, TAU_SCALE = 10.0, 5.0

y = np.array([-8.1, -4.3, -11.2, -2.5, -6.8, -9.9, -3.6])
sigma = np.array([3.1, 2.4, 4.5, 2.2, 3.8, 5.0, 2.9])


def model(y, sigma):
    mu = numpyro.sample("mu", dist.Normal(0.0, MU_SCALE))
    tau = numpyro.sample("tau", dist.HalfNormal(TAU_SCALE))
    with numpyro.plate("trials", len(y)):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("y", dist.Normal(theta, sigma), obs=y)


def log_z(y, sigma):
    """log p(y) = log ∫ HalfNormal(tau; 5) N(y; 0, diag(sigma² + tau²) + 10² 11ᵀ) dtau."""
    n = len(y)

    def log_marginal(tau):
        cov = np.diag(sigma**2 + tau**2) + MU_SCALE**2 * np.ones((n, n))
        return multivariate_normal(np.zeros(n), cov).logpdf(y)

    shift = log_marginal(TAU_SCALE)  # near the largest value over tau; keeps the integrand near 1
    value, _ = quad(
        lambda tau: halfnorm(scale=TAU_SCALE).pdf(tau) * np.exp(log_marginal(tau) - shift),
        0.0,
        np.inf,
        epsabs=0.0,
        epsrel=1e-10,
        limit=200,
    )
    return float(np.log(value) + shift)
