"""Trains the Bernoulli-decoder VAE of `targets/vae_mnist.py` on the 4,000 training digits.

Data: `mnist_5k.npz` (see README.md), the fixed split (`test` marks the 1,000 held-out digits),
binarised once by thresholding the grey level at 128 (a fixed binarisation, so that every estimator
sees the same held-out images).

Model (a smaller version of the paper's, for a 2-core CPU): latent z ∈ R^16, z ~ N(0, I);
decoder `p(x | z) = Bernoulli(sigmoid(W2 tanh(W1 z + b1) + b2))` over the 784 pixels, one hidden
layer of 128 units; encoder `q(z | x) = N(μ(x), diag σ(x)²)` with one hidden tanh layer of 128 units
and outputs `(μ, log σ)`. Trained by the reparameterised ELBO (one sample per image), Adam 1e-3,
batch 100, fixed seed. Writes `vae_mnist.npz` (float32 weights and a JSON training record).

    taskset -c 1 nice -n 10 python targets/data/train_vae.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = Path(__file__).resolve().parent
LATENT = 16
HIDDEN = 128
PIXELS = 784


def binarised_digits(path: Path = HERE / "mnist_5k.npz") -> tuple[np.ndarray, np.ndarray]:
    """(train, test) binarised digits, float32 arrays of shape (n, 784)."""
    data = np.load(path)
    images = (data["images"].reshape(-1, PIXELS) >= 128).astype(np.float32)
    test = data["test"]
    return images[~test], images[test]


def init_params(key: jax.Array) -> dict:
    dense = jax.nn.initializers.glorot_normal()
    keys = jax.random.split(key, 4)
    return {
        "enc_w1": dense(keys[0], (PIXELS, HIDDEN)),
        "enc_b1": jnp.zeros(HIDDEN),
        "enc_w2": dense(keys[1], (HIDDEN, 2 * LATENT)),
        "enc_b2": jnp.zeros(2 * LATENT),
        "dec_w1": dense(keys[2], (LATENT, HIDDEN)),
        "dec_b1": jnp.zeros(HIDDEN),
        "dec_w2": dense(keys[3], (HIDDEN, PIXELS)),
        "dec_b2": jnp.zeros(PIXELS),
    }


def encode(p: dict, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(μ(x), log σ(x))` of the encoder for one image `x` (784,)."""
    h = jnp.tanh(x @ p["enc_w1"] + p["enc_b1"])
    out = h @ p["enc_w2"] + p["enc_b2"]
    return out[:LATENT], jnp.clip(out[LATENT:], -7.0, 2.0)


def log_joint(p: dict, z: jax.Array, x: jax.Array) -> jax.Array:
    """`log p(x, z) = log N(z; 0, I) + Σ log Bernoulli(x | sigmoid(logits(z)))`."""
    logits = jnp.tanh(z @ p["dec_w1"] + p["dec_b1"]) @ p["dec_w2"] + p["dec_b2"]
    log_lik = jnp.sum(x * jax.nn.log_sigmoid(logits) + (1.0 - x) * jax.nn.log_sigmoid(-logits))
    return log_lik + jnp.sum(jax.scipy.stats.norm.logpdf(z))


def elbo(p: dict, key: jax.Array, x: jax.Array) -> jax.Array:
    mean, log_scale = encode(p, x)
    eps = jax.random.normal(key, mean.shape)
    z = mean + jnp.exp(log_scale) * eps
    log_q = jnp.sum(jax.scipy.stats.norm.logpdf(eps) - log_scale)
    return log_joint(p, z, x) - log_q


def iwae(p: dict, key: jax.Array, x: jax.Array, samples: int) -> jax.Array:
    """The IWAE bound `log mean_s p(x, z_s) / q(z_s | x)` with `samples` encoder draws."""
    mean, log_scale = encode(p, x)
    eps = jax.random.normal(key, (samples, LATENT))
    z = mean + jnp.exp(log_scale) * eps
    log_q = jnp.sum(jax.scipy.stats.norm.logpdf(eps) - log_scale, axis=1)
    log_w = jax.vmap(lambda zz: log_joint(p, zz, x))(z) - log_q
    return jax.scipy.special.logsumexp(log_w) - jnp.log(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "vae_mnist.npz")
    args = parser.parse_args()

    train, test = binarised_digits()
    key = jax.random.key(args.seed)
    key_init, key_train, key_eval = jax.random.split(key, 3)
    params = init_params(key_init)
    opt = optax.adam(args.lr)
    opt_state = opt.init(params)
    train_j = jnp.asarray(train)

    def loss(p, key, batch):
        keys = jax.random.split(key, batch.shape[0])
        return -jnp.mean(jax.vmap(lambda k, x: elbo(p, k, x))(keys, batch))

    @jax.jit
    def update(p, s, key):
        k_batch, k_elbo = jax.random.split(key)
        idx = jax.random.choice(k_batch, train_j.shape[0], (args.batch,), replace=False)
        value, grads = jax.value_and_grad(loss)(p, k_elbo, train_j[idx])
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, value

    t0 = time.perf_counter()
    for i in range(args.steps):
        params, opt_state, value = update(params, opt_state, jax.random.fold_in(key_train, i))
        if (i + 1) % 1000 == 0:
            print(f"step {i + 1}: train ELBO {-float(value):.2f}", flush=True)
    seconds = time.perf_counter() - t0

    @jax.jit
    def evaluate(p, key, data):
        keys = jax.random.split(key, data.shape[0])
        e = jax.vmap(lambda k, x: elbo(p, k, x))(keys, data)
        w = jax.vmap(lambda k, x: iwae(p, k, x, 1000))(keys, data)
        return jnp.mean(e), jnp.mean(w)

    train_elbo, train_iwae = evaluate(params, key_eval, train_j[:1000])
    test_elbo, test_iwae = evaluate(params, key_eval, jnp.asarray(test))
    record = {
        "command": "python targets/data/train_vae.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if k != "out"
        ),
        "latent": LATENT,
        "hidden": HIDDEN,
        "binarisation": "grey level >= 128",
        "train_images": int(train.shape[0]),
        "test_images": int(test.shape[0]),
        "seconds": round(seconds, 1),
        "jax": jax.__version__,
        "train_elbo_first_1000": round(float(train_elbo), 3),
        "train_iwae1000_first_1000": round(float(train_iwae), 3),
        "test_elbo": round(float(test_elbo), 3),
        "test_iwae1000": round(float(test_iwae), 3),
    }
    print(json.dumps(record, indent=1))
    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
    np.savez_compressed(args.out, record=np.asarray(json.dumps(record)), **arrays)


if __name__ == "__main__":
    main()
