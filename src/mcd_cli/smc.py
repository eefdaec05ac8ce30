"""Sequential Monte Carlo: the particles move through the annealing together, and are resampled.

The per-particle loop (`mcd_cli.annealing`) gives importance sampling; here one population of N
particles is stepped by `lax.scan` (fixed schedule) or `lax.while_loop` (adaptive tempering),
the kernels `vmap`ped over the particles inside. After step k the log weights gain the
incremental weight

    log G_k = log γ̃_k(s_k) − log γ̃_{k−1}(s_{k−1})
              + log B_{k−1}(s_{k−1} | s_k) − log F_k(s_k | s_{k−1}),

where `γ̃_k` is the annealed density of the whole particle state (UHA: `γ_k(x) N(p; 0, M)`), so
the product of the `G_k` telescopes to the importance weight of the per-particle loop. When the
effective sample size falls below `resample · N` the population is resampled (`resampling`),
the running `log Ẑ` gains `logsumexp(log w) − log N` and the weights restart at zero; each
particle's time-0 ancestor (its "Eve" index) is carried along for the genealogy variance
(`stats.smc_estimate`). Resampling never happens after the last step, whose weights close the
estimate. Metropolis-corrected moves (`kernels.mala`, `kernels.hmc`) at `β_k` then refine the
particles after each resampling (`refine_every="resample"`) or every step; their weight is 1.
Their step size adapts between steps from the acceptance rate and their diagonal preconditioner
from the particles' weighted variance.

With `adaptive`, the forward and backward kernels are not used: the moves are the refinement
kernel's, the incremental weight is `(β′ − β)(log γ(x) − log π0(x))` at the current particles, and
β′ is found by bisection so that the conditional ESS (Zhou, Johansen & Aston 2016) of those
weights is `target_ess` (classic adaptive tempered SMC, as BlackJAX's `adaptive_tempered_smc`).

With a fixed schedule and fixed kernels Ẑ is unbiased for Z whatever the resampling (Del Moral
2004); choices made from the particles (adaptive β, adapted step sizes and mass) add a small bias.

Across devices (`sharding`, the particle axis of a one-dimensional mesh) the particle states are
sharded and the N log weights and Eve indices replicated: every weight-based decision (ESS, the
bisection on β′, the ancestors drawn from the run's key, the log Ẑ increments) is computed on the
whole population by every device alike, and the selected ancestors are gathered back into the
sharded layout (global resampling, docs/cluster.md). The preconditioner's weighted moments and the
acceptance rate are global means that XLA reduces across devices. The run is therefore the
single-device one up to float rounding: the order of those sums, and the per-particle arithmetic
(XLA may vectorise a batch of N/n particles differently from one of N). Rounding can, rarely, flip
one Metropolis decision (or a resampling boundary); that particle then moves elsewhere and log Ẑ
changes by that particle's share, O(1/N), well inside its Monte Carlo error.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from mcd_cli.config import SamplerConfig
    >>> from mcd_cli.targets import Target
    >>> from mcd_cli import annealing
    >>> target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    >>> config = SamplerConfig(backward="ais", steps=8, resample=0.5)
    >>> params = annealing.init_params(jax.random.key(0), target, config)
    >>> out = run(jax.random.key(1), params, target, config, 64)
    >>> out.log_w.shape, out.trace.beta.shape
    ((64,), (8,))
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.sharding import NamedSharding, PartitionSpec

from mcd_cli import annealing, resampling
from mcd_cli.config import SamplerConfig
from mcd_cli.kernels import registry
from mcd_cli.kernels.base import AnnealedPath, RefineKernel, RefineParams, Step
from mcd_cli.kernels.ula import ULAState
from mcd_cli.targets.base import Target

# The bisection on β′ halves [β, 1] this many times: below float32 resolution of β.
BISECTION_STEPS = 40
# Step-size adaptation: ε ← ε · exp(ADAPT_RATE · (acceptance − target)), bounded per step.
ADAPT_RATE = 2.0
MIN_VARIANCE = 1e-8
# Adaptive tempering puts ESS/N at `target_ess` up to float rounding; the resampling test allows
# that much, so `resample = target_ess` resamples after every step (classic tempered SMC) instead
# of flipping on the rounding of the bisection.
ESS_ROUNDING = 1e-3


class Population(NamedTuple):
    """The particle system between steps.

    Attributes:
        states: the kernel states, batched over particles (leading axis N).
        log_w: log weights since the last resampling, (N,).
        log_z: the log Ẑ accumulated at the resamplings so far.
        eve: each particle's time-0 ancestor, (N,) int32.
        resamplings: how many times the population was resampled.
        refine: the refinement kernel's step size and preconditioner.
    """

    states: Any
    log_w: jax.Array
    log_z: jax.Array
    eve: jax.Array
    resamplings: jax.Array
    refine: RefineParams


class Trace(NamedTuple):
    """Per-step diagnostics, arrays over steps (K for a fixed schedule, `max_steps` when adaptive;
    `SMCOutput.steps` says how many are used)."""

    beta: jax.Array  # β_k after step k
    ess: jax.Array  # ESS / N after the reweighting, before any resampling
    resampled: jax.Array  # whether the population was resampled after step k
    acceptance: jax.Array  # mean acceptance of the refinement moves (NaN: none made)
    step_size: jax.Array  # the refinement step size used (NaN: none made)
    # adaptive: mean over coordinates of the particles' correlation across the step's moves
    # (`move_correlation`; NaN: none made)
    correlation: Any = None


class SMCOutput(NamedTuple):
    """One SMC run: `log Ẑ = log_z + logsumexp(log_w) − log N`, and what its error needs."""

    log_z: jax.Array  # accumulated at the resamplings
    log_w: jax.Array  # final log weights since the last resampling, (N,)
    eve: jax.Array  # final particles' time-0 ancestors, (N,)
    resamplings: jax.Array
    steps: jax.Array  # steps taken (K; adaptive: the outcome)
    trace: Trace
    # `stationarity`: (mean change of log γ over `stationarity_moves` extra moves at β = 1, its z
    # score); None without refinement moves
    drift: Any = None


def normalised(log_w: jax.Array) -> jax.Array:
    """Normalised weights `W = softmax(log w)`, NaN weights set to zero."""
    log_w = jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)
    return jax.nn.softmax(log_w)


def ess_fraction(log_w: jax.Array) -> jax.Array:
    """`ESS / N = (Σ w)² / (N Σ w²)`, in log space."""
    log_w = jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)
    return jnp.exp(2.0 * logsumexp(log_w) - logsumexp(2.0 * log_w)) / log_w.shape[0]


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


def _take(tree: Any, idx: jax.Array) -> Any:
    return jax.tree.map(lambda a: a[idx], tree)


def shard(tree: Any, sharding: Optional[NamedSharding]) -> Any:
    """Splits the leading (particle) axis of every leaf of `tree` over `sharding`; None: unchanged."""
    if sharding is None:
        return tree
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


def replicate(tree: Any, sharding: Optional[NamedSharding]) -> Any:
    """Every leaf of `tree` whole on every device of `sharding`'s mesh (an all-gather); None: unchanged."""
    if sharding is None:
        return tree
    whole = NamedSharding(sharding.mesh, PartitionSpec())
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, whole), tree)


