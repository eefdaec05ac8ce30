"""A heavier-tailed start: the chosen initial distribution given Tukey-h tails when they fit better.

A Gaussian start misses the mass of a target with heavier tails (a Student-t, a Laplace): the
importance weights of the start against the target then have a heavy right tail themselves, and
tempered SMC pays for it at every temperature (Pareto k̂ of the incremental weights near 0.5 or
above). `choose_tails` compares, by importance sampling with common draws, the start N(μ0, σ0²)
with its Tukey-h versions `x = μ0 + σ0 ⊙ u exp(h u²/2)`, u ~ N(0, I) (`targets.transforms`), for
h in `TAIL_GRID`, and keeps the one of highest ELBO `E_q[log γ − log q]` (the least KL(q ‖ π)) when
it beats the Gaussian's by more than `TAIL_GAIN` nats. Measured on the bundled targets (seed 0,
2,048 draws): student_t3 (d = 20) ELBO −1.37 → −0.07 at h = 0.2 (k̂ 0.75 → 0.35), laplace −1.43 →
−0.20 (k̂ 0.77 → 0.31); every Gaussian, mixture, funnel and flow target keeps its Gaussian start.

A start can also fit the body of the target almost exactly and still have weights of infinite
variance: a Gaussian fitted to a posterior with exponential tails, such as the logit of a Beta
posterior (any parameter on (0, 1) or (0, ∞) mapped to R has such tails), gives w = π/q growing
like exp(x²/2σ²) in q's tails, k = 1 however good the fit. Adaptive tempering cannot help there,
since a start that good reaches β = 1 in one step, so the final weights are these. When the
Gaussian's weights have k̂ above `PARETO_K_WARN` and no tail gains `TAIL_GAIN`, the lightest h
whose weights have k̂ at most `PARETO_K_WARN` is kept if it costs at most `TAIL_LOSS` nats of ELBO
(a defensive, heavier-tailed proposal, as in Hesterberg 1995). The cost grows with the number of
coordinates (every one gets the tail): on the textbook corpus (benchmarks/questions/
calibration_targets/corpus, seeds 0-3) the Gaussians' k̂ were 0.5-3.7 and h = 0.1 cost 0.12-0.42
nats (k̂ -1.7-0.36) on the normal, normal-inverse-gamma, beta-binomial, Dirichlet and regression
posteriors of d = 1-5, which a budget of 0.1 nats turned away from d = 2 on, leaving their runs
`unreliable`; eight schools (d = 10, k̂ 0.51) would pay 5.9 nats and keeps its Gaussian. A
nat of ELBO is what adaptive tempering absorbs in a temperature or two; an infinite-variance last
weighting no number of particles repairs. No calibration target's start changes (seed 0).

A tail on both sides can cost too much where the target's tail is exponential on one side and
lighter than Gaussian on the other: the log of a hierarchical scale (eight schools' log τ: its
lower tail, from the prior's density near τ = 0, is exponential; its upper one, where the group
effects' likelihood grows with τ², falls faster than any Gaussian). There h = 0.1 on every
coordinate cost 5.9 nats (seed 0), on log τ alone 4.5, and on log τ's lower side alone it *gained*
0.03 nats and took k̂ from 0.51 to 0.37. So when no symmetric h is kept and the Gaussian's k̂ is
above `PARETO_K_WARN` (and d ≤ `SIDES_MAX_DIM`), each of the 2d sides is tried alone with h =
`TAIL_GRID[0]`; those that lower k̂ at a cost under `SIDE_LOSS` are combined, and the combination
is kept when its k̂ is at most `PARETO_K_WARN` and it costs at most `TAIL_LOSS` (method
`…+tails(h=0.1, sides=-1)`: coordinate 1's lower side). Where the Gaussian's k̂ is at most
`PARETO_K_WARN` but above `SIDES_K_FLOOR` (the final weights near the threshold), the sides that gain
`SIDE_GAIN` nats without raising k̂ are combined and kept when together they do (eight schools' log
τ lower side gains 0.033-0.039 nats at every seed), and so are the sides that lower k̂ by
`SIDE_K_DROP` for at most `BAND_LOSS` nats (a Gamma posterior's log, whose lower tail is exponential:
on the corpus's Poisson-Gamma model the lower side costs 0.025-0.03 nats and takes k̂ from 0.31 to
-1.7, where the Gaussian's final weights had left one population of four at k̂ 0.63-0.69). The final
weights of adaptive tempering
inherit the start's tail: for a start whose weights have tail index k0, the last increment
Δβ = 1 − β' has tail index Δβ/(1/k0 − β'), which is 1 for k0 = 1 (a Gaussian against an
exponential tail) whatever the schedule, and below 0.5 for any k0 ≤ 0.5.

Where the Gaussian's k̂ is above `PARETO_K_WARN` because it misses the body's shape as well (a
diagonal fit to a hierarchical posterior, start ESS/N 0.03-0.1) no side alone lowers k̂ by
`SIDE_K_DROP`, though the exponential side is still there and the final weights inherit it: on the
corpus's centred hierarchical normal model (log τ's lower side, k̂ 0.6-0.97) the runs ended with
their populations' mean k̂ 0.52-0.56, `warn`, at seeds 1, 3, 4 and 5 of 0-7. So up to `GAIN_MAX_K`
(the k̂ at which the weights' mean stops existing: beyond it the start misses mass, not a tail)
sides that gain `SIDE_GAIN` nats are combined too and kept when together they do: log τ's lower
side gains 0.040-0.044 nats at every seed, and the runs' final k̄ fell to 0.21-0.34, all eight `ok`
(docs/method.md, "A side that fits better").
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

from mcd_cli.stats import pareto_k
from mcd_cli.stats.psis import PARETO_K_WARN
from mcd_cli.targets.base import Target
from mcd_cli.targets.transforms import tukey_h, tukey_log_jacobian

TAIL_GRID = (0.1, 0.2, 0.35, 0.5)  # h: tails as heavy as a Student-t with 10, 5, 2.9, 2 degrees of freedom
TAIL_GAIN = 0.25  # nats of ELBO a heavier tail must gain over the Gaussian start to be kept
TAIL_LOSS = 1.0  # nats of ELBO a heavier tail may cost when it alone makes the weights' variance finite
TAIL_SAMPLES = 2048
SIDES_MAX_DIM = 64  # the one-sided search evaluates 2d + 1 starts: up to this dimension
SIDE_LOSS = 0.5  # nats of ELBO one side may cost, alone, to be combined
SIDE_K_DROP = 0.05  # how much one side must lower k̂, alone, to be combined (common draws)
SIDE_GAIN = 0.01  # nats of ELBO one side must gain, alone, where the Gaussian's k̂ is in (SIDES_K_FLOOR, PARETO_K_WARN]
SIDES_K_FLOOR = 0.3  # below it the start's weights are light enough: no one-sided search
BAND_LOSS = 0.05  # nats of ELBO a side may cost, where the Gaussian's k̂ is in that band, when it lowers k̂ by SIDE_K_DROP
GAIN_MAX_K = 1.0  # up to this k̂ of the Gaussian's weights, sides that gain SIDE_GAIN nats are kept above PARETO_K_WARN too


class TailChoice(NamedTuple):
    """What `choose_tails` measured: the grid's h (0: the Gaussian), each one's ELBO and Pareto k̂,
    and the h chosen (0.0 when the Gaussian start is kept)."""

    h: float
    grid: tuple[float, ...]
    elbos: tuple[float, ...]
    pareto_ks: tuple[float, ...] = ()
    sides: tuple[str, ...] = ()  # a one-sided choice: "+i" / "−i" the upper / lower side of coordinate i (h on those only)
    sides_elbo: Optional[float] = None  # the one-sided combination's ELBO and k̂ (None: not tried)
    sides_k: Optional[float] = None


@functools.lru_cache(maxsize=16)
def _log_weights(target: Target):
    mu = jnp.asarray(target.initial_mean)
    sigma = jnp.asarray(target.initial_scale)
    log_det = jnp.sum(jnp.log(sigma))

    # `targets.transforms.heavy_tailed`'s log density, h traced (one compile per batch), and the
    # target's own constants (a fitted start's whitening) too: one program whatever the seed.
    def one(u, upper, lower, constants):
        h = jnp.where(u > 0, upper, lower)
        x = mu + sigma * tukey_h(u, h)
        return target.rebuilt(constants).log_density(x) + log_det + tukey_log_jacobian(u, h) - jnp.sum(norm.logpdf(u))

    return jax.jit(jax.vmap(jax.vmap(one, (0, None, None, None)), (None, 0, 0, None)))


def _measure(target: Target, u: jax.Array, upper: np.ndarray, lower: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ELBOs and k̂s of the starts with per-coordinate tails `upper`, `lower` (rows), on draws `u`."""
    upper, lower = jnp.asarray(upper, u.dtype), jnp.asarray(lower, u.dtype)
    log_w = np.asarray(_log_weights(target)(u, upper, lower, target.constants), np.float64)
    elbos = np.array([float(np.mean(w)) if np.all(np.isfinite(w)) else float("-inf") for w in log_w])
    ks = np.array([float(pareto_k(w)) if np.all(np.isfinite(w)) else float("inf") for w in log_w])
    return elbos, ks


