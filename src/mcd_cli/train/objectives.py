"""Training objectives: a batch of log weights -> the scalar that training minimises.

An objective sees the whole batch, so it may couple the particles (the log-variance loss does);
it is not assumed to be a mean of per-particle losses. It also says how the log weights are to be
differentiated:

- `elbo`: `−mean(log w)`, the negative evidence lower bound (the paper's objective), differentiated
  through the reparameterised trajectories (backpropagation through all K steps, and through the
  target's gradient at every step: Hessian–vector products of log γ).
- `logvar`: `var(log w)`, the log-variance loss (Richter et al. 2020; used by CMCD and Sequential
  Controlled Langevin Diffusions), with the trajectories held fixed: the particles are simulated
  with the current parameters, then `log w_θ(τ)` is differentiated at the fixed points `τ` (the
  forward and backward kernels' log densities there). No derivative flows along the trajectory
  or through the target's gradient, so an update costs a forward pass and K local derivatives.
  The loss is zero exactly when every weight is equal, i.e. when the sampler's path measure
  matches the target's; its gradient at fixed `τ` is that of `Var_{τ∼Q_ref}[log w_θ(τ)]` with
  the reference `Q_ref` the current forward process. It needs a forward kernel with a density at
  fixed points (`ForwardKernel.detachable`: ULA; UHA's leapfrog is a deterministic map of the
  learned step size and mass, so its path density at a fixed trajectory is not defined).

Example:
    >>> import jax.numpy as jnp
    >>> float(elbo(jnp.array([-1.0, -3.0]))), float(log_variance(jnp.array([-1.0, -3.0])))
    (2.0, 1.0)
    >>> OBJECTIVES["logvar"].detach, OBJECTIVES["elbo"].detach
    (True, False)
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Union

import jax
import jax.numpy as jnp

Loss = Callable[[jax.Array], jax.Array]


class Objective(NamedTuple):
    """A loss of the batch's log weights, and whether the trajectories are held fixed (`detach`)."""

    name: str
    loss: Loss
    detach: bool = False

    def __call__(self, log_w: jax.Array) -> jax.Array:
        return self.loss(log_w)


def elbo(log_w: jax.Array) -> jax.Array:
    """Negative ELBO of the batch, `−mean(log w)`."""
    return -jnp.mean(log_w)


def log_variance(log_w: jax.Array) -> jax.Array:
    """Variance of the batch's log weights (population variance, `mean((log w − mean)²)`)."""
    return jnp.var(log_w)


OBJECTIVES: dict[str, Objective] = {
    "elbo": Objective("elbo", elbo, detach=False),
    "logvar": Objective("logvar", log_variance, detach=True),
}


def as_objective(objective: Union[Objective, Loss, str]) -> Objective:
    """An `Objective` from a name, an `Objective`, or a plain loss (differentiated through the trajectories)."""
    if isinstance(objective, Objective):
        return objective
    if isinstance(objective, str):
        return OBJECTIVES[objective]
    return Objective(getattr(objective, "__name__", "custom"), objective, detach=False)