def on_every_device(fn: Callable, sharding: Optional[NamedSharding]) -> Callable:
    """`fn` run whole by every device on replicated arguments (`shard_map` with replicated specs).

    XLA would otherwise be free to split a computation on replicated arrays (a cumulative sum, a
    reduction) over the devices, and sum in another order than one device does; here every device
    makes the single-device computation on the same numbers, so its decisions are the same.
    """
    if sharding is None:
        return fn
    return jax.shard_map(fn, mesh=sharding.mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec())


def resample_population(
    pop: Population, key: jax.Array, resampler: Callable, sharding: Optional[NamedSharding] = None
) -> Population:
    """Resamples the particles: `log Ẑ` gains the log mean weight, the weights restart at zero.

    With `sharding` the weights are replicated, so every device draws the same ancestors from the
    same key, and the ancestors' states are gathered back into the sharded layout.
    """
    n = pop.log_w.shape[0]

    def draw(key, log_w):
        log_mean = logsumexp(jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)) - math.log(n)
        return resampler(key, normalised(log_w), n), log_mean

    idx, log_mean = on_every_device(draw, sharding)(key, pop.log_w)
    return pop._replace(
        states=shard(_take(pop.states, idx), sharding),
        log_w=jnp.zeros_like(pop.log_w),
        log_z=pop.log_z + log_mean,
        eve=pop.eve[idx],
        resamplings=pop.resamplings + 1,
    )


