"""A NumPyro model's hierarchical sites non-centred: the same joint law in other variables.

A site `θ ~ F(loc, scale)` of a location-scale family whose loc or scale depends on other latents
(`theta ~ Normal(mu, tau)`) can be written `θ = loc + scale · z`, `z ~ F(0, 1)`: NumPyro's own
`LocScaleReparam(centered=0)`. The latents' joint law is the same, so log Z is too; the geometry is
not (a centred model has a funnel where the data say little about each group, a non-centred one
where they say much). `run.start` fits the start in both forms and keeps the closer one
(docs/method.md, "Centred or non-centred").
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np

from mcd_cli.targets.base import Target
from mcd_cli.targets.numpyro_model import ModelDensity, model_density

# Location-scale families NumPyro's `LocScaleReparam` can decentre (`shape_params`: their other parameters).
LOC_SCALE_FAMILIES = {"Normal": (), "Laplace": (), "Cauchy": (), "StudentT": ("df",)}


def _base_fn(fn: Any) -> Any:
    """The distribution inside NumPyro's `Independent` / `ExpandedDistribution` / mask wrappers."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


def hierarchical_sites(density: ModelDensity) -> dict[str, str]:
    """The latent sites of a location-scale family (`LOC_SCALE_FAMILIES`) whose location or scale
    depends on other latents, `{site: family}`: those a non-centred parametrisation changes
    (`noncentred`). Found by running the model on two prior draws and comparing each site's
    parameters.

    Example:
        >>> import numpyro, numpyro.distributions as dist
        >>> def model(y):
        ...     mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        ...     tau = numpyro.sample("tau", dist.HalfNormal(5.0))
        ...     theta = numpyro.sample("theta", dist.Normal(mu, tau).expand([3]))
        ...     numpyro.sample("y", dist.Normal(theta, 1.0), obs=y)
        >>> hierarchical_sites(model_density(model, {"y": np.zeros(3)}, "m"))
        {'theta': 'Normal'}
    """
    from numpyro.handlers import seed, trace

    kwargs = dict(density.model_kwargs)
    traces = [trace(seed(density.model, jax.random.key(i))).get_trace(**kwargs) for i in (1, 2)]
    found = {}
    for name in density.latent_shapes:
        first, second = (_base_fn(t[name]["fn"]) for t in traces)
        family = type(first).__name__
        if family not in LOC_SCALE_FAMILIES or type(second) is not type(first):
            continue
        if any(not np.allclose(np.asarray(getattr(first, p)), np.asarray(getattr(second, p))) for p in ("loc", "scale")):
            found[name] = family
    return found


def noncentred(target: Target) -> Optional[tuple[Target, tuple[str, ...]]]:
    """`target`, a NumPyro model's, in its non-centred parametrisation, and the sites decentred; None
    when the target is not a NumPyro model or has no such site (`hierarchical_sites`).

    Each site `θ ~ F(loc, scale)` whose loc or scale depends on other latents becomes `θ = loc +
    scale · z`, `z ~ F(0, 1)` (NumPyro's `LocScaleReparam(centered=0)`), the same joint law of the
    latents, so log Z is unchanged. A centred hierarchical model has a funnel between each group
    scale and its group effects, where a Gaussian start and gradient moves with one step size miss
    the neck (the corpus's hierarchical_normal: adaptive SMC 0.2–0.3 nats low at every seed); the
    non-centred one has none when the data say little about each group, and a funnel of its own
    when they say much. `run.start` fits the start in both and keeps the one of higher ELBO (both
    bound the same log Z from below). Posterior draws keep the model's names: `θ` is reported
    beside `z` (site `θ_decentered`).
    """
    density = target.log_density
    if not isinstance(density, ModelDensity):
        return None
    sites = hierarchical_sites(density)
    if not sites:
        return None
    from numpyro.handlers import reparam
    from numpyro.infer.reparam import LocScaleReparam

    config = {name: LocScaleReparam(0, shape_params=LOC_SCALE_FAMILIES[family]) for name, family in sites.items()}
    moved = model_density(
        reparam(density.model, config=config), density.model_kwargs, density.model_name, model_name=density.model_name
    )
    return Target.create(
        moved,
        moved.dim,
        log_z=target.log_z,
        name=target.name,
        description=f"{target.description} (non-centred: {', '.join(sites)})",
        params=target.params,
        source=target.source,
        initial_declared=False,
        to_user=moved.constrained,
    ), tuple(sites)
