"""The built-in target families that a YAML file names with `family:`.

Each family is a function whose keyword defaults declare its parameters (and their types) and which
returns a `Target` with the default initial distribution N(0, I). Densities are written for one
point with `jax.scipy.stats`; constants (data, component means) are closed over as numpy arrays.
Where the normalising constant is known in closed form, the family computes it and sets `log_z`.

Example:
    >>> t = FAMILIES["normal"](dim=3, scale=2.0, normalized=False)
    >>> round(t.log_z, 4)  # 3/2 log(2π) + 3 log 2
    4.8363
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np
from jax.nn import log_sigmoid
from jax.scipy.special import logsumexp
from jax.scipy.stats import laplace as laplace_dist
from jax.scipy.stats import multivariate_normal, norm
from jax.scipy.stats import t as t_dist

from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.datasets import read_table, split_response

# Family parameters with these names are file paths, relative to the YAML file that sets them.
PATH_PARAMETERS = ("data",)

_LOG_2PI = float(np.log(2 * np.pi))


def _check_dim(dim: int, least: int = 1) -> int:
    if dim < least:
        raise TargetError(f"parameter 'dim' must be an integer >= {least}, got {dim}")
    return dim


def _positive(name: str, value: float) -> float:
    if not np.isfinite(value) or value <= 0:
        raise TargetError(f"parameter {name!r} must be a positive number, got {value!r}")
    return float(value)


def _as_matrix(name: str, value: Any, shape: tuple[int, int]) -> np.ndarray:
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TargetError(f"parameter {name!r} must be a list of lists of numbers") from None
    if out.shape != shape:
        raise TargetError(f"parameter {name!r} must have shape {shape}, got {out.shape}")
    return out


def normal(
    dim: int = 2,
    loc: float = 0.0,
    scale: float = 1.0,
    cov: Any = None,
    normalized: bool = True,
) -> Target:
    """Gaussian N(loc·1, scale² I), or N(loc·1, cov) when `cov` (a dim × dim list) is given.

    With `normalized: false` the density is the bare kernel `exp(-½ (x-μ)ᵀ Σ⁻¹ (x-μ))`, whose
    `log Z = d/2 log 2π + ½ log det Σ`; otherwise `log Z = 0`.
    """
    _check_dim(dim)
    scale = _positive("scale", scale)
    if cov is None:
        log_norm = dim / 2 * _LOG_2PI + dim * np.log(scale)

        def logpdf(x):
            return jnp.sum(norm.logpdf(x, loc, scale))

        shape = f"{scale:g}² I"
    else:
        if scale != 1.0:
            raise TargetError("give either parameter 'scale' or parameter 'cov', not both")
        cov = _as_matrix("cov", cov, (dim, dim))
        sign, logdet = np.linalg.slogdet(cov)
        if not np.allclose(cov, cov.T) or sign <= 0 or np.any(np.linalg.eigvalsh(cov) <= 0):
            raise TargetError("parameter 'cov' must be a symmetric positive-definite matrix")
        log_norm = dim / 2 * _LOG_2PI + 0.5 * logdet
        mean = np.full(dim, loc)

        def logpdf(x):
            return multivariate_normal.logpdf(x, mean, cov)

        shape = "Σ"
    offset = 0.0 if normalized else float(log_norm)

    def log_density(x):
        return logpdf(x) + offset

    return Target.create(
        log_density,
        dim,
        log_z=offset,
        name="normal",
        description=f"Gaussian N({loc:g}, {shape}) in {dim} dimensions",
    )


def gaussian_mixture(
    dim: int = 2,
    num_components: int = 8,
    mean_center: float = 3.0,
    mean_spread: float = 1.0,
    seed: int = 0,
    means: Any = None,
    scale: float = 1.0,
    weights: Any = None,
) -> Target:
    """Mixture of Gaussians N(μ_k, scale² I) with weights w_k; log Z = 0.

    Means: the list `means` (num_components × dim) when given; otherwise drawn once as
    `numpy.random.default_rng(seed).normal(mean_center, mean_spread, size=(num_components, dim))`.
    Weights: `weights` normalised to sum to one, or equal.
    """
    _check_dim(dim)
    scale = _positive("scale", scale)
    if means is None:
        if num_components < 1:
            raise TargetError(f"parameter 'num_components' must be at least 1, got {num_components}")
        rng = np.random.default_rng(seed)
        mus = rng.normal(mean_center, mean_spread, size=(num_components, dim))
    else:
        if not isinstance(means, (list, tuple)) or not means:
            raise TargetError("parameter 'means' must be a list of lists of numbers (one per component)")
        mus = _as_matrix("means", means, (len(means), dim))
    k = mus.shape[0]
    if weights is None:
        w = np.full(k, 1.0 / k)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (k,) or np.any(w <= 0):
            raise TargetError(f"parameter 'weights' must be {k} positive numbers")
        w = w / w.sum()
    log_w = np.log(w)

    def log_density(x):
        comp = jnp.sum(norm.logpdf(x, mus, scale), axis=-1)
        return logsumexp(comp + log_w)

    return Target.create(
        log_density,
        dim,
        log_z=0.0,
        name="gaussian_mixture",
        description=f"mixture of {k} Gaussians N(μ_k, {scale:g}² I) in {dim} dimensions",
    )


def laplace(dim: int = 2, loc: float = 0.0, scale: float = 1.0) -> Target:
    """Product of Laplace(loc, scale) densities; log Z = 0."""
    _check_dim(dim)
    scale = _positive("scale", scale)

    def log_density(x):
        return jnp.sum(laplace_dist.logpdf(x, loc, scale))

    return Target.create(
        log_density,
        dim,
        log_z=0.0,
        name="laplace",
        description=f"product of Laplace({loc:g}, {scale:g}) in {dim} dimensions",
    )


def student_t(dim: int = 2, df: float = 3.0, loc: float = 0.0, scale: float = 1.0) -> Target:
    """Product of Student-t densities with `df` degrees of freedom; log Z = 0."""
    _check_dim(dim)
    df = _positive("df", df)
    scale = _positive("scale", scale)

    def log_density(x):
        return jnp.sum(t_dist.logpdf(x, df, loc, scale))

    return Target.create(
        log_density,
        dim,
        log_z=0.0,
        name="student_t",
        description=f"product of Student-t (df {df:g}) in {dim} dimensions",
    )


def funnel(dim: int = 10, scale: float = 3.0) -> Target:
    """Neal's funnel: x₀ ~ N(0, scale²), x_i | x₀ ~ N(0, exp(x₀)) for i ≥ 1; log Z = 0."""
    _check_dim(dim, least=2)
    scale = _positive("scale", scale)

    def log_density(x):
        return norm.logpdf(x[0], 0.0, scale) + jnp.sum(norm.logpdf(x[1:], 0.0, jnp.exp(x[0] / 2)))

    return Target.create(
        log_density,
        dim,
        log_z=0.0,
        name="funnel",
        description=f"Neal's funnel in {dim} dimensions (x0 ~ N(0, {scale:g}²))",
    )


