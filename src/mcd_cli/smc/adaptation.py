"""Refinement: Metropolis-corrected moves of the whole population at β, tuned from the particles.

The moves (`kernels.mala`, `kernels.hmc`) leave `γ_β` invariant, so their incremental weight is 1.
Between steps their diagonal preconditioner is set to the particles' weighted variance and their
step size moves towards the kernel's target acceptance rate (`refine_population` with `adapt`).
With adaptive tempering, HMC's moves use the particles' full weighted covariance instead
(`dense_factor`) when the population is large enough to estimate it.
Choices made from the particles add a small bias to Ẑ; without `adapt` the kernels are fixed and
Ẑ is exactly unbiased on a fixed schedule (docs/method.md).

Example:
    >>> from mcd_cli.kernels import hmc
    >>> float(initial_refine_params(hmc.KERNEL, 16, jnp.float32).step_size)
    0.5
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, RefineKernel, RefineParams
from mcd_cli.smc.sharding import shard
from mcd_cli.smc.state import Population, Settings, normalised

# Step-size adaptation: ε ← ε · exp(ADAPT_RATE · (acceptance − target)), bounded per step.
ADAPT_RATE = 2.0
MIN_VARIANCE = 1e-8
# Adaptive tempering's HMC moves are preconditioned by the particles' full weighted covariance
# (`dense_factor`) when a population has at least DENSE_PER_DIM particles per dimension and at most
# DENSE_MAX_DIM dimensions (its d² products per leapfrog step stay small beside a gradient); else by
# their variance. Where the target's coordinates are correlated the step size is bounded by the
# stiffest direction of the preconditioned target, which a dense preconditioner widens: on
# nice_flow (d = 16) the largest Hessian eigenvalue, preconditioned, falls from 757 to 440 (median
# over exact draws), and 15 moves of 15 leapfrog steps went from 2 of 4 seeds `ok` (median move
# correlation 0.20-0.32) to 4 of 4 (0.15-0.27).
DENSE_KERNELS = frozenset({"hmc"})
DENSE_PER_DIM = 10
# 64, not more: on nice_mnist (d = 196) the dense products took a calibration run from 219 s to
# 454 s (same two-process load), against a gradient of a small flow; its diagonal runs were `ok`.
DENSE_MAX_DIM = 64
DENSE_JITTER = 1e-6  # added to the correlation matrix's diagonal before its Cholesky factor
# Moves by measurement (docs/method.md, "Moves by measurement"): where set, adaptive tempering's
# adapting refinement stops moving at a temperature once every coordinate's correlation across the
# particles with its value before the moves (`coordinate_correlations`) is at most MOVE_STOP in
# absolute value, after at least MIN_MOVES moves and at most `settings.refine_steps` (the effort's
# cap); a replay makes the moves its tuning run made at each step (`Tempering.moves`), so its Ẑ
# stays exactly unbiased. None: always `settings.refine_steps` moves. Off: measured on the
# calibration at ρ = 0.2 (session 46, 108 paired runs: 101 against 103 `ok` and covering, gauss_narrow
# 1 of 4 against 3, the median wall time unchanged; docs/method.md, "Moves by measurement").
MOVE_STOP: Optional[float] = None
MIN_MOVES = 2

# `(population, key, β, moves) -> (population, acceptance, RefineParams used, moves made)`: a
# refinement at β; `moves` (None: the refinement's own rule) is the count a replay makes.
Refine = Callable[..., tuple[Population, jax.Array, jax.Array, jax.Array]]


def initial_refine_params(kernel: Optional[RefineKernel], dim: int, dtype) -> RefineParams:
    """Starting step size: `d^{-1/3}` for MALA-like moves (and without a kernel), `d^{-1/4}` for HMC
    (their optimal scalings); unit preconditioner."""
    power = 1.0 / 3.0 if kernel is None or kernel.gradients(2) == 1 else 0.25
    return RefineParams(jnp.asarray(dim ** (-power), dtype), jnp.ones((dim,), dtype))


def weighted_variance(pop: Population) -> jax.Array:
    """The particles' weighted variance per coordinate (at least `MIN_VARIANCE`): the preconditioner."""
    x = pop.states.position
    w = normalised(pop.log_w)[:, None]
    mean = jnp.sum(w * x, axis=0)
    return jnp.maximum(jnp.sum(w * (x - mean) ** 2, axis=0), MIN_VARIANCE)