def initial_refine_params(kernel: RefineKernel, dim: int, dtype) -> RefineParams:
    """Starting step size: `d^{-1/3}` for MALA-like moves, `d^{-1/4}` for HMC (optimal scalings)."""
    power = 1.0 / 3.0 if kernel.gradients(2) == 1 else 0.25
    return RefineParams(jnp.asarray(dim ** (-power), dtype), jnp.ones((dim,), dtype))


def refine_population(
    pop: Population,
    key: jax.Array,
    beta: jax.Array,
    kernel: RefineKernel,
    path: AnnealedPath,
    evaluate: Callable,
    config: SamplerConfig,
    adapt: bool,
    sharding: Optional[NamedSharding] = None,
) -> tuple[Population, jax.Array, jax.Array]:
    """`refine_steps` Metropolis moves of every particle at β: `(population, acceptance, ε used)`.

    Before the moves the preconditioner is set to the particles' weighted variance; after them the
    step size moves towards the kernel's target acceptance (when `adapt`). Both are means over the
    whole population, also when `sharding` splits it over devices.
    """
    params = pop.refine
    if adapt:
        x = pop.states.position
        w = normalised(pop.log_w)[:, None]
        mean = jnp.sum(w * x, axis=0)
        var = jnp.sum(w * (x - mean) ** 2, axis=0)
        params = params._replace(inv_mass=jnp.maximum(var, MIN_VARIANCE))

    def one_move(states, move_key):
        keys = shard(jax.random.split(move_key, pop.log_w.shape[0]), sharding)
        states, accept = jax.vmap(
            lambda k, s: kernel.step(k, s, beta, path, evaluate, params, config.leapfrog)
        )(keys, states)
        return shard(states, sharding), jnp.mean(accept)

    states, accepts = jax.lax.scan(one_move, pop.states, jax.random.split(key, config.refine_steps))
    acceptance = jnp.mean(accepts)
    used = params.step_size
    if adapt:
        factor = jnp.exp(jnp.clip(ADAPT_RATE * (acceptance - kernel.target_acceptance), -1.0, 1.0))
        params = params._replace(step_size=params.step_size * factor)
    return pop._replace(states=states, refine=params), acceptance, used


def move_correlation(before: jax.Array, after: jax.Array, log_w: jax.Array) -> jax.Array:
    """How little the moves changed the population: the weighted correlation, across particles,
    between each coordinate before and after the moves, averaged over coordinates. 0 when the moves
    give fresh draws from γ_k; near 1 when the particles hardly move, and the population then keeps
    whatever the reweightings made of it. A particle's position is its whole state for the
    refinement, and its coordinates' correlations are scale free.

    Example:
        >>> x = jax.random.normal(jax.random.key(0), (1000, 3))
        >>> float(move_correlation(x, x, jnp.zeros(1000)))
        1.0
    """
    w = normalised(log_w)[:, None]
    a = before - jnp.sum(w * before, axis=0)
    b = after - jnp.sum(w * after, axis=0)
    cov = jnp.sum(w * a * b, axis=0)
    scale = jnp.sqrt(jnp.sum(w * a * a, axis=0) * jnp.sum(w * b * b, axis=0))
    return jnp.mean(jnp.where(scale > 0, cov / jnp.where(scale > 0, scale, 1.0), 1.0))


# Moves made at β = 1 after the run, only to test whether the final population is at equilibrium:
# STATIONARITY_MOVES, or STATIONARITY_TEMPERATURES temperatures' worth of the run's own moves when
# that is more (`stationarity_moves`).
STATIONARITY_MOVES = 20
STATIONARITY_TEMPERATURES = 5


