"""Adaptive tempering: β chosen from the particles, the refinement moves the only moves.

The forward and backward kernels are not used: the incremental weight of β → β′ is
`(β′ − β)(log γ(x) − log π0(x))` at the current particles, and β′ is found by bisection so that the
conditional ESS (Zhou, Johansen & Aston 2016) of those weights is `target_ess` (classic adaptive
tempered SMC); where that step's weights would have a heavy tail (Pareto k̂ above `TAIL_TRIGGER`)
a shorter one whose weights read k̂ ≤ `TAIL_K` is taken instead, and the population resampled
(`tail_limited_beta`; docs/method.md, "The step sets the tail"). As in BlackJAX (`smc.adaptive_tempered` around `smc.tempered`), the adaptive step
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

import math
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
# The tail of a step's weights (`tail_limited_beta`): where the ESS's step would leave weights since
# the last resampling of Pareto k̂ above TAIL_TRIGGER, β′ is the longest of TAIL_CANDIDATES − 1
# shorter steps, each TAIL_SHRINK of the one before (down to 0.7^12 ≈ 1.4 % of it), whose weights
# read k̂ ≤ TAIL_K (None: the conditional ESS alone). A start whose weights have tail index k0 gives
# a step from β to β′ weights of index (β′ − β)/(1/k0 − β): the step, not the ESS, sets how heavy
# the final weights' tail is. On the corpus (seeds 0-19) 0.35 with the trigger took `ok` & covering
# from 207 to 213 of 240 (hierarchical_normal 7 -> 14), docs/benchmarks.md.
TAIL_K: Optional[float] = 0.35
# ... but only where the ESS's step would give weights of k̂ above TAIL_TRIGGER (the verdict's warn
# threshold, `stats.psis.PARETO_K_WARN`): a step shortened forces a resampling, and one made at an
# ESS/N near 1 leaves a population's genealogy variance estimate noisy (negative on 1-d posteriors
# whose one-step weights read k̂ 0.35-0.5: corpus at 096a54f, TAIL_K 0.35, no trigger).
TAIL_TRIGGER = 0.5
TAIL_SHRINK = 0.7
TAIL_CANDIDATES = 13
# No candidate step is shorter than this (in β) unless the ESS's step is: where the start's tail
# index is 1 (a Gaussian against an exponential tail) every step's weights have index 1 at any
# length, so the rule would creep towards β = 1 forever; it adds at most 1/TAIL_MIN_STEP steps.
TAIL_MIN_STEP = 0.02
# As `stats.psis.EQUAL_WEIGHTS_RTOL`: log weights this close (relative) are one point mass, no tail.
EQUAL_WEIGHTS_RTOL = 2.0**-17


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


def _log1mexp(a: jax.Array) -> jax.Array:
    """`log(1 − e^a)` for `a ≤ 0` (Mächler 2012), as `stats.psis._log1mexp`."""
    safe = jnp.minimum(a, 0.0)
    return jnp.where(safe > -jnp.log(2.0), jnp.log(-jnp.expm1(safe)), jnp.log1p(-jnp.exp(safe)))


def _gpd_shape(log_x: jax.Array) -> jax.Array:
    """The shape k̂ of a generalised Pareto fitted to exceedances given by their logs (sorted
    ascending, static length n): `stats.psis._gpd_fit_log`'s Zhang–Stephens estimate with PSIS's
    prior, in jax (NaN where it cannot be fitted)."""
    n = log_x.shape[0]
    m = 30 + int(math.sqrt(n))
    c = jnp.sqrt(m / (jnp.arange(1, m + 1, dtype=log_x.dtype) - 0.5)) - 1.0
    lx = log_x - log_x[-1]
    log_xq = lx[int(n / 4 + 0.5) - 1]
    lower = _log1mexp(lx)

    def k_of(log_c):
        a = log_c - math.log(3.0) - log_xq
        return jnp.mean(jnp.logaddexp(lower, a[..., None] + lx), axis=-1), a

    k_grid, a = k_of(jnp.log(c))
    log_abs_b = jnp.where(a < 0, _log1mexp(jnp.minimum(a, 0.0)), a + _log1mexp(-jnp.abs(a)))
    profile = n * (log_abs_b - jnp.log(jnp.abs(k_grid)) - k_grid - 1.0)
    weights = jax.nn.softmax(jnp.where(jnp.isnan(profile), -jnp.inf, profile))
    weights = jnp.where(weights >= 10 * jnp.finfo(log_x.dtype).eps, weights, 0.0)
    k, _ = k_of(jnp.log(jnp.sum(c * weights) / jnp.sum(weights)))
    return (n * k + 10 * 0.5) / (n + 10)


def tail_index(log_w: jax.Array) -> jax.Array:
    """PSIS Pareto k̂ of the weights `exp(log_w)`, in jax: `stats.psis.pareto_k` fitted to the
    `tail_length(N)` largest, −inf where they equal the cutoff to float precision (no tail), NaN
    where the fit fails. Ties with the cutoff count as zero exceedances, where `pareto_k` drops them.

    Example:
        >>> import numpy as np
        >>> from mcd_cli.stats.psis import pareto_k
        >>> log_w = np.random.default_rng(0).normal(size=2048)
        >>> bool(abs(float(tail_index(jnp.asarray(log_w))) - pareto_k(log_w)) < 1e-3)
        True
    """
    num = log_w.shape[0]
    tail_len = int(math.ceil(min(0.2 * num, 3.0 * math.sqrt(num))))
    top = jax.lax.top_k(jnp.where(jnp.isnan(log_w), -jnp.inf, log_w), tail_len + 1)[0]
    cutoff, tail = top[tail_len], top[:tail_len][::-1]
    log_x = tail + _log1mexp(cutoff - tail)
    no_tail = ~(top[0] - cutoff > EQUAL_WEIGHTS_RTOL * jnp.maximum(1.0, jnp.abs(top[0])))
    return jnp.where(no_tail, -jnp.inf, _gpd_shape(log_x))


def tail_limited_beta(
    beta: jax.Array, log_w: jax.Array, log_likelihood: jax.Array, beta_ess: jax.Array, tail_k: float,
    trigger: Optional[float] = None,
) -> tuple[jax.Array, jax.Array]:
    """`(β′, limited)`. Where the weights since the last resampling at the ESS's step, `log_w +
    (β_ess − β) · log_likelihood`, have `tail_index` above `trigger` (default `tail_k`), the
    largest of β + max(Δ · TAIL_SHRINK^j, min(Δ, TAIL_MIN_STEP)) (j < TAIL_CANDIDATES, Δ = β_ess −
    β) at which they have k̂ ≤ `tail_k` (a NaN k̂ passes); else `β_ess`, also where no candidate
    passes, as where the tail is the log-likelihood's own and no step lightens it. `limited`:
    β′ < β_ess.

    Example:
        >>> ll = jnp.log(jax.random.pareto(jax.random.key(0), 1.0, (4096,)))  # tail index 1
        >>> b, limited = tail_limited_beta(jnp.asarray(0.0), jnp.zeros(4096), ll, jnp.asarray(1.0), 0.35)
        >>> bool(limited), bool(0.2 < float(b) < 0.4)
        (True, True)
    """
    trigger = tail_k if trigger is None else trigger
    shrink = TAIL_SHRINK ** jnp.arange(TAIL_CANDIDATES, dtype=log_likelihood.dtype)
    step = beta_ess - beta
    betas = beta + jnp.maximum(step * shrink, jnp.minimum(step, TAIL_MIN_STEP))
    betas = betas.at[0].set(beta_ess)
    ks = jax.vmap(lambda b: tail_index(log_w + jnp.where(jnp.isneginf(log_likelihood), -jnp.inf, (b - beta) * log_likelihood)))(betas)
    passes = (ks <= tail_k) | jnp.isnan(ks)
    first = jnp.argmax(passes)
    keep = (ks[0] <= trigger) | jnp.isnan(ks[0]) | ~jnp.any(passes)
    chosen = jnp.where(keep, beta_ess, betas[first])
    return chosen, chosen < beta_ess


def build_tempered_kernel(
    refine: Refine, resample: Resampler, settings: Settings, sharding: Optional[NamedSharding] = None
) -> Callable:
    """The tempered step `(key, population, β′, log-likelihoods[, resample]) -> (population,
    StepInfo)` (BlackJAX's `smc.tempered` kernel, β′ its `lmbda`): reweight by `(β′ − β) ·
    log-likelihood`, β the population's, resample when ESS/N falls below `settings.resample` (or
    when `resample`, a decision made in advance, says so; never at β′ = 1), then refine at β′
    (unless β′ = 1; `moves` moves where given, a replay's recorded count) and measure how much the
    moves moved."""

    def tempered(
        key, pop: Population, beta_new, log_likelihood, resample_now=None, also_resample=None, moves=None
    ) -> tuple[Population, StepInfo]:
        k_resample, k_refine = jax.random.split(key)
        increment = jnp.where(jnp.isneginf(log_likelihood), -jnp.inf, (beta_new - pop.beta) * log_likelihood)
        pop, ess = reweight(pop, increment, sharding)
        last = beta_new >= 1.0
        if resample_now is None:
            resample_now = ess < settings.resample + ESS_ROUNDING
        if also_resample is not None:
            resample_now = resample_now | also_resample
        do_resample = resample_now & ~last
        pop = maybe_resample(pop, k_resample, do_resample, resample, sharding)
        before = pop.states.position
        pop, acceptance, used, made = maybe_refine(pop, k_refine, ~last, beta_new, refine, moves)
        correlation = jnp.where(last, jnp.nan, move_correlation(before, pop.states.position, pop.log_w))
        info = StepInfo(
            beta_new, ess, do_resample, acceptance, used.step_size, correlation.astype(pop.log_w.dtype), used.inv_mass,
            made,
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
    parameters `chosen.refine[k]` (where it moved) and, where the run measured them, its moves
    `chosen.moves[k]`, adapting nothing (`adapt` is ignored); `init`
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

    def choose_beta(beta, log_w, log_likelihood):
        beta_ess = next_beta(beta, log_w, log_likelihood, settings.target_ess)
        if TAIL_K is None:
            return beta_ess, jnp.zeros((), bool)
        return tail_limited_beta(beta, log_w, log_likelihood, beta_ess, TAIL_K, max(TAIL_TRIGGER, TAIL_K))

    def adaptive(key, pop: Population) -> tuple[Population, StepInfo]:
        log_likelihood = log_likelihoods(pop, path, sharding)
        beta_new, limited = on_every_device(choose_beta, sharding)(pop.beta, pop.log_w, log_likelihood)
        # a step the tail limited resamples, so the next one starts from equal weights
        return tempered(key, pop, beta_new, log_likelihood, also_resample=limited)

    def replay(key, pop: Population) -> tuple[Population, StepInfo]:
        k = pop.steps
        log_likelihood = log_likelihoods(pop, path, sharding)
        # the chosen tuning of a step that refines (β < 1; the last step makes no moves)
        refines = chosen.beta[k] < 1.0
        pop = pop._replace(refine=jax.tree.map(lambda c, p: jnp.where(refines, c[k], p), chosen.refine, pop.refine))
        moves = None if chosen.moves is None else chosen.moves[k]
        return tempered(key, pop, chosen.beta[k], log_likelihood, chosen.resampled[k], moves=moves)

    return SMCKernel(init, adaptive if chosen is None else replay)
