"""The MCD backward kernel: the AIS reversal with its mean shifted by a learned score network.

`log B_{k-1} = log N(reverse; mean + score_scale · s̃_θ(k, score_input), scale²)`. The network's last
layer starts at zero, so at initialisation MCD gives exactly the AIS log weights (the warm start of
the paper's appendix).

With `SamplerConfig.learn_backward_variance` (not in the paper) the variance is learned too, one
factor per step: `scale_k² · exp(v_k)`, `v_k` starting at 0 (so the warm start is unchanged). The
paper keeps the AIS reversal's variance (2δ_k for ULA, (1 − h²)M for UHA), which is the optimal
backward kernel's only when the forward marginal is at equilibrium; away from it the mismatch
costs ELBO at every step that no score can recover (docs/method.md, "A learned backward variance").
Any normalised backward kernel keeps Ẑ unbiased, so this changes only how good the estimate is.
"""

from __future__ import annotations

import jax.numpy as jnp

from mcd_cli.kernels import score
from mcd_cli.kernels.base import BackwardKernel, Transition, gaussian_log_density
from mcd_cli.stats.reasons import Reason


def init_params(key, in_dim, out_dim, steps, config):
    """The residual score network of width `config.hidden`, output layer zero (conditioned on the
    datum's features when `config.context_dim > 0`), plus `log_var` (the v_k, shape `(K + 1,)`,
    zeros) with `config.learn_backward_variance`."""
    params = score.init(
        key, in_dim, out_dim, steps, config.hidden, config.time_dim, config.blocks, config.context_dim,
        config.score_linear,
    )
    if config.learn_backward_variance:
        params["log_var"] = jnp.zeros((steps + 1,))
    return params


def log_density(params, t: Transition):
    correction = score.apply(params, t.index, t.score_input, t.context)
    scale = t.scale * jnp.exp(0.5 * params["log_var"][t.index]) if "log_var" in params else t.scale
    return gaussian_log_density(t.reverse, t.mean + t.score_scale * correction, scale)


def param_count(in_dim, out_dim, config) -> float:
    """About as many parameters as the residual score network has."""
    h, t = config.hidden, config.time_dim
    linear = (config.steps + 1) * in_dim if config.score_linear else 0
    variance = config.steps + 1 if config.learn_backward_variance else 0
    return float(
        (in_dim + config.context_dim) * h + h * out_dim + config.blocks * (5 * h * h + 2 * t * h) + (config.steps + 1) * t
        + linear + variance
    )


def activations(config) -> float:
    """Numbers stored per particle and step for backpropagation through the network."""
    return float(10 * config.hidden * config.blocks + config.time_dim)


def warnings(dim, config) -> list[Reason]:
    """The network's output spans at most `hidden` directions: narrower than d limits MCD
    (`score_network_narrow`, worded by `mcd_cli.record.messages`)."""
    if config.hidden >= dim:
        return []
    return [Reason("score_network_narrow", {"hidden": int(config.hidden), "dim": int(dim)})]


KERNEL = BackwardKernel("mcd", "-MCD", True, init_params, log_density, param_count, activations, warnings)