def stationarity_moves(config: SamplerConfig) -> int:
    """Extra moves of the stationarity test: `max(20, 5 · refine_steps)`.

    20 moves tell a population off equilibrium from one at it when each temperature made one to
    five moves (docs/method.md). A run that makes 15 per temperature (adaptive tempering's
    default) has already made as many at each step, so a drift they did not remove needs more to
    show: with 20, student_t3 at d = 200 passed with its tails short (z −0.7 to −2.0, errors 4–7
    SE); with 75, all ten of its runs had z −3.2 to −5.9, while gauss_narrow's correct runs stayed
    within ±2 (docs/benchmarks.md, "Coverage at d = 200 with 15 moves").

    Example:
        >>> stationarity_moves(SamplerConfig()), stationarity_moves(SamplerConfig(refine_steps=15))
        (20, 75)
    """
    return max(STATIONARITY_MOVES, STATIONARITY_TEMPERATURES * config.refine_steps)


def stationarity(
    pop: Population,
    key: jax.Array,
    kernel: RefineKernel,
    path: AnnealedPath,
    evaluate: Callable,
    config: SamplerConfig,
    sharding: Optional[NamedSharding] = None,
) -> tuple[jax.Array, jax.Array]:
    """Is the final population at equilibrium? `(m, z)`: the weighted mean change `m` of log γ(x)
    over `stationarity_moves(config)` refinement moves at β = 1, and `z = m / se(m)`.

    A γ-invariant kernel leaves E_γ[log γ(x)] unchanged, so a population that represents γ shows
    no drift beyond noise. One that the moves have not mixed (a funnel's neck never entered, a
    heavy tail never reached, modes reweighted but never visited) drifts as the extra moves carry
    it towards γ: its estimate carries a bias that neither the genealogy nor the spread of
    populations sees (each population is biased alike). The extra moves change nothing else:
    log Ẑ, the weights and the genealogy are those of the run.
    `se = sqrt(Σ w_i² (Δ_i − m)²)` treats the particles as independent; duplicates from the last
    resampling could make it somewhat small; on runs that were right and on exact draws |z|
    stayed below 2.5 (docs/method.md), and `stats.STATIONARITY_WARN` is 3.
    """
    extra = dataclasses.replace(config, refine_steps=stationarity_moves(config))
    moved, _, _ = refine_population(pop, key, jnp.ones((), pop.log_w.dtype), kernel, path, evaluate, extra, True, sharding)
    delta = replicate(moved.states.log_target - pop.states.log_target, sharding)
    w = normalised(pop.log_w)
    finite = jnp.isfinite(delta) & (w > 0)
    delta = jnp.where(finite, delta, 0.0)
    w = jnp.where(finite, w, 0.0)
    w = w / jnp.maximum(jnp.sum(w), jnp.finfo(w.dtype).tiny)
    m = jnp.sum(w * delta)
    se = jnp.sqrt(jnp.sum(w * w * (delta - m) ** 2))
    return m, jnp.where(se > 0, m / jnp.where(se > 0, se, 1.0), 0.0)


def _no_refine(pop: Population) -> tuple[Population, jax.Array, jax.Array]:
    nan = jnp.full((), jnp.nan, pop.log_w.dtype)
    return pop, nan, nan


def _initial_population(
    key, path, evaluate, num, init_state, refine_kernel, dim, sharding
) -> tuple[Population, Any]:
    keys = shard(jax.random.split(key, num), sharding)
    x0 = jax.vmap(path.sample_initial)(keys)
    log_target0, target_grad0 = jax.vmap(evaluate)(x0)
    states, log_w0 = init_state(keys, x0, log_target0, target_grad0)
    dtype = log_w0.dtype
    kernel = refine_kernel or registry.REFINE["mala"]
    return Population(
        states=shard(states, sharding),
        log_w=replicate(log_w0, sharding),
        log_z=jnp.zeros((), dtype),
        eve=replicate(jnp.arange(num, dtype=jnp.int32), sharding),
        resamplings=jnp.zeros((), jnp.int32),
        refine=initial_refine_params(kernel, dim, dtype),
    ), x0