def dense_factor(pop: Population) -> jax.Array:
    """The lower Cholesky factor `L` of the particles' weighted covariance `C = L Lᵀ`, (d, d), as
    `diag(σ) · chol(R)` with `σ²` the weighted variance (`weighted_variance`) and `R` the correlation
    matrix (scale free, so float32 factors it whatever the coordinates' scales); `diag(σ)` (the
    diagonal preconditioner) where that factor is not finite.

    Example:
        >>> from mcd_cli.smc.state import Population
        >>> x = jnp.array([[1.0, 3.0], [-1.0, -3.0], [1.0, 1.0], [-1.0, -1.0]])
        >>> states = type("S", (), {"position": x})()
        >>> pop = Population(states, jnp.zeros(4), 0.0, None, None, None)
        >>> dense_factor(pop).round(3).tolist()  # σ = (1, √5), correlation 2/√5
        [[1.0, 0.0], [2.0, 1.0]]
    """
    x = pop.states.position
    w = normalised(pop.log_w)[:, None]
    sd = jnp.sqrt(weighted_variance(pop))
    z = (x - jnp.sum(w * x, axis=0)) / sd
    corr = (w * z).T @ z
    corr = corr + DENSE_JITTER * jnp.eye(x.shape[1], dtype=x.dtype)
    factor = sd[:, None] * jnp.linalg.cholesky(corr)
    return jnp.where(jnp.all(jnp.isfinite(factor)), factor, jnp.diag(sd))


def uses_dense(pop: Population, kernel: RefineKernel, settings: Settings, adapt: bool) -> bool:
    """Do this refinement's moves use the dense preconditioner (`dense_factor`)? With `adapt`, on
    the adaptive schedule, for a kernel of `DENSE_KERNELS` and a population of at least
    `DENSE_PER_DIM` particles per dimension in at most `DENSE_MAX_DIM` dimensions. (A fixed
    schedule's refinement keeps the diagonal one: its tuning may be frozen as a variance.)"""
    num, dim = pop.states.position.shape[-2:]
    return (
        adapt and settings.adaptive and kernel.name in DENSE_KERNELS
        and dim <= DENSE_MAX_DIM and num >= DENSE_PER_DIM * dim
    )


def preconditioner(pop: Population, kernel: RefineKernel, settings: Settings, adapt: bool) -> jax.Array:
    """The preconditioner a refinement of `pop` moves with: the particles' weighted covariance
    factor (`dense_factor`) when `uses_dense`, their weighted variance when `adapt`, else the
    population's own (`pop.refine.inv_mass`, e.g. frozen from a tuning run)."""
    if uses_dense(pop, kernel, settings, adapt):
        return dense_factor(pop)
    return weighted_variance(pop) if adapt else pop.refine.inv_mass


def coordinate_correlations(before: jax.Array, after: jax.Array, log_w: jax.Array) -> jax.Array:
    """Each coordinate's weighted correlation across particles between its values `before` and
    `after` some moves, (d,): 0 when the moves gave fresh draws, 1 when they hardly moved it. A
    coordinate at one value before and spread after was moved as far as it can be (a collapsed
    population after an exact move): 0; one that ends at one value did not mix: 1. A variance below
    the rounding of the coordinate's values (64 units in the last place of its root mean square) is
    a population at one value.

    Example:
        >>> x = jax.random.normal(jax.random.key(0), (1000, 2))
        >>> fresh = x.at[:, 1].set(jax.random.normal(jax.random.key(1), (1000,)))  # the second redrawn
        >>> jnp.abs(coordinate_correlations(x, fresh, jnp.zeros(1000))).round(1).tolist()
        [1.0, 0.0]
    """
    w = normalised(log_w)[:, None]
    a = before - jnp.sum(w * before, axis=0)
    b = after - jnp.sum(w * after, axis=0)
    cov = jnp.sum(w * a * b, axis=0)
    eps = (64 * jnp.finfo(a.dtype).eps) ** 2
    spread_a = jnp.sum(w * a * a, axis=0) > eps * jnp.sum(w * before * before, axis=0)
    spread_b = jnp.sum(w * b * b, axis=0) > eps * jnp.sum(w * after * after, axis=0)
    scale = jnp.sqrt(jnp.sum(w * a * a, axis=0) * jnp.sum(w * b * b, axis=0))
    correlation = cov / jnp.where(spread_a & spread_b, scale, 1.0)
    return jnp.where(spread_a & spread_b, correlation, jnp.where(spread_b, 0.0, 1.0))


def measures_moves(settings: Settings, adapt: bool) -> bool:
    """Does an adapting refinement of these settings choose its number of moves (`MOVE_STOP`)?
    Adaptive tempering only, where it adapts (its tuning run; a replay makes the recorded moves)."""
    return MOVE_STOP is not None and adapt and settings.adaptive


def move_all(
    pop: Population, beta: jax.Array, kernel: RefineKernel, path: AnnealedPath, evaluate: Callable,
    moving: RefineParams, settings: Settings, sharding: Optional[NamedSharding] = None,
) -> Callable[[Any, jax.Array], tuple[Any, jax.Array]]:
    """`(states, key) -> (states, acceptance (N,))`: one move of every particle of `pop`'s size at β
    with the parameters `moving`, particle i with key i of `split(key, N)`."""
    num = pop.log_w.shape[0]

    def one_move(states, move_key):
        keys = shard(jax.random.split(move_key, num), sharding)
        states, accept = jax.vmap(
            lambda k, s: kernel.step(k, s, beta, path, evaluate, moving, settings.leapfrog)
        )(keys, states)
        return shard(states, sharding), accept

    return one_move


