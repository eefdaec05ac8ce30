"""The initial distribution chosen by `--init METHOD`: the declared one, a Laplace fit, a VI fit, or "auto"."""

from __future__ import annotations

import jax
import numpy as np

from mcd_cli.init.gaussian import Gaussian, InitFit, check_proposal
from mcd_cli.init.laplace import _cluster, laplace
from mcd_cli.init.vi import _mode_candidates, _vi_fit, _vi_runs, vi
from mcd_cli.targets.base import Target

METHODS = ("auto", "target", "laplace", "vi")
AUTO_FULL_MAX_DIM = 256  # "auto" also tries the full-covariance Laplace fit up to this dimension


def fit_initial(
    target: Target,
    key: jax.Array,
    method: str = "auto",
    *,
    explicit_initial: bool = False,
    cov: str = "diag",
    restarts: int = 4,
    vi_steps: int = 2000,
    max_steps: int = 500,
    check_samples: int = 2048,
) -> InitFit:
    """The initial distribution chosen by `--init METHOD` (one of "auto", "target", "laplace", "vi").

    "auto": the declared distribution when the target sets one explicitly (`explicit_initial`);
    otherwise VI from `restarts + 1` starting points, and when these end at different modes, the
    Gaussian matching the mean and variance of an equal-weight mixture of one fit per mode (it
    covers every mode found, where a single fit would cover one), with a warning. When VI finds
    one mode and `d ≤ AUTO_FULL_MAX_DIM`, the full-covariance Laplace fit is tried too and kept
    when it converged and its ELBO as a proposal (`check.elbo`) is higher: exact on a conjugate
    regression, where the mean-field fit misses the correlations; worse on a funnel, where it loses.

    Example:
        >>> import jax.numpy as jnp
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2, initial_scale=3.0)
        >>> fit_initial(t, jax.random.key(0), "auto", explicit_initial=True).gaussian.scale
        array([3., 3.])
    """
    if method not in METHODS:
        raise ValueError(f"unknown initial-distribution method {method!r}; choose one of {', '.join(METHODS)}")
    k_fit, k_check = jax.random.split(key)
    if method == "target" or (method == "auto" and explicit_initial):
        gaussian = Gaussian(np.asarray(target.initial_mean), np.asarray(target.initial_scale))
        check = check_proposal(target, gaussian, k_check, check_samples)
        name = "target" if method == "target" else "auto:target"
        return InitFit(name, gaussian, True, 0, check.elbo, check.elbo, check, ())
    if method == "laplace":
        return laplace(target, cov=cov, max_steps=max_steps, restarts=restarts, key=k_fit, check_samples=check_samples)
    if method == "vi":
        return vi(target, k_fit, steps=vi_steps, restarts=restarts, check_samples=check_samples)
    k_runs, k_best = jax.random.split(k_fit)
    try:
        runs = _vi_runs(target, k_runs, int(vi_steps), 16, 0.1, int(restarts))
    except ValueError as err:
        return _laplace_instead(target, jax.random.fold_in(k_fit, 2), str(err), max_steps, restarts, check_samples)
    best = _vi_fit(target, runs, k_best, check_samples)
    if best.modes == 1:
        best = best._replace(method="auto:vi")
        if target.dim > AUTO_FULL_MAX_DIM:
            return best
        # A correlated unimodal posterior (a regression) is covered far better by the full
        # Laplace Gaussian; a funnel is not. Keep whichever has the higher ELBO as a proposal,
        # and Laplace only when it converged to one mode.
        k_laplace = jax.random.fold_in(k_fit, 1)
        try:
            full = laplace(target, cov="full", max_steps=max_steps, restarts=1, key=k_laplace, check_samples=check_samples)
        except ValueError:  # its mode search failed (log γ not finite there): the VI fit stands
            return best
        if full.converged and full.modes == 1 and full.gaussian.chol is not None and full.check.elbo > best.check.elbo:
            return full._replace(method="auto:laplace-full")
        return best
    # One fit per mode found (the best ELBO in each cluster), weighted equally: how much mass each
    # mode holds is unknown, and the point is to cover every one.
    ok = np.flatnonzero(_mode_candidates(runs.final))
    labels = np.array(_cluster(runs.means[ok], best.gaussian.scale, target))
    keep = [ok[labels == c][np.argmax(runs.final[ok[labels == c]])] for c in np.unique(labels)]
    means, variances = runs.means[keep], runs.scales[keep] ** 2
    mean = means.mean(axis=0)
    gaussian = Gaussian(mean, np.sqrt((variances + means**2).mean(axis=0) - mean**2))
    check = check_proposal(target, gaussian, k_check, check_samples)
    warnings = best.warnings + (
        f"auto: the variational fits found {best.modes} modes; starting from one Gaussian matching "
        "their mixture's mean and variance, which covers all of them",
    )
    return InitFit(
        "auto:vi-moments", gaussian, best.converged, best.steps, check.elbo, check.elbo, check, warnings, best.modes
    )


def _laplace_instead(
    target: Target, key: jax.Array, why: str, max_steps: int, restarts: int, check_samples: int
) -> InitFit:
    """"auto"'s start where every VI run's ELBO was not finite (a density that is NaN or −inf
    where some of its draws land, though not at its mode): the diagonal Laplace fit, which needs
    the density and its gradient only along its way to the mode, with a warning; ValueError when
    that fails too (the caller then starts from the target's N(0, I) fallback)."""
    try:
        fit = laplace(target, cov="diag", max_steps=max_steps, restarts=restarts, key=key, check_samples=check_samples)
    except ValueError as err:
        raise ValueError(f"{why}; the Laplace fit failed too ({err})") from None
    if not (fit.converged and np.isfinite(fit.check.log_z)):
        raise ValueError(f"{why}; the Laplace fit did not converge either")
    warning = f"auto: the VI fit failed ({why}); starting from the diagonal Laplace fit"
    return fit._replace(method="auto:laplace-diag", warnings=(*fit.warnings, warning))
