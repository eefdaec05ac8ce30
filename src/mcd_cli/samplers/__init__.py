"""The four estimators: {ULA, UHA} forward kernels × {AIS, MCD} backward kernels.

Every sampler is a pair of pure functions, written for one particle:

- `init_params(key, target, config) -> params`
- `log_weight(key, params, target, config) -> (log_w, final_x)`

`log_weights` vmaps `log_weight` over particles.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from mcd_cli.config import SamplerConfig
    >>> from mcd_cli.targets import Target
    >>> target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    >>> config = SamplerConfig(sampler="uha", backward="mcd", steps=8, hidden=16)
    >>> params = init_params(jax.random.key(0), target, config)
    >>> log_weights(jax.random.key(1), params, target, config, 4).shape
    (4,)
"""

from __future__ import annotations

import jax

from mcd_cli.config import SamplerConfig
from mcd_cli.samplers import uha, ula
from mcd_cli.targets.base import Target

_SAMPLERS = {"ula": ula, "uha": uha}


def init_params(key: jax.Array, target: Target, config: SamplerConfig) -> dict:
    """Initial learnable parameters of the configured sampler (MCD starts equal to AIS)."""
    return _SAMPLERS[config.sampler].init_params(key, target, config)


def log_weight(
    key: jax.Array, params: dict, target: Target, config: SamplerConfig
) -> tuple[jax.Array, jax.Array]:
    """Log importance weight and final position of one particle."""
    return _SAMPLERS[config.sampler].log_weight(key, params, target, config)


def log_weights(
    key: jax.Array, params: dict, target: Target, config: SamplerConfig, num: int
) -> jax.Array:
    """Log importance weights of `num` independent particles, shape `(num,)`."""
    keys = jax.random.split(key, num)
    log_w, _ = jax.vmap(lambda k: log_weight(k, params, target, config))(keys)
    return log_w


__all__ = ["init_params", "log_weight", "log_weights", "ula", "uha"]