def move_measured(
    pop: Population, key: jax.Array, beta: jax.Array, kernel: RefineKernel, path: AnnealedPath, evaluate: Callable,
    moving: RefineParams, settings: Settings, sharding: Optional[NamedSharding] = None,
    count: Optional[jax.Array] = None,
) -> tuple[Any, jax.Array, jax.Array]:
    """Moves of every particle at β with the parameters `moving`, under `lax.while_loop`: `count`
    of them (a replay's recorded number, or the stationarity test's), or (None) until every
    coordinate's correlation with its value before the moves is at most `MOVE_STOP` in absolute
    value, after at least `MIN_MOVES`, at most `settings.refine_steps`. Move i draws key i of
    `split(key, settings.refine_steps)`, as `move_population`'s i-th move does. `(the moved states,
    each particle's mean acceptance (N,), the moves made)`."""
    keys = jax.random.split(key, settings.refine_steps)
    one_move = move_all(pop, beta, kernel, path, evaluate, moving, settings, sharding)
    dtype = pop.log_w.dtype

    def body(carry):
        i, states, accepted, _ = carry
        states, accept = one_move(states, keys[i])
        if count is None:
            moved = jnp.max(jnp.abs(coordinate_correlations(pop.states.position, states.position, pop.log_w)))
        else:
            moved = jnp.zeros((), dtype)
        return i + 1, states, accepted + accept.astype(dtype), moved.astype(dtype)

    def cond(carry):
        i, _, _, moved = carry
        if count is not None:
            return i < count
        return (i < settings.refine_steps) & ((i < MIN_MOVES) | (moved > MOVE_STOP))

    start = (jnp.zeros((), jnp.int32), pop.states, jnp.zeros(pop.log_w.shape, dtype), jnp.ones((), dtype))
    made, states, accepted, _ = jax.lax.while_loop(cond, body, start)
    return states, accepted / jnp.maximum(made, 1).astype(dtype), made


def move_population(
    pop: Population, key: jax.Array, beta: jax.Array, kernel: RefineKernel, path: AnnealedPath, evaluate: Callable,
    moving: RefineParams, settings: Settings, sharding: Optional[NamedSharding] = None,
) -> tuple[jax.Array, jax.Array]:
    """`settings.refine_steps` moves of every particle at β with the parameters `moving`: the
    moved states and every move's acceptance probability, (moves, N)."""
    one_move = move_all(pop, beta, kernel, path, evaluate, moving, settings, sharding)
    return jax.lax.scan(one_move, pop.states, jax.random.split(key, settings.refine_steps))


def refine_population(
    pop: Population,
    key: jax.Array,
    beta: jax.Array,
    kernel: RefineKernel,
    path: AnnealedPath,
    evaluate: Callable,
    settings: Settings,
    adapt: bool,
    sharding: Optional[NamedSharding] = None,
    moves: Optional[jax.Array] = None,
) -> tuple[Population, jax.Array, jax.Array, jax.Array]:
    """Metropolis moves of every particle at β: `(population, acceptance, the step size and
    preconditioner the moves used, the moves made)`. `settings.refine_steps` moves, or as many as
    `measures_moves` measures (`move_measured`), or `moves` (a replay's recorded count).

    Before the moves the preconditioner is set to the particles' weighted variance; after them the
    step size moves towards the kernel's target acceptance (when `adapt`). Both are means over the
    whole population, also when `sharding` splits it over devices. When `uses_dense`, the moves are
    preconditioned by the weighted covariance's Cholesky factor (`dense_factor`) instead; the
    population keeps the variance as its `inv_mass` either way.
    """
    params = pop.refine
    if adapt:
        params = params._replace(inv_mass=weighted_variance(pop))
    moving = params._replace(inv_mass=preconditioner(pop, kernel, settings, adapt))
    if moves is not None or measures_moves(settings, adapt):
        states, accepts, made = move_measured(pop, key, beta, kernel, path, evaluate, moving, settings, sharding, moves)
        acceptance = jnp.mean(accepts)
    else:
        states, accepts = move_population(pop, key, beta, kernel, path, evaluate, moving, settings, sharding)
        acceptance = jnp.mean(jnp.mean(accepts, axis=1))  # each move's mean, then their mean
        made = jnp.asarray(settings.refine_steps, jnp.int32)
    if adapt:
        factor = jnp.exp(jnp.clip(ADAPT_RATE * (acceptance - kernel.target_acceptance), -1.0, 1.0))
        params = params._replace(step_size=params.step_size * factor)
    return pop._replace(states=states, refine=params), acceptance, moving, made


def build_refine(
    kernel: RefineKernel, path: AnnealedPath, evaluate: Callable, settings: Settings, adapt: bool,
    sharding: Optional[NamedSharding] = None,
) -> Refine:
    """The refinement as a value `(population, key, β, moves=None) -> (population, acceptance,
    RefineParams used, moves made)`.

    `refine_population` is looked up in this module when the refinement runs, so a study may swap
    it for a variant (benchmarks/results/estimators.md, module refine_adaptation).
    """
    def refine(pop: Population, key: jax.Array, beta: jax.Array, moves: Optional[jax.Array] = None):
        return refine_population(pop, key, beta, kernel, path, evaluate, settings, adapt, sharding, moves)

    return refine
