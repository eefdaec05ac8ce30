"""Adaptive tempering: β chosen from the particles, the refinement moves the only moves.

The forward and backward kernels are not used: the incremental weight of β → β′ is
`(β′ − β)(log γ(x) − log π0(x))` at the current particles, and β′ is found by bisection so that the
conditional ESS (Zhou, Johansen & Aston 2016) of those weights is `target_ess` (classic adaptive
tempered SMC). As in BlackJAX (`smc.adaptive_tempered` around `smc.tempered`), the adaptive step
is a wrapper: `build_kernel` returns an `SMCKernel` whose step solves for β′ from the particles
and hands it to the tempered step (`build_tempered_kernel`), which reweights from
`population.beta`, resamples when the ESS is low and refines at β′. Given an earlier run's
choices (`chosen`, a `Tempering`) the same wrapper replays them instead: β′, the resampling and
the refinement's parameters of step k are `chosen`'s, nothing adapted (`loop.run_replay`).

With a fixed schedule and fixed kernels Ẑ is unbiased for Z whatever the resampling (Del Moral
2004); the adaptive β, like the adapted step sizes and mass, adds a small bias.

Example:
    >>> import jax, jax.numpy as jnp
    >>> log_like = jax.random.normal(jax.random.key(0), (1000,))
    >>> beta = next_beta(jnp.asarray(0.0), jnp.zeros(1000), 5.0 * log_like, 0.5)
    >>> round(float(conditional_ess(jnp.zeros(1000), beta * 5.0 * log_like)), 3)
    0.5
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath
from mcd_cli.smc import adaptation
from mcd_cli.smc.adaptation import Refine
from mcd_cli.smc.base import advance, initial_population, maybe_refine, maybe_resample, reweight
from mcd_cli.smc.diagnostics import move_correlation
from mcd_cli.smc.sharding import on_every_device, replicate
from mcd_cli.smc.state import Kernels, Population, Resampler, Settings, SMCKernel, StepInfo, Tempering

# The bisection on β′ halves [β, 1] this many times: below float32 resolution of β.
BISECTION_STEPS = 40
# Adaptive tempering puts ESS/N at `target_ess` up to float rounding; the resampling test allows
# that much, so `resample = target_ess` resamples after every step (classic tempered SMC) instead
# of flipping on the rounding of the bisection.
ESS_ROUNDING = 1e-3


def conditional_ess(log_weights_now: jax.Array, log_increment: jax.Array) -> jax.Array:
    """Conditional ESS / N of an incremental weight: `(Σ W_i u_i)² / Σ W_i u_i²` (Zhou et al. 2016)."""
    log_w = jnp.where(jnp.isnan(log_weights_now), -jnp.inf, log_weights_now)
    log_w = log_w - logsumexp(log_w)
    a = jnp.where(jnp.isnan(log_increment), -jnp.inf, log_increment)
    return jnp.exp(2.0 * logsumexp(log_w + a) - logsumexp(log_w + 2.0 * a))


def next_beta(beta: jax.Array, log_w: jax.Array, log_likelihood: jax.Array, target_ess: float) -> jax.Array:
    """The β′ ∈ (β, 1] whose conditional ESS is `target_ess` (1 when even β′ = 1 keeps it).

    `log_likelihood = log γ(x) − log π0(x)` at the particles; the incremental log weight of β → β′
    is `(β′ − β) · log_likelihood`, whose conditional ESS decreases as β′ grows.
    """

    def cess(b):
        return conditional_ess(log_w, (b - beta) * log_likelihood)

    def bisect(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        ok = cess(mid) >= target_ess
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    one = jnp.ones_like(beta)
    lo, _ = jax.lax.fori_loop(0, BISECTION_STEPS, bisect, (beta, one))
    # The bisection never returns β itself: a step of at least one float spacing always moves on.
    lo = jnp.maximum(lo, jnp.nextafter(beta, one))
    return jnp.where(cess(one) >= target_ess, one, lo)


def build_tempered_kernel(
    refine: Refine, resample: Resampler, settings: Settings, sharding: Optional[NamedSharding] = None
) -> Callable:
    """The tempered step `(key, population, β′, log-likelihoods[, resample]) -> (population,
    StepInfo)` (BlackJAX's `smc.tempered` kernel, β′ its `lmbda`): reweight by `(β′ − β) ·
    log-likelihood`, β the population's, resample when ESS/N falls below `settings.resample` (or
    when `resample`, a decision made in advance, says so; never at β′ = 1), then refine at β′
    (unless β′ = 1) and measure how much the moves moved."""

    def tempered(key, pop: Population, beta_new, log_likelihood, resample_now=None) -> tuple[Population, StepInfo]:
        k_resample, k_refine = jax.random.split(key)
        increment = jnp.where(jnp.isneginf(log_likelihood), -jnp.inf, (beta_new - pop.beta) * log_likelihood)
        pop, ess = reweight(pop, increment, sharding)
        last = beta_new >= 1.0
        if resample_now is None:
            resample_now = ess < settings.resample + ESS_ROUNDING
        do_resample = resample_now & ~last
        pop = maybe_resample(pop, k_resample, do_resample, resample, sharding)
        before = pop.states.position
        pop, acceptance, used = maybe_refine(pop, k_refine, ~last, beta_new, refine)
        correlation = jnp.where(last, jnp.nan, move_correlation(before, pop.states.position, pop.log_w))
        info = StepInfo(
            beta_new, ess, do_resample, acceptance, used.step_size, correlation.astype(pop.log_w.dtype), used.inv_mass
        )
        return advance(pop, beta_new), info

    return tempered


def log_likelihoods(pop: Population, path: AnnealedPath, sharding: Optional[NamedSharding] = None) -> jax.Array:
    """`log γ(x) − log π0(x)` at the particles (−inf where not a number): β′ − β times it is a
    tempered step's incremental log weight."""
    states = pop.states
    log_likelihood = states.log_target - jax.vmap(path.initial_log_density)(states.position)
    return replicate(jnp.where(jnp.isnan(log_likelihood), -jnp.inf, log_likelihood), sharding)


def build_kernel(
    kernels: Kernels, path: AnnealedPath, evaluate: Callable, dim: int, settings: Settings, adapt: bool = True,
    sharding: Optional[NamedSharding] = None, chosen: Optional[Tempering] = None,
) -> SMCKernel:
    """Adaptive tempering's `SMCKernel`: `init(key, num)` (`initial_population` without a forward
    kernel) and `step(key, population)`, the new β in `info.beta`: β′ solved from the particles
    (`next_beta` at `settings.target_ess`), then the tempered step.

    With `chosen` (an earlier adaptive run's `Tempering`) the step at `population.steps = k`
    replays it: β′ = `chosen.beta[k]`, resampled where `chosen.resampled[k]`, its refinement's
    parameters `chosen.refine[k]` (where it moved), adapting nothing (`adapt` is ignored); `init`
    starts the preconditioner as `chosen`'s (a covariance factor: the identity matrix).

    Args:
        kernels: the refinement kernel (needed) and the resampling function; no forward or
            backward kernel.
        path: the annealed path (its π0).
        evaluate: `x -> (log γ(x), ∇log γ(x))`.
        dim: the target's dimension.
        settings: `target_ess`, `resample` and the refinement's.
        adapt: adapt the refinement's step size and preconditioner from the particles.
        sharding: the particle axis over a mesh of devices (`sharding`); None: no constraint.
        chosen: the run to replay; None: choose β′ from the particles.
    """
    refine = adaptation.build_refine(kernels.refine, path, evaluate, settings, adapt and chosen is None, sharding)
    tempered = build_tempered_kernel(refine, kernels.resample, settings, sharding)

    def init(key, num: int) -> Population:
        pop = initial_population(key, num, path, evaluate, kernels.refine, dim, sharding=sharding)
        if chosen is not None and chosen.refine.inv_mass.ndim == 3:  # a covariance factor per step
            pop = pop._replace(refine=pop.refine._replace(inv_mass=jnp.diag(pop.refine.inv_mass)))
        return pop

    def adaptive(key, pop: Population) -> tuple[Population, StepInfo]:
        log_likelihood = log_likelihoods(pop, path, sharding)
        beta_new = on_every_device(lambda *a: next_beta(*a, settings.target_ess), sharding)(
            pop.beta, pop.log_w, log_likelihood
        )
        return tempered(key, pop, beta_new, log_likelihood)

    def replay(key, pop: Population) -> tuple[Population, StepInfo]:
        k = pop.steps
        log_likelihood = log_likelihoods(pop, path, sharding)
        # the chosen tuning of a step that refines (β < 1; the last step makes no moves)
        refines = chosen.beta[k] < 1.0
        pop = pop._replace(refine=jax.tree.map(lambda c, p: jnp.where(refines, c[k], p), chosen.refine, pop.refine))
        return tempered(key, pop, chosen.beta[k], log_likelihood, chosen.resampled[k])

    return SMCKernel(init, adaptive if chosen is None else replay)
