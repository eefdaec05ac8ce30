"""The kernel interface: what a forward kernel and a backward kernel are, as values.

The annealing loop (`mcd_cli.path.annealing`) moves one particle through K steps from `π0` to the
target `γ`, and its log weight accumulates `log B_{k-1} − log F_k` at every step:

- a **forward kernel** (`ula`, `uha`) is a pure function of one particle's state: at step k it draws
  the new state, returns `log F_k` of the draw and a `Transition` describing the Gaussian reversal
  the backward kernel scores; it evaluates the target's value and gradient exactly once, at the new
  position, and carries both to the next step (the cached-gradient trick);
- a **backward kernel** (`ais`, `mcd`) maps a `Transition` to `log B_{k-1}`: AIS scores the
  reversal as it is, MCD shifts its mean by a learned score network.

Both forward kernels reverse a Gaussian: ULA's backward density is over `x_{k-1}` given `x_k`, UHA's
over the momentum `p_{k-1}` given `(x_{k-1}, p̃_k)`. A `Transition` names the reversed variable, the
AIS mean and scale of its Gaussian, and where and how a learned correction enters the mean:
`mean + score_scale · s(k, score_input)`. So any forward kernel composes with any backward kernel.

Metropolis-corrected moves (`mala`, `hmc`) leave `γ_k` invariant and carry no transition density:
their incremental weight is 1. They are the third kind, a `RefineKernel`: a pure
`step(key, state, beta, path, evaluate, params, leapfrog) -> (state, acceptance probability)` that
the population sampler (`mcd_cli.smc`) runs after resampling (or after every step), and that never
enters the importance-weight ratio. It moves `state.position` and updates the cached
`state.log_target` and `state.target_grad`, so it works on the state of any forward kernel (UHA's
momentum is left as it is, which keeps `γ_k(x) N(p; 0, M)` invariant).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

Array = jax.Array
Params = Any
# `x -> (log γ(x), ∇log γ(x))`: the one target evaluation a step makes.
Evaluate = Callable[[Array], tuple[Array, Array]]


class Step(NamedTuple):
    """What the annealing loop hands a kernel at step k (one slice of the scanned inputs)."""

    index: Array  # k ∈ 1..K (int32)
    beta: Array  # β_k
    step_size: Array  # δ_k
    # Static: hold the trajectory fixed (the log-variance loss). The kernel then writes `log F` as
    # its density at the fixed new point, so parameters are differentiated at fixed points only.
    detach: bool = False


class AnnealedPath(NamedTuple):
    """Everything about the path `γ_0 = π0 → γ_K = γ` that does not depend on the particle.

    `log γ_k = β_k log γ + (1 − β_k) log π0` with `π0 = N(μ0, diag σ0²)`.
    """

    step_sizes: Array  # (K,)  δ_1 … δ_K
    betas: Array  # (K + 1,)  β_0 … β_K
    init_mean: Array  # (d,)
    init_scale: Array  # (d,)

    def sample_initial(self, key: Array) -> Array:
        """`x_0 ~ π0`, reparameterised."""
        return self.init_mean + self.init_scale * jax.random.normal(key, self.init_mean.shape)

    def initial_log_density(self, x: Array) -> Array:
        """`log π0(x)`."""
        return jnp.sum(norm.logpdf(x, self.init_mean, self.init_scale))

    def initial_grad(self, x: Array) -> Array:
        """`∇log π0(x)`, in closed form."""
        return -(x - self.init_mean) / self.init_scale**2

    def grad(self, beta: Array, x: Array, target_grad: Array) -> Array:
        """`∇log γ_k(x)` from the cached `∇log γ(x)`: no new target evaluation."""
        return beta * target_grad + (1.0 - beta) * self.initial_grad(x)


class Transition(NamedTuple):
    """One step's Gaussian reversal, to be scored by a backward kernel.

    The backward density is `N(reverse; mean + score_scale · s(index, score_input), scale²)`,
    coordinate-wise, where `s ≡ 0` is the AIS reversal. `context` (the datum's features, for a
    conditional target with an amortised score network) is set by the annealing loop, not by the
    forward kernel; None when the target is unconditional.
    """

    index: Array  # k
    reverse: Array  # the variable the backward kernel proposes (x_{k-1} for ULA, p_{k-1} for UHA)
    mean: Array  # its mean under the AIS reversal
    scale: Array  # its standard deviation (scalar or per coordinate)
    score_input: Array  # what a learned correction is conditioned on
    score_scale: Array  # how the correction enters the mean
    context: Optional[Array] = None  # the datum the correction is also conditioned on


def gaussian_log_density(value: Array, mean: Array, scale: Array) -> Array:
    """`Σ log N(value_i; mean_i, scale_i²)`."""
    return jnp.sum(norm.logpdf(value, mean, scale))


class ForwardKernel(NamedTuple):
    """A forward kernel: pure functions of one particle (see the module docstring).

    Attributes:
        name: registry name (`--sampler`).
        label: the estimator's name with the AIS backward kernel (`ULA`).
        init_params: `(key, dim, config) -> params` (a pytree; `()` when there is nothing to learn).
        prepare: `(params, dim) -> resolved`, per-trajectory quantities computed once, outside the
            scan over steps (e.g. UHA's damping and mass).
        init: `(key, x0, log_target0, target_grad0, resolved) -> (state, log_w0)`; `state` is a
            NamedTuple with at least `position` and `log_target`; `log_w0` holds the kernel's own
            initial terms (UHA: `−log N(p_0; 0, M)`), not `−log π0(x_0)`, which the loop adds.
        step: `(key, state, step, path, resolved, evaluate) -> (state, log_forward, transition)`;
            calls `evaluate` exactly once.
        finish: `(state, resolved) -> log_term`: `log γ(x_K)` plus the kernel's own final terms.
        score_input_dim: `dim -> ` size of `Transition.score_input`.
        state_size: `dim -> ` numbers per particle in the state (for the memory estimate).
        detachable: whether `step` honours `Step.detach` (a density at fixed points exists), so
            the log-variance loss with fixed trajectories can train it.
    """

    name: str
    label: str
    init_params: Callable
    prepare: Callable
    init: Callable
    step: Callable
    finish: Callable
    score_input_dim: Callable[[int], int]
    state_size: Callable[[int], int]
    detachable: bool = False


class RefineParams(NamedTuple):
    """The tuned quantities of a refinement move, adapted between steps from the particles."""

    step_size: Array  # ε
    inv_mass: Array  # (d,) diagonal preconditioner C = M⁻¹ (the particles' variance)


def annealed_log_density(path: AnnealedPath, beta: Array, x: Array, log_target: Array) -> Array:
    """`log γ_β(x) = β log γ(x) + (1 − β) log π0(x)` from the cached `log γ(x)`."""
    return beta * log_target + (1.0 - beta) * path.initial_log_density(x)


class RefineKernel(NamedTuple):
    """A Metropolis-corrected move that leaves `γ_β` invariant (incremental weight 1).

    Attributes:
        name: registry name (`--refine`).
        target_acceptance: the mean acceptance rate the step size is adapted towards.
        step: `(key, state, beta, path, evaluate, params, leapfrog) -> (state, acceptance)`, for
            one particle; `state` has `position`, `log_target` and `target_grad`.
        gradients: `leapfrog -> ` target gradients per move.
    """

    name: str
    target_acceptance: float
    step: Callable
    gradients: Callable[[int], int]


class BackwardKernel(NamedTuple):
    """A backward kernel: scores a forward kernel's `Transition`.

    Attributes:
        name: registry name (`--backward`).
        suffix: appended to the forward kernel's label (`""` for AIS, `"-MCD"`).
        trainable: whether it has parameters of its own (a score network) that training fits.
        init_params: `(key, in_dim, out_dim, steps, config) -> params`; must make the kernel equal
            to the AIS reversal at initialisation (the warm start).
        log_density: `(params, transition) -> log B_{k-1}`.
        param_count: `(in_dim, out_dim, config) -> ` approximate number of parameters.
        activations: `config -> ` approximate numbers stored per particle and step when training.
        warnings: `(dim, config) -> list[Reason]`, settings known to limit the kernel, as reason
            codes (`mcd_cli.stats.Reason`; `mcd_cli.record.messages` words them).
    """

    name: str
    suffix: str
    trainable: bool
    init_params: Callable
    log_density: Callable
    param_count: Callable
    activations: Callable
    warnings: Callable