def double_well_log_z() -> float:
    """`log ∫ exp(-x⁴ + 6x² + x/2) dx`, by the trapezoid rule on [-8, 8] with 32001 points.

    The integrand is smooth and decays like exp(-x⁴), so the rule converges geometrically; at this
    spacing it agrees with adaptive quadrature to float64 precision (see tests).
    """
    x, h = np.linspace(-8.0, 8.0, 32001, retstep=True)
    f = -(x**4) + 6 * x**2 + 0.5 * x
    top = f.max()
    # The end points carry weight h/2, but exp(f) there is below 1e-1700: plain sums suffice.
    return float(top + np.log(h * np.exp(f - top).sum()))


def many_well(dim: int = 32) -> Target:
    """Many-well: dim/2 independent copies of the 2-d double well `-x₁⁴ + 6x₁² + x₁/2 - x₂²/2`.

    2^(dim/2) modes. `log Z = dim/2 · (log ∫ exp(-x⁴ + 6x² + x/2) dx + ½ log 2π)`, the
    one-dimensional integral computed by quadrature (`double_well_log_z`).
    """
    _check_dim(dim, least=2)
    if dim % 2:
        raise TargetError(f"family many_well needs an even dim, got {dim}")
    log_z = dim // 2 * (double_well_log_z() + 0.5 * _LOG_2PI)

    def log_density(x):
        a, b = x[0::2], x[1::2]
        return jnp.sum(-(a**4) + 6 * a**2 + 0.5 * a - 0.5 * b**2)

    return Target.create(
        log_density,
        dim,
        log_z=log_z,
        name="many_well",
        description=f"many-well: {dim // 2} double wells, {2 ** (dim // 2)} modes, in {dim} dimensions",
    )


def _design(data: str, column: str, family: str) -> tuple[np.ndarray, np.ndarray, Path]:
    if data == "":
        raise TargetError(f"family {family} needs params.data: the path of a CSV file")
    path = Path(data)
    header, values = read_table(path)
    x, y, _ = split_response(header, values, column, path)
    return x, y, path


