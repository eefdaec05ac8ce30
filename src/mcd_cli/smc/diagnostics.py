"""What the moves did: how much they changed the population (`move_correlation`) and whether the
final population is at equilibrium (`stationarity`). Neither changes the estimate.

Example:
    >>> stationarity_moves(1), stationarity_moves(15)
    (20, 75)
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, RefineKernel
from mcd_cli.smc import adaptation
from mcd_cli.smc.sharding import replicate
from mcd_cli.smc.state import Population, Settings, normalised

# Moves made at β = 1 after the run, only to test whether the final population is at equilibrium:
# STATIONARITY_MOVES, or STATIONARITY_TEMPERATURES temperatures' worth of the run's own moves when
# that is more (`stationarity_moves`).
STATIONARITY_MOVES = 20
STATIONARITY_TEMPERATURES = 5
# A particle whose moves at β = 1 accepted less than STUCK_ACCEPTANCE on average over the test's
# moves is stuck: the step size that suits the rest of the population does not suit where it is.
STUCK_ACCEPTANCE = 0.05


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
        >>> float(move_correlation(jnp.zeros((1000, 3)), x, jnp.zeros(1000)))  # collapsed, then exact draws
        0.0
    """
    return jnp.mean(adaptation.coordinate_correlations(before, after, log_w))


def stationarity_moves(refine_steps):
    """Extra moves of the stationarity test for a run of `refine_steps` moves per refinement:
    `max(20, 5 · refine_steps)` (an int, or an array where the moves were measured).

    20 moves tell a population off equilibrium from one at it when each temperature made one to
    five moves. A run that makes many per temperature (adaptive tempering's default) has already
    made as many at each step, so a drift they did not remove needs more to show: five
    temperatures' worth (docs/method.md, "Stationarity of the final population").
    """
    if isinstance(refine_steps, int):
        return max(STATIONARITY_MOVES, STATIONARITY_TEMPERATURES * refine_steps)
    return jnp.maximum(STATIONARITY_MOVES, STATIONARITY_TEMPERATURES * refine_steps)


def measured_moves(moves: jax.Array, beta: jax.Array, steps: jax.Array) -> jax.Array:
    """The most moves a run whose moves were measured made at one temperature (`moves` and `beta`
    per step, `steps` of them used; the last step, at β = 1, makes none), at least 1: what the
    stationarity test's five temperatures' worth counts (`stationarity(moves=...)`)."""
    used = (jnp.arange(moves.shape[0]) < steps) & (beta < 1.0)
    return jnp.maximum(jnp.max(jnp.where(used, moves, 0)), 1).astype(jnp.int32)


# The stationarity test also evaluates the gradient at the final particles spread this much about
# their weighted mean: a correct target's gradient is finite wherever its density is.
GRADIENT_PROBE = 2.0


def stationarity(
    pop: Population,
    key: jax.Array,
    kernel: RefineKernel,
    path: AnnealedPath,
    evaluate: Callable,
    settings: Settings,
    sharding: Optional[NamedSharding] = None,
    moves: Optional[jax.Array] = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Is the final population at equilibrium? `(m, z, stuck, nonfinite, extra)`: the weighted mean
    change `m` of log γ(x) over `extra = stationarity_moves(settings.refine_steps)` refinement moves
    at β = 1 (`stationarity_moves(moves)` where the run measured its moves, `moves` the most it
    made at a temperature: `measured_moves`), `z = m / se(m)`, the weight of the particles whose
    moves accepted less than `STUCK_ACCEPTANCE` on average, and the share of the points `x̄ +
    GRADIENT_PROBE · (x_i − x̄)` (the particles spread about their weighted mean) where log γ is
    finite and its gradient is not.

    A γ-invariant kernel leaves E_γ[log γ(x)] unchanged, so a population that represents γ shows
    no drift beyond noise. One that the moves have not mixed (a funnel's neck never entered, a
    heavy tail never reached, modes reweighted but never visited) drifts as the extra moves carry
    it towards γ: its estimate carries a bias that neither the genealogy nor the spread of
    populations sees (each population is biased alike). The extra moves change nothing else:
    log Ẑ, the weights and the genealogy are those of the run.
    `se = sqrt(Σ w_i² (Δ_i − m)²)` treats the particles as independent; duplicates from the last
    resampling could make it somewhat small; runs that were right and exact draws stay well below
    `stats.STATIONARITY_WARN` (docs/method.md).
    Stuck particles are what a drift cannot show: where one step size cannot suit every region of
    γ (a funnel's neck), the particles there reject nearly every move, so they neither drift nor
    spread, and the region's mass is represented by too few of them (docs/method.md, "Stuck moves").
    A gradient that is not finite where the density is, is what neither can show: every move into
    such a region is rejected, so the particles never enter it and its mass is missing from Ẑ, with
    no drift, no stuck particle and light weights (a PyMC logistic regression whose float32
    gradient overflows: 10 nats low, `ok`). The particles themselves sit where the gradient is
    finite; the points around them show the region they were kept out of.
    """
    extra = settings._replace(refine_steps=stationarity_moves(settings.refine_steps))
    one = jnp.ones((), pop.log_w.dtype)
    params = pop.refine._replace(inv_mass=adaptation.weighted_variance(pop))
    moving = params._replace(inv_mass=adaptation.preconditioner(pop, kernel, extra, True))
    if moves is None:
        states, accepts = adaptation.move_population(pop, key, one, kernel, path, evaluate, moving, extra, sharding)
        per_particle = jnp.mean(accepts, axis=0)  # each particle's mean acceptance over the moves
        made = jnp.asarray(extra.refine_steps, jnp.int32)
    else:  # fewer moves, the same keys: `move_measured`'s i-th is `move_population`'s
        made = jnp.minimum(stationarity_moves(moves), extra.refine_steps).astype(jnp.int32)
        states, per_particle, _ = adaptation.move_measured(
            pop, key, one, kernel, path, evaluate, moving, extra, sharding, count=made
        )
    delta = replicate(states.log_target - pop.states.log_target, sharding)
    w = normalised(pop.log_w)
    x = pop.states.position
    centre = jnp.sum(jnp.where(w[:, None] > 0, w[:, None] * x, 0.0), axis=0)
    value, grad = jax.vmap(evaluate)(centre + GRADIENT_PROBE * (x - centre))
    nonfinite = jnp.mean((jnp.isfinite(value) & ~jnp.all(jnp.isfinite(grad), axis=-1)).astype(w.dtype))
    stuck = jnp.sum(jnp.where(replicate(per_particle, sharding) < STUCK_ACCEPTANCE, w, 0.0))
    finite = jnp.isfinite(delta) & (w > 0)
    delta = jnp.where(finite, delta, 0.0)
    w = jnp.where(finite, w, 0.0)
    w = w / jnp.maximum(jnp.sum(w), jnp.finfo(w.dtype).tiny)
    m = jnp.sum(w * delta)
    se = jnp.sqrt(jnp.sum(w * w * (delta - m) ** 2))
    return m, jnp.where(se > 0, m / jnp.where(se > 0, se, 1.0), 0.0), stuck, nonfinite, made

