"""NICE-style flow with fixed random weights: a non-Gaussian target with log Z = 0 exactly, any dim.

The flow maps z ~ N(0, I) to x through `layers` additive coupling layers (Dinh et al., 2015, "NICE"):
each layer permutes the coordinates with a fixed random permutation, splits them into halves
(x_a, x_b) and shifts x_b by an MLP of x_a, `x_b + W2 tanh(W1 x_a + b1)`. Permutations and additive
couplings are volume preserving (Jacobian determinant 1), so the density of x is the standard normal
density of the inverse map, `log p(x) = log N(f⁻¹(x); 0, I)`, and it is normalised: log Z = 0.

All weights are drawn once from `numpy.random.default_rng(seed)`:
    W1 ~ N(0, weight_scale² / |x_a|), b1 ~ N(0, 1), W2 ~ N(0, weight_scale² / hidden).

Parameters (set with `--param key=value`): dim, layers, hidden, seed, weight_scale.
"""

import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm


def _layers(dim, layers, hidden, seed, weight_scale):
    rng = np.random.default_rng(seed)
    a = dim // 2
    out = []
    for _ in range(layers):
        perm = rng.permutation(dim)
        w1 = rng.normal(0.0, weight_scale / np.sqrt(a), size=(hidden, a))
        b1 = rng.normal(0.0, 1.0, size=hidden)
        w2 = rng.normal(0.0, weight_scale / np.sqrt(hidden), size=(dim - a, hidden))
        out.append((perm, np.argsort(perm), w1, b1, w2))
    return out


def make_target(dim=16, layers=4, hidden=32, seed=0, weight_scale=2.0):
    if dim < 2:
        raise ValueError(f"nice_flow needs dim >= 2, got {dim}")
    if layers < 1 or hidden < 1:
        raise ValueError("nice_flow needs layers >= 1 and hidden >= 1")
    a = dim // 2
    weights = _layers(dim, layers, hidden, seed, weight_scale)

    def inverse(x):
        for _, unperm, w1, b1, w2 in reversed(weights):
            xa, xb = x[:a], x[a:]
            xb = xb - w2 @ jnp.tanh(w1 @ xa + b1)
            x = jnp.concatenate([xa, xb])[unperm]
        return x

    def log_density(x):
        return jnp.sum(norm.logpdf(inverse(x)))

    return {
        "log_density": log_density,
        "dim": dim,
        "log_z": 0.0,
        "name": "nice_flow",
        "description": (
            f"NICE flow, {layers} additive couplings with fixed random weights (seed {seed}), "
            f"in {dim} dimensions"
        ),
    }


def forward(z, dim=16, layers=4, hidden=32, seed=0, weight_scale=2.0):
    """Maps a standard normal draw z (shape (dim,)) to an exact sample of the target."""
    a = dim // 2
    for perm, _, w1, b1, w2 in _layers(dim, layers, hidden, seed, weight_scale):
        x = z[perm]
        xa, xb = x[:a], x[a:]
        z = jnp.concatenate([xa, xb + w2 @ jnp.tanh(w1 @ xa + b1)])
    return z