def choose_tails(target: Target, key: jax.Array, num_samples: int = TAIL_SAMPLES) -> TailChoice:
    """The tail of the start of `target` (its declared initial distribution): see the module docstring.

    Example:
        >>> from mcd_cli.targets import Target
        >>> gauss = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=4)
        >>> choose_tails(gauss, jax.random.key(0)).h  # the start is exact: kept
        0.0
        >>> t3 = Target.create(lambda x: jnp.sum(jax.scipy.stats.t.logpdf(x, 3.0)), dim=10)
        >>> choose_tails(t3, jax.random.key(0)).h > 0
        True
    """
    grid = (0.0, *TAIL_GRID)
    d = target.dim
    u = jax.random.normal(key, (num_samples, d), jnp.result_type(float))
    rows = np.repeat(np.asarray(grid)[:, None], d, axis=1)
    elbo_arr, k_arr = _measure(target, u, rows, rows)
    elbos, ks = tuple(float(e) for e in elbo_arr), tuple(float(k) for k in k_arr)
    best = int(np.argmax(elbos))
    h = grid[best] if best and elbos[best] > elbos[0] + TAIL_GAIN else 0.0
    if not h and ks[0] > PARETO_K_WARN:
        bounded = [i for i in range(1, len(grid)) if ks[i] <= PARETO_K_WARN and elbos[i] >= elbos[0] - TAIL_LOSS]
        h = grid[bounded[0]] if bounded else 0.0
    if h or not ks[0] > SIDES_K_FLOOR or d > SIDES_MAX_DIM:
        return TailChoice(h, grid, elbos, ks)
    return _one_sided(target, u, TailChoice(0.0, grid, elbos, ks))


