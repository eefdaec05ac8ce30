"""NICE flows on downsampled MNIST digits: preprocessing, the flow, its density and its weights file.

Shared by the bundled target `nice_mnist.py` and the training script
`targets/data/train_nice_mnist.py` (the leading underscore keeps this module out of `mcd targets`).

**Preprocessing** (fixed; the paper does not state its own). From the uint8 28 × 28 images:

1. downsample to `size` × `size` (7, 14 or 28) by averaging non-overlapping blocks of
   (28 / size)² pixels and rounding to the nearest grey level (uint8 again);
2. dequantise: `v = (g + u) / 256` with `u ~ U(0, 1)` per pixel, so `v ∈ (0, 1)` has a density;
3. logit: `y = logit(α + (1 − 2α) v)` with `α = 10⁻⁶` (as MAF on MNIST, Papamakarios et al.
   2017), so `y ∈ (−13.8, 13.8)`; a blank pixel's `y` spreads over about one unit (the logit
   of `u / 256`), which keeps the density smooth enough for Langevin steps (α = 0.05 would
   squeeze it into a 0.07-wide box);
4. standardise: `x = (y − m) / s` with each pixel's mean `m` and standard deviation `s` over the
   training images (one dequantisation draw, seed 0), stored in the weights file.

The target is the flow's density of `x`, the space it was trained in. Every step after 2. is a fixed
bijection, so the flow's density is normalised there: log Z = 0 exactly.

**Flow** (NICE, Dinh, Krueger & Bengio 2015): 4 additive coupling layers and a diagonal rescaling.
Pixels are split by a checkerboard; coupling `l` shifts the pixels of parity `(l + 1) mod 2` by an
MLP of the others (`x_b ← x_b + m_l(x_a)`, alternating the roles), then `h = x ⊙ exp(s)`. Each `m_l`
has two hidden layers of `hidden` units with the swish activation (smooth, so the target's gradient
is continuous; NICE used ReLU). The base distribution is the standard normal, N(0, I) (NICE used a
logistic; the normal's lighter tails keep importance-sampling checks of log Z well behaved). So

    log p(x) = Σ_i log N(h_i; 0, 1) + Σ_i s_i,   h = f(x),

the couplings having unit Jacobian determinant.

Example:
    >>> import jax, jax.numpy as jnp
    >>> params = init_flow(jax.random.key(0), dim=49, hidden=8)
    >>> x = jnp.linspace(-1.0, 1.0, 49)
    >>> bool(jnp.allclose(from_latent(params, to_latent(params, x)), x, atol=1e-5))
    True
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

DATA = Path(__file__).resolve().parent / "data"
DIGITS = DATA / "mnist_5k.npz"
SIZES = (7, 14, 28)
ALPHA = 1e-6
LAYERS = 4
HIDDEN = {7: 128, 14: 256, 28: 512}
TRAIN_SCRIPT = "targets/data/train_nice_mnist.py"


def weights_path(size: int) -> Path:
    """Where the trained flow for `size` × `size` images is stored."""
    return DATA / f"nice_mnist_{size}.npz"


def load_digits() -> dict[str, np.ndarray]:
    """The 5,000 bundled digits: `images` uint8 (5000, 28, 28), `labels`, `test` (bool mask)."""
    with np.load(DIGITS) as f:
        return {k: f[k] for k in ("images", "labels", "test")}


def downsample(images: np.ndarray, size: int) -> np.ndarray:
    """Averages (28 / size)² blocks of uint8 28 × 28 images and rounds: uint8 (n, size, size).

    Example:
        >>> downsample(np.full((1, 28, 28), 7, np.uint8), 7).shape
        (1, 7, 7)
    """
    block = 28 // size
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size}")
    pooled = images.reshape(-1, size, block, size, block).astype(np.float64).mean(axis=(2, 4))
    return np.rint(pooled).astype(np.uint8)


def logit_pixels(key: jax.Array, grey: jax.Array) -> jax.Array:
    """Steps 2–3 of the preprocessing: dequantised grey levels in logit space, same shape."""
    u = jax.random.uniform(key, grey.shape)
    v = (grey.astype(jnp.float32) + u) / 256.0
    return jax.scipy.special.logit(ALPHA + (1.0 - 2.0 * ALPHA) * v)


def checkerboard(size: int) -> np.ndarray:
    """Parity `(row + column) mod 2` of each pixel of a flattened size × size image."""
    r, c = np.indices((size, size))
    return ((r + c) % 2).reshape(-1)


def _dense(key, n_in, n_out, zero=False):
    w = jnp.zeros((n_in, n_out)) if zero else jax.random.normal(key, (n_in, n_out)) / np.sqrt(n_in)
    return {"w": w, "b": jnp.zeros(n_out)}


def init_flow(key: jax.Array, dim: int, hidden: int, layers: int = LAYERS) -> dict:
    """Initial parameters: each coupling's last layer is zero, so the flow starts as the identity."""
    couplings = []
    n_a = [int(dim - dim // 2), int(dim // 2)]  # parity 0 holds the extra pixel of an odd dim
    for layer, k in enumerate(jax.random.split(key, layers)):
        cond, upd = (n_a[1], n_a[0]) if layer % 2 == 0 else (n_a[0], n_a[1])
        k1, k2 = jax.random.split(k)
        couplings.append([_dense(k1, cond, hidden), _dense(k2, hidden, hidden),
                          _dense(None, hidden, upd, zero=True)])
    return {"couplings": couplings, "log_scale": jnp.zeros(dim)}


def _split(dim: int):
    size = int(round(np.sqrt(dim)))
    parity = checkerboard(size) if size * size == dim else np.arange(dim) % 2
    return np.flatnonzero(parity == 0), np.flatnonzero(parity == 1)


def _mlp(layers, x):
    for layer in layers[:-1]:
        x = jax.nn.swish(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def _roles(layer: int, even: np.ndarray, odd: np.ndarray):
    """(conditioning pixels, updated pixels) of coupling `layer`: even layers update parity 0."""
    return (odd, even) if layer % 2 == 0 else (even, odd)


def to_latent(params: dict, x: jax.Array) -> jax.Array:
    """The flow f: a point x (shape (dim,)) to its latent h = f(x)."""
    even, odd = _split(x.shape[-1])
    for layer, mlp in enumerate(params["couplings"]):
        cond, upd = _roles(layer, even, odd)
        x = x.at[upd].add(_mlp(mlp, x[cond]))
    return x * jnp.exp(params["log_scale"])


def from_latent(params: dict, h: jax.Array) -> jax.Array:
    """The inverse flow f⁻¹: a latent h (shape (dim,)) to the point x."""
    even, odd = _split(h.shape[-1])
    x = h * jnp.exp(-params["log_scale"])
    for layer in reversed(range(len(params["couplings"]))):
        cond, upd = _roles(layer, even, odd)
        x = x.at[upd].add(-_mlp(params["couplings"][layer], x[cond]))
    return x


def log_prob(params: dict, x: jax.Array) -> jax.Array:
    """The flow's normalised log density at one point x: `Σ log N(f(x); 0, 1) + Σ s`."""
    return jnp.sum(norm.logpdf(to_latent(params, x))) + jnp.sum(params["log_scale"])


def sample(key: jax.Array, params: dict, num: int, dim: int) -> jax.Array:
    """`num` exact draws from the flow, shape (num, dim)."""
    return jax.vmap(lambda h: from_latent(params, h))(jax.random.normal(key, (num, dim)))


def flatten(params: dict, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """Float32 arrays for `np.savez` (`coupling{l}_{i}_{w|b}`, `log_scale`), plus `extra`."""
    out = {"log_scale": np.asarray(params["log_scale"], np.float32)}
    for l, mlp in enumerate(params["couplings"]):
        for i, layer in enumerate(mlp):
            out[f"coupling{l}_{i}_w"] = np.asarray(layer["w"], np.float32)
            out[f"coupling{l}_{i}_b"] = np.asarray(layer["b"], np.float32)
    return {**out, **extra}


def unflatten(arrays) -> dict:
    """The inverse of `flatten` (extra arrays are ignored)."""
    layers = 1 + max(int(k[len("coupling"):].split("_")[0]) for k in arrays if k.startswith("coupling"))
    depth = 1 + max(int(k.split("_")[1]) for k in arrays if k.startswith("coupling0_"))
    couplings = [
        [{"w": jnp.asarray(arrays[f"coupling{l}_{i}_w"]), "b": jnp.asarray(arrays[f"coupling{l}_{i}_b"])}
         for i in range(depth)]
        for l in range(layers)
    ]
    return {"couplings": couplings, "log_scale": jnp.asarray(arrays["log_scale"])}


def load_flow(size: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The trained flow for `size` × `size` images and the rest of its file (mean, std, metadata).

    Raises:
        FileNotFoundError: when the weights file is missing (deleted, or a size not trained yet).
    """
    with np.load(weights_path(size)) as f:
        arrays = {k: f[k] for k in f.files}
    return unflatten(arrays), arrays
