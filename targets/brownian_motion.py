"""Brownian motion with unknown innovation and observation noise scales, middle 10 of 30 observations missing.

The inference-gym model "BrownianMotionUnknownScalesMissingMiddleObservations" (Apache-2.0; data
in data/brownian_motion.csv, see data/README.md), written on R^32 with log-scale parameters:

    log σ_innov ~ N(0, 2²),  log σ_obs ~ N(0, 2²)        (σ ~ LogNormal(0, 2))
    x_0 ~ N(0, σ_innov²),  x_t ~ N(x_{t-1}, σ_innov²)   for t = 1 … 29
    y_t ~ N(x_t, σ_obs²)                                 for the 20 observed t (10-19 are missing)

The point is `(log σ_innov, log σ_obs, x_0, …, x_29)`. The density is the joint density of these
variables and the data, so log Z = log p(y), the model's evidence. The latent path is
linear-Gaussian given the scales; log Z was computed by exact Kalman-filter marginalisation of the
path plus 2-D quadrature over the log-scales, and checked by long tempered SMC runs on all 32
dimensions (data/reference_brownian_motion.py, data/reference_brownian_motion.json).

The posterior couples the path's spread to exp(log σ_innov): a funnel, whose joint mode lies far
down the neck (a Laplace approximation at the mode is poor here).
"""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

_TABLE = np.loadtxt(Path(__file__).resolve().parent / "data" / "brownian_motion.csv", delimiter=",", skiprows=1)
_TIMES = _TABLE[:, 0].astype(int)
_VALUES = _TABLE[:, 1]

NUM_TIMESTEPS = 30
PRIOR_LOG_SCALE_SD = 2.0

dim = NUM_TIMESTEPS + 2
# Kalman filter + trapezoid quadrature over the log-scales (converged to 1e-12); tempered SMC on
# all 32 dimensions, 8 seeds: 1.156 ± 0.025. See data/reference_brownian_motion.json.
log_z = 1.1877491032
name = "brownian_motion"
description = (
    "Brownian motion, unknown innovation/observation scales (log-scale), 30 steps with the middle "
    "10 unobserved (inference-gym), d = 32; log Z by Kalman filter + quadrature"
)


def log_density(x):
    log_innov, log_obs, path = x[0], x[1], x[2:]
    previous = jnp.concatenate([jnp.zeros(1), path[:-1]])
    return (
        norm.logpdf(log_innov, 0.0, PRIOR_LOG_SCALE_SD)
        + norm.logpdf(log_obs, 0.0, PRIOR_LOG_SCALE_SD)
        + jnp.sum(norm.logpdf(path, previous, jnp.exp(log_innov)))
        + jnp.sum(norm.logpdf(_VALUES, path[_TIMES], jnp.exp(log_obs)))
    )
