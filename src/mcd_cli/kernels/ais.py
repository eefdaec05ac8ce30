"""The AIS backward kernel: the forward kernel's own Gaussian reversal, with nothing learned."""

from __future__ import annotations

from mcd_cli.kernels.base import BackwardKernel, Transition, gaussian_log_density


def log_density(params, t: Transition):
    """`log B_{k-1}`: the reversal's Gaussian density at the reversed variable."""
    return gaussian_log_density(t.reverse, t.mean, t.scale)


KERNEL = BackwardKernel(
    name="ais",
    suffix="",
    trainable=False,
    init_params=lambda key, in_dim, out_dim, steps, config: (),
    log_density=log_density,
    param_count=lambda in_dim, out_dim, config: 0.0,
    activations=lambda config: 0.0,
    warnings=lambda dim, config: [],
)
