"""Bernoulli-decoder VAE on binarised MNIST digits: log p(x) of each held-out image (a conditional target).

The model of `data/train_vae.py` (weights in `data/vae_mnist.npz`, trained there with a fixed seed):
z ∈ R^16, z ~ N(0, I); p(x | z) = Bernoulli(sigmoid(W2 tanh(W1 z + b1) + b2)) over the 784 pixels
of a 28 × 28 digit binarised at grey level 128. `log_density(z, x) = log p(x, z)`, so each datum's
log Z is log p(x). The encoder q(z | x) = N(μ(x), diag σ(x)²) is the amortised initial
distribution, and its outputs (μ, log σ) are the features an amortised score network sees.

The data are the 1,000 held-out digits of `data/mnist_5k.npz` (the fixed split's `test`, 100 per
digit in label order); `--data FILE` (an array `data` of shape (n, 784) with 0/1 values) replaces
them, and `--data-index i:j` selects some.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

_DATA = Path(__file__).resolve().parent / "data"
_W = {k: jnp.asarray(v) for k, v in np.load(_DATA / "vae_mnist.npz").items() if k != "record"}
LATENT = 16

dim = LATENT
amortise = True
name = "vae_mnist"


def _held_out() -> np.ndarray:
    digits = np.load(_DATA / "mnist_5k.npz")
    images = (digits["images"].reshape(-1, 784) >= 128).astype(np.float32)
    return images[digits["test"]]


data = _held_out()


def _encode(x):
    h = jnp.tanh(x @ _W["enc_w1"] + _W["enc_b1"])
    out = h @ _W["enc_w2"] + _W["enc_b2"]
    return out[:LATENT], jnp.clip(out[LATENT:], -7.0, 2.0)


def log_density(z, x):
    """log p(x, z): the standard normal prior and the Bernoulli decoder."""
    logits = jnp.tanh(z @ _W["dec_w1"] + _W["dec_b1"]) @ _W["dec_w2"] + _W["dec_b2"]
    log_lik = jnp.sum(x * jax.nn.log_sigmoid(logits) + (1.0 - x) * jax.nn.log_sigmoid(-logits))
    return log_lik + jnp.sum(norm.logpdf(z))


def initial(x):
    """The encoder: q(z | x) = N(μ(x), diag σ(x)²)."""
    mean, log_scale = _encode(x)
    return mean, jnp.exp(log_scale)


def features(x):
    """What the amortised score network is conditioned on: the encoder's (μ, log σ)."""
    return jnp.concatenate(_encode(x))
