"""Conjugate normal–normal model in PyMC: mu ~ N(1, 2²), y_i | mu ~ N(mu, 1), 12 observations; exact log Z.

The same model and data as targets/numpyro/normal_normal.py. The observations are a pm.Data
container, so a data file replaces them (`--data y.csv`), and log Z follows: the evidence is
Gaussian, y ~ N(1·1, I + 2² 11ᵀ), computed exactly below. The target is the density of mu
(d = 1, unconstrained already).
"""

import numpy as np
import pymc as pm
from scipy.stats import multivariate_normal

PRIOR_LOC, PRIOR_SCALE, NOISE_SCALE = 1.0, 2.0, 1.0

with pm.Model() as model:
    y = pm.Data("y", np.array([2.31, 1.12, 3.05, 2.47, 0.89, 2.76, 1.94, 3.38, 2.02, 1.55, 2.88, 2.19]))
    mu = pm.Normal("mu", PRIOR_LOC, PRIOR_SCALE)
    pm.Normal("obs", mu, NOISE_SCALE, observed=y)


def log_z(y):
    """log p(y) = log N(y; PRIOR_LOC·1, NOISE_SCALE² I + PRIOR_SCALE² 11ᵀ), in float64."""
    n = len(y)
    cov = NOISE_SCALE**2 * np.eye(n) + PRIOR_SCALE**2 * np.ones((n, n))
    return float(multivariate_normal(np.full(n, PRIOR_LOC), cov).logpdf(y))