def logistic_regression(
    data: str = "",
    label_column: str = "",
    prior_scale: float = 10.0,
    scale_features: bool = True,
    intercept: bool = True,
) -> Target:
    """Bayesian logistic regression: labels y ∈ {0, 1}, P(y=1) = σ(x·w), prior w ~ N(0, prior_scale² I).

    Data: a CSV file with a header row (the label column is `label_column`, or the last one).
    With `scale_features`, each feature is divided by its standard deviation; with `intercept`, a
    column of ones is prepended. The evidence has no closed form (log Z unknown unless given).
    """
    prior_scale = _positive("prior_scale", prior_scale)
    x, y, path = _design(data, label_column, "logistic_regression")
    if not np.all((y == 0) | (y == 1)):
        raise TargetError(f"labels in {path} must be 0 or 1")
    if scale_features:
        sd = x.std(axis=0)
        if np.any(sd == 0):
            raise TargetError(f"{path} has a constant feature column; it cannot be scaled")
        x = x / sd
    if intercept:
        x = np.hstack([np.ones((x.shape[0], 1)), x])
    n, d = x.shape
    sign = 2 * y - 1

    def log_density(w):
        return jnp.sum(log_sigmoid(sign * (x @ w))) + jnp.sum(norm.logpdf(w, 0.0, prior_scale))

    return Target.create(
        log_density,
        d,
        name="logistic_regression",
        description=(
            f"Bayesian logistic regression on {path.name} ({n} × {d}), prior N(0, {prior_scale:g}² I)"
        ),
    )


def linear_regression_log_evidence(
    x: np.ndarray, y: np.ndarray, noise_scale: float, prior_scale: float
) -> float:
    """`log ∫ N(y; Xβ, σ² I) N(β; 0, τ² I) dβ` in float64, through the p × p posterior precision."""
    n, p = x.shape
    s2, t2 = noise_scale**2, prior_scale**2
    precision = x.T @ x / s2 + np.eye(p) / t2
    chol = np.linalg.cholesky(precision)
    half = np.linalg.solve(chol, x.T @ y / s2)  # L⁻¹ Xᵀy/σ², so mᵀAm = |half|²
    return float(
        -0.5 * n * np.log(2 * np.pi * s2)
        - 0.5 * p * np.log(t2)
        - 0.5 * y @ y / s2
        + 0.5 * half @ half
        - np.sum(np.log(np.diag(chol)))
    )


def linear_regression(
    data: str = "",
    response_column: str = "",
    noise_scale: float = 1.0,
    prior_scale: float = 10.0,
    standardize: bool = True,
    intercept: bool = True,
) -> Target:
    """Conjugate Bayesian linear regression: y ~ N(Xβ, noise_scale² I), β ~ N(0, prior_scale² I).

    Data: a CSV file with a header row (the response is `response_column`, or the last column).
    With `standardize`, features and response are centred and divided by their standard
    deviations; with `intercept`, a column of ones is prepended. The evidence is exact.
    """
    noise_scale = _positive("noise_scale", noise_scale)
    prior_scale = _positive("prior_scale", prior_scale)
    x, y, path = _design(data, response_column, "linear_regression")
    if standardize:
        sd = x.std(axis=0)
        if np.any(sd == 0) or y.std() == 0:
            raise TargetError(f"{path} has a constant column; it cannot be standardized")
        x = (x - x.mean(axis=0)) / sd
        y = (y - y.mean()) / y.std()
    if intercept:
        x = np.hstack([np.ones((x.shape[0], 1)), x])
    n, d = x.shape
    log_z = linear_regression_log_evidence(x, y, noise_scale, prior_scale)

    def log_density(beta):
        return jnp.sum(norm.logpdf(y, x @ beta, noise_scale)) + jnp.sum(norm.logpdf(beta, 0.0, prior_scale))

    return Target.create(
        log_density,
        d,
        log_z=log_z,
        name="linear_regression",
        description=f"conjugate Bayesian linear regression on {path.name} ({n} × {d}), exact evidence",
    )


FAMILIES: dict[str, Callable[..., Target]] = {
    "normal": normal,
    "gaussian_mixture": gaussian_mixture,
    "laplace": laplace,
    "student_t": student_t,
    "funnel": funnel,
    "many_well": many_well,
    "logistic_regression": logistic_regression,
    "linear_regression": linear_regression,
}