def run(
    key: jax.Array,
    params: annealing.SamplerParams,
    target: Target,
    config: SamplerConfig,
    num: int,
    adapt: bool = True,
    context: Optional[jax.Array] = None,
    sharding: Optional[NamedSharding] = None,
) -> SMCOutput:
    """One SMC run of `num` particles on the configured schedule (fixed, or adaptive).

    Args:
        key: PRNG key of the run.
        params: the sampler's parameters (the path and the kernels'; ignored by `adaptive`, which
            uses only the initial distribution).
        target: the target.
        config: the sampler, with its SMC fields (`resample`, `resampling`, `refine`, ...).
        num: particles N.
        adapt: adapt the refinement's step size and preconditioner from the particles (off: the
            kernels are fixed, and Ẑ is exactly unbiased on a fixed schedule).
        context: a datum's features for an amortised score network (`amortised`), handed to the
            backward kernel with every transition; None for an unconditional sampler.
        sharding: the particle axis split over a mesh of devices (`devices.Layout.particles`; `num`
            a multiple of its device count), with global resampling; None: no constraint.
    """
    if config.adaptive:
        return _run_adaptive(key, params, target, config, num, adapt, sharding)
    return _run_fixed(key, params, target, config, num, adapt, sharding, context)


def _run_fixed(key, params, target, config, num, adapt, sharding, context=None) -> SMCOutput:
    est = registry.estimator(config.sampler, config.backward)
    forward, backward = est.forward, est.backward
    refine_kernel = registry.refine(config.refine) if config.refine != "none" else None
    resampler = resampling.scheme(config.resampling)
    path = annealing.annealed_path(params.path, target, config)
    resolved = forward.prepare(params.forward, target.dim)
    evaluate = jax.value_and_grad(target.log_density)
    key_init, key_steps = jax.random.split(key)

    def extra(states):  # the kernel's own terms of γ̃ (UHA: log N(p; 0, M))
        return jax.vmap(lambda s: forward.finish(s, resolved) - s.log_target)(states)

    def log_gamma(beta, states):
        x = states.position
        return beta * states.log_target + (1.0 - beta) * jax.vmap(path.initial_log_density)(x) + extra(states)

    def init_state(keys, x0, log_target0, target_grad0):
        kernel_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        states, log_w0 = jax.vmap(lambda k, x, v, g: forward.init(k, x, v, g, resolved))(
            kernel_keys, x0, log_target0, target_grad0
        )
        # log w_0 = [kernel's initial terms] − log π0(x_0) + log γ̃_0(s_0): zero for ULA and UHA.
        return states, log_w0 - jax.vmap(path.initial_log_density)(x0) + log_gamma(0.0, states)

    pop, _ = _initial_population(key_init, path, evaluate, num, init_state, refine_kernel, target.dim, sharding)
    steps = config.steps

    def one_step(pop: Population, inputs):
        k, delta, beta_prev, beta, step_key = inputs
        k_move, k_resample, k_refine = jax.random.split(step_key, 3)
        move_keys = shard(jax.random.split(k_move, num), sharding)
        states, log_forward, transition = jax.vmap(
            lambda kk, s: forward.step(kk, s, Step(k, beta, delta), path, resolved, evaluate)
        )(move_keys, pop.states)
        if context is not None:
            transition = transition._replace(context=jnp.broadcast_to(context, (num,) + context.shape))
        log_backward = jax.vmap(lambda t: backward.log_density(params.backward, t))(transition)
        increment = log_gamma(beta, states) - log_gamma(beta_prev, pop.states) + log_backward - log_forward
        pop = pop._replace(states=shard(states, sharding), log_w=pop.log_w + replicate(increment, sharding))
        ess = on_every_device(ess_fraction, sharding)(pop.log_w)
        do_resample = (ess < config.resample) & (k < steps)
        pop = jax.lax.cond(
            do_resample, lambda p: resample_population(p, k_resample, resampler, sharding), lambda p: p, pop
        )
        if refine_kernel is None:
            pop, acceptance, used = _no_refine(pop)
        else:
            do_refine = (do_resample if config.refine_every == "resample" else jnp.asarray(True)) & (k < steps)
            pop, acceptance, used = jax.lax.cond(
                do_refine,
                lambda p: refine_population(
                    p, k_refine, beta, refine_kernel, path, evaluate, config, adapt, sharding
                ),
                _no_refine,
                pop,
            )
        return pop, Trace(beta, ess, do_resample, acceptance, used)

    inputs = (
        jnp.arange(1, steps + 1),
        path.step_sizes,
        path.betas[:-1],
        path.betas[1:],
        jax.random.split(key_steps, steps),
    )
    pop, trace = jax.lax.scan(one_step, pop, inputs)
    drift = None
    if refine_kernel is not None:
        drift = stationarity(
            pop, jax.random.fold_in(key_steps, steps + 1), refine_kernel, path, evaluate, config, sharding
        )
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, jnp.asarray(steps, jnp.int32), trace, drift)