def _one_sided(target: Target, u: jax.Array, choice: TailChoice) -> TailChoice:
    """`choice` with a tail on some sides of some coordinates: where the Gaussian's k̂ is above
    `PARETO_K_WARN`, the sides that lower it at a small cost, kept when together they bound the
    weights; where it is at most `PARETO_K_WARN` (above `SIDES_K_FLOOR`), the sides that gain ELBO
    without raising it or lower it for at most `BAND_LOSS` nats, kept when together they do. See the module docstring."""
    d, h0 = target.dim, TAIL_GRID[0]
    upper, lower = np.zeros((2 * d, d)), np.zeros((2 * d, d))
    upper[np.arange(d), np.arange(d)] = h0  # rows 0 … d−1: coordinate i's upper side
    lower[d + np.arange(d), np.arange(d)] = h0  # rows d … 2d−1: its lower side
    elbos, ks = _measure(target, u, upper, lower)
    e0, k0 = choice.elbos[0], choice.pareto_ks[0]
    bound = k0 > PARETO_K_WARN  # else: light enough already, a side must fit better
    # Above PARETO_K_WARN but at most GAIN_MAX_K the start fits the body and its weights' k̂ is set
    # by more than one side (a diagonal start's missed correlations): a side that fits better is
    # kept though no side alone bounds the weights.
    gain_rule = bound and k0 <= GAIN_MAX_K
    if bound:
        helps = ((ks < k0 - SIDE_K_DROP) & (elbos >= e0 - SIDE_LOSS)) | (gain_rule & (elbos >= e0 + SIDE_GAIN))
    else:  # k̂ of weights this light moves by ±0.05 with the draws: not raised is enough to gain
        helps = ((ks <= k0) & (elbos >= e0 + SIDE_GAIN)) | ((ks < k0 - SIDE_K_DROP) & (elbos >= e0 - BAND_LOSS))
    if not helps.any():
        return choice

    def keeps(elbo: float, k: float) -> bool:
        if bound:
            return (k <= PARETO_K_WARN and elbo >= e0 - TAIL_LOSS) or (gain_rule and elbo >= e0 + SIDE_GAIN)
        return (k <= k0 and elbo >= e0 + SIDE_GAIN) or (k < k0 - SIDE_K_DROP and elbo >= e0 - BAND_LOSS)

    def name(i: int) -> str:
        return f"{'+' if i < d else '-'}{i % d}"

    upper_h, lower_h = upper[helps].sum(axis=0), lower[helps].sum(axis=0)
    elbo, k = (float(v[0]) for v in _measure(target, u, upper_h[None], lower_h[None]))
    if keeps(elbo, k):
        return choice._replace(h=h0, sides=tuple(name(i) for i in np.flatnonzero(helps)), sides_elbo=elbo, sides_k=k)
    better = elbos >= e0 + SIDE_GAIN  # those of the sides that fit better, where the others cost
    if gain_rule and better.any() and (better != helps).any():
        elbo_b, k_b = (float(v[0]) for v in _measure(target, u, upper[better].sum(0)[None], lower[better].sum(0)[None]))
        if keeps(elbo_b, k_b):
            return choice._replace(h=h0, sides=tuple(name(i) for i in np.flatnonzero(better)), sides_elbo=elbo_b, sides_k=k_b)
    # Together they cost too much (both sides of a coordinate whose upper tail is light): the one
    # side that alone lowers k̂ most, if it alone passes.
    best = int(np.flatnonzero(helps)[np.argmin(ks[helps])])
    if keeps(float(elbos[best]), float(ks[best])):
        return choice._replace(h=h0, sides=(name(best),), sides_elbo=float(elbos[best]), sides_k=float(ks[best]))
    return choice._replace(sides_elbo=elbo, sides_k=k)


def sided_tails(choice: TailChoice, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The per-coordinate h of the upper and lower sides that `choice` keeps (for `heavy_tailed`)."""
    if not choice.sides:
        return np.full(dim, choice.h), np.full(dim, choice.h)
    upper, lower = np.zeros(dim), np.zeros(dim)
    for side in choice.sides:
        (upper if side[0] == "+" else lower)[int(side[1:])] = choice.h
    return upper, lower


def describe(choice: TailChoice) -> Optional[str]:
    """The suffix of `init_method` for a heavier tail (`+tails(h=0.2)`, `+tails(h=0.1, sides=-1,+3)`),
    None for the Gaussian."""
    if not choice.h:
        return None
    return f"+tails(h={choice.h:g}, sides={','.join(choice.sides)})" if choice.sides else f"+tails(h={choice.h:g})"


