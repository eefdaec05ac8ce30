"""The MCD backward kernel: the AIS reversal with its mean shifted by a learned score network.

`log B_{k-1} = log N(reverse; mean + score_scale · s̃_θ(k, score_input), scale²)`. The network's last
layer starts at zero, so at initialisation MCD gives exactly the AIS log weights (the warm start of
the paper's appendix).
"""

from __future__ import annotations

from mcd_cli import score
from mcd_cli.kernels.base import BackwardKernel, Transition, gaussian_log_density


def init_params(key, in_dim, out_dim, steps, config):
    """The residual score network of width `config.hidden`, output layer zero (conditioned on the
    datum's features when `config.context_dim > 0`)."""
    return score.init(
        key, in_dim, out_dim, steps, config.hidden, config.time_dim, config.blocks, config.context_dim,
        config.score_linear,
    )


def log_density(params, t: Transition):
    correction = score.apply(params, t.index, t.score_input, t.context)
    return gaussian_log_density(t.reverse, t.mean + t.score_scale * correction, t.scale)


def param_count(in_dim, out_dim, config) -> float:
    """About as many parameters as the residual score network has."""
    h, t = config.hidden, config.time_dim
    linear = (config.steps + 1) * in_dim if config.score_linear else 0
    return float((in_dim + config.context_dim) * h + h * out_dim + config.blocks * (5 * h * h + 2 * t * h) + (config.steps + 1) * t + linear)


def activations(config) -> float:
    """Numbers stored per particle and step for backpropagation through the network."""
    return float(10 * config.hidden * config.blocks + config.time_dim)


def warnings(dim, config) -> list[str]:
    """The network's output spans at most `hidden` directions: narrower than d limits MCD."""
    if config.hidden >= dim:
        return []
    return [
        f"warning: the score network (--hidden {config.hidden}) is narrower than the target (d = {dim}): "
        f"its output spans at most {config.hidden} of {dim} directions, which limits MCD; use --hidden "
        f"{dim} or more (slower per iteration)"
    ]


KERNEL = BackwardKernel(
    name="mcd",
    suffix="-MCD",
    trainable=True,
    init_params=init_params,
    log_density=log_density,
    param_count=param_count,
    activations=activations,
    warnings=warnings,
)