def _run_adaptive(key, params, target, config, num, adapt, sharding) -> SMCOutput:
    refine_kernel = registry.refine(config.refine)
    resampler = resampling.scheme(config.resampling)
    path = annealing.annealed_path(params.path, target, config)
    evaluate = jax.value_and_grad(target.log_density)
    key_init, key_steps = jax.random.split(key)

    def init_state(keys, x0, log_target0, target_grad0):
        return ULAState(x0, log_target0, target_grad0), jnp.zeros_like(log_target0)

    pop, _ = _initial_population(key_init, path, evaluate, num, init_state, refine_kernel, target.dim, sharding)
    cap = config.max_steps
    dtype = pop.log_w.dtype
    nan = jnp.full((cap,), jnp.nan, dtype)
    trace = Trace(nan, nan, jnp.zeros((cap,), bool), nan, nan, nan)

    def cond(carry):
        _, beta, k, _ = carry
        return (beta < 1.0) & (k < cap)

    def body(carry):
        pop, beta, k, trace = carry
        k_resample, k_refine = jax.random.split(jax.random.fold_in(key_steps, k))
        states = pop.states
        log_likelihood = states.log_target - jax.vmap(path.initial_log_density)(states.position)
        log_likelihood = replicate(jnp.where(jnp.isnan(log_likelihood), -jnp.inf, log_likelihood), sharding)
        beta_new = on_every_device(lambda *a: next_beta(*a, config.target_ess), sharding)(
            beta, pop.log_w, log_likelihood
        )
        increment = jnp.where(jnp.isneginf(log_likelihood), -jnp.inf, (beta_new - beta) * log_likelihood)
        pop = pop._replace(log_w=pop.log_w + increment)
        ess = on_every_device(ess_fraction, sharding)(pop.log_w)
        last = beta_new >= 1.0
        do_resample = (ess < config.resample + ESS_ROUNDING) & ~last
        pop = jax.lax.cond(
            do_resample, lambda p: resample_population(p, k_resample, resampler, sharding), lambda p: p, pop
        )
        before = pop.states.position
        pop, acceptance, used = jax.lax.cond(
            ~last,
            lambda p: refine_population(
                p, k_refine, beta_new, refine_kernel, path, evaluate, config, adapt, sharding
            ),
            _no_refine,
            pop,
        )
        correlation = jnp.where(last, jnp.nan, move_correlation(before, pop.states.position, pop.log_w))
        trace = Trace(
            trace.beta.at[k].set(beta_new),
            trace.ess.at[k].set(ess),
            trace.resampled.at[k].set(do_resample),
            trace.acceptance.at[k].set(acceptance),
            trace.step_size.at[k].set(used),
            trace.correlation.at[k].set(correlation.astype(dtype)),
        )
        return pop, beta_new, k + 1, trace

    carry = (pop, jnp.zeros((), dtype), jnp.zeros((), jnp.int32), trace)
    pop, beta, steps, trace = jax.lax.while_loop(cond, body, carry)
    drift = stationarity(pop, jax.random.fold_in(key_steps, cap + 1), refine_kernel, path, evaluate, config, sharding)
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, steps, trace, drift)


@functools.lru_cache(maxsize=16)
def compiled(
    target: Target, config: SamplerConfig, num: int, adapt: bool = True, sharding: Optional[NamedSharding] = None
) -> Callable:
    """`run` compiled for one target, configuration and population size: `(params, key) -> SMCOutput`.

    With `sharding` (`num` a multiple of its device count) the population is split over its mesh
    and the output is replicated, so every process holds it.
    """
    return jax.jit(
        lambda params, key: replicate(run(key, params, target, config, num, adapt, sharding=sharding), sharding)
    )
