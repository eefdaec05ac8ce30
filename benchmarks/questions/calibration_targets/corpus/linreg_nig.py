"""Linear regression with unknown noise variance, Normal–inverse-gamma prior, in PyMC (d = 5); exact log Z.

Asking prices (k€) of 30 flats against floor area (standardised), number of rooms and age (years),
the last two centred: price_i ~ N(x_iᵀ beta, sigma2) with the conjugate prior
sigma2 ~ InvGamma(2, 200), beta | sigma2 ~ N(m0, sigma2 · diag(5², 3², 1², 0.1²)) on
(intercept, area, rooms, age). The free variables are sigma2 (value variable sigma2_log__) and the
four coefficients, so d = 5. The evidence is the closed form of the normal–inverse-gamma
regression (`log_z(X, price)`); the design and the prices are pm.Data containers.
"""

import numpy as np
import pymc as pm
from scipy.special import gammaln

A0, B0 = 2.0, 200.0
M0 = np.array([150.0, 0.0, 0.0, 0.0])
PRIOR_SD = np.array([5.0, 3.0, 1.0, 0.1])  # in units of sigma

area = np.array([
    -1.54, 0.58, -0.47, 0.94, 0.51, 0.48, -0.79, -0.57, -0.28, 0.22, 0.23, 1.27, -0.29, 0.39, 1.51,
    -0.26, 2.14, -0.08, 0.53, -0.48, 0.77, 0.87, 0.46, -1.72, 0.14, -0.78, -0.36, -2.09, -0.67, 0.49,
])
rooms = np.array([1, 1, 3, 5, 5, 2, 5, 1, 1, 4, 5, 5, 1, 5, 4, 3, 1, 3, 2, 5, 3, 2, 1, 2, 1, 5, 2, 2, 2, 4])
age = np.array([
    7.0, 45.0, 17.0, 49.0, 32.0, 31.0, 32.0, 43.0, 22.0, 3.0, 19.0, 15.0, 10.0, 40.0, 43.0,
    45.0, 25.0, 14.0, 6.0, 33.0, 52.0, 18.0, 46.0, 28.0, 53.0, 9.0, 35.0, 22.0, 51.0, 55.0,
])
prices = np.array([
    72.8, 151.7, 144.2, 203.4, 190.4, 156.1, 142.1, 97.6, 112.7, 192.6, 212.3, 221.7, 125.0, 174.0, 230.5,
    139.4, 220.7, 150.1, 175.5, 161.7, 149.9, 161.4, 142.3, 65.2, 120.1, 152.7, 110.0, 44.7, 110.3, 168.2,
])
design = np.column_stack([np.ones(len(area)), area, rooms - rooms.mean(), age - age.mean()])

with pm.Model(coords={"coef": ["intercept", "area", "rooms", "age"]}) as model:
    X = pm.Data("X", design)
    price = pm.Data("price", prices)
    sigma2 = pm.InverseGamma("sigma2", alpha=A0, beta=B0)
    beta = pm.Normal("beta", mu=M0, sigma=pm.math.sqrt(sigma2) * PRIOR_SD, dims="coef")
    pm.Normal("obs", mu=pm.math.dot(X, beta), sigma=pm.math.sqrt(sigma2), observed=price)


def log_z(X, price):
    """log p(price) = −n/2 log 2π + ½ log(|Vn| / |V0|) + a0 log b0 − an log bn + log Γ(an) − log Γ(a0),
    with Vn = (V0⁻¹ + XᵀX)⁻¹, mn = Vn (V0⁻¹ m0 + Xᵀy), an = a0 + n/2,
    bn = b0 + ½ (yᵀy + m0ᵀ V0⁻¹ m0 − mnᵀ Vn⁻¹ mn); in float64."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(price, dtype=np.float64)
    n = len(y)
    v0_inv = np.diag(1.0 / PRIOR_SD**2)
    vn_inv = v0_inv + X.T @ X
    m_n = np.linalg.solve(vn_inv, v0_inv @ M0 + X.T @ y)
    a_n = A0 + n / 2
    b_n = B0 + 0.5 * (y @ y + M0 @ v0_inv @ M0 - m_n @ vn_inv @ m_n)
    log_det_v0 = np.sum(np.log(PRIOR_SD**2))
    log_det_vn = -np.linalg.slogdet(vn_inv)[1]
    return float(
        -n / 2 * np.log(2 * np.pi) + 0.5 * (log_det_vn - log_det_v0)
        + A0 * np.log(B0) - a_n * np.log(b_n) + gammaln(a_n) - gammaln(A0)
    )
