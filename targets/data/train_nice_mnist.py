"""Trains the NICE flows of the `nice_mnist` target by maximum likelihood and writes their weights.

One flow per resolution, on the 4,000 training digits of `mnist_5k.npz` (the preprocessing and the
architecture are described in `targets/_nice.py`): Adam with a cosine-decayed learning rate,
batches of 128 images dequantised afresh at every step, a fixed number of steps and a fixed seed.
Every `--eval-every` steps it prints the mean log-likelihood per image of the training and test
digits (each dequantised once with a fixed key) in the standardised logit space the target uses,
and at the end it also gives the test likelihood in bits per pixel on the 256 grey levels (the
change of variables of the logit and the standardisation added back; the usual unit for images).

    taskset -c 1 nice -n 10 python targets/data/train_nice_mnist.py --size 7
    taskset -c 1 nice -n 10 python targets/data/train_nice_mnist.py --size 14

writes `targets/data/nice_mnist_{size}.npz` (float32 weights, the standardisation's `mean`, `std`
and the training record). `--size 28` works the same way (10.16 MiB of weights; all three are shipped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import _nice  # noqa: E402


def standardisation(train_grey: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel mean and standard deviation of the training logits (dequantised with seed 0)."""
    y = np.asarray(_nice.logit_pixels(jax.random.key(0), jnp.asarray(train_grey)), np.float64)
    return y.mean(axis=0), y.std(axis=0)


def pixel_bits_per_dim(log_lik: float, mean_logdet: float, dim: int) -> float:
    """Bits per pixel on the 256 grey levels (the usual unit), from the log-likelihood of x.

    The density of `v = (g + u) / 256` is `p(x) |dx/dv|`; in units of grey levels it is 256 times
    smaller, hence the `+ 8` bits.
    """
    return -(log_lik + mean_logdet) / (dim * np.log(2.0)) + 8.0


def logdet_x_of_v(key, grey, std):
    """Mean over images of log |dx/dv|: the logit's derivative over the standardisation's scale."""
    u = jax.random.uniform(key, grey.shape)
    v = (grey.astype(jnp.float32) + u) / 256.0
    p = _nice.ALPHA + (1.0 - 2.0 * _nice.ALPHA) * v
    per_pixel = jnp.log(1.0 - 2.0 * _nice.ALPHA) - jnp.log(p) - jnp.log1p(-p) - jnp.log(std)
    return float(jnp.mean(jnp.sum(per_pixel, axis=-1)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, choices=_nice.SIZES, required=True)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.5)
    parser.add_argument("--hidden", type=int, default=None, help="default: 128, 256, 512 by size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    size, dim = args.size, args.size**2
    hidden = args.hidden or _nice.HIDDEN[size]
    output = args.output or _nice.weights_path(size)

    digits = _nice.load_digits()
    grey = _nice.downsample(digits["images"], size).reshape(-1, dim)
    train, test = grey[~digits["test"]], grey[digits["test"]]
    mean, std = standardisation(train)
    mean_j, std_j = jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32)

    def prepare(key, g):
        return (_nice.logit_pixels(key, g) - mean_j) / std_j

    batch_log_prob = jax.vmap(_nice.log_prob, in_axes=(None, 0))
    key_init, key_train, key_eval = jax.random.split(jax.random.key(args.seed), 3)
    params = _nice.init_flow(key_init, dim, hidden)
    schedule = optax.cosine_decay_schedule(args.lr, args.steps, alpha=0.01)
    optimiser = optax.chain(optax.clip_by_global_norm(10.0),
                            optax.adamw(schedule, weight_decay=args.weight_decay))
    opt_state = optimiser.init(params)
    train_j, test_j = jnp.asarray(train), jnp.asarray(test)
    k_tr, k_te = jax.random.split(key_eval)
    train_x, test_x = prepare(k_tr, train_j), prepare(k_te, test_j)

    def loss(p, x):
        return -jnp.mean(batch_log_prob(p, x))

    @jax.jit
    def run_chunk(params, opt_state, keys):
        def step(carry, key):
            params, opt_state = carry
            k_idx, k_deq = jax.random.split(key)
            idx = jax.random.choice(k_idx, train_j.shape[0], (args.batch_size,), replace=False)
            value, grads = jax.value_and_grad(loss)(params, prepare(k_deq, train_j[idx]))
            updates, opt_state = optimiser.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value
        (params, opt_state), values = jax.lax.scan(step, (params, opt_state), keys)
        return params, opt_state, values

    mean_ll = jax.jit(lambda p, x: jnp.mean(batch_log_prob(p, x)))
    history = []
    start = time.perf_counter()
    keys = jax.random.split(key_train, args.steps)
    for done in range(0, args.steps, args.eval_every):
        chunk = keys[done:done + args.eval_every]
        params, opt_state, values = run_chunk(params, opt_state, chunk)
        if not np.all(np.isfinite(np.asarray(values))):
            sys.exit(f"training diverged between steps {done} and {done + len(chunk)}; lower --lr")
        row = {"step": done + len(chunk), "train_ll": float(mean_ll(params, train_x)),
               "test_ll": float(mean_ll(params, test_x)),
               "seconds": round(time.perf_counter() - start, 1)}
        history.append(row)
        print(json.dumps(row), flush=True)

    final = history[-1]
    logdet = logdet_x_of_v(k_te, test_j, std_j)
    record = {
        "size": size, "dim": dim, "hidden": hidden, "layers": _nice.LAYERS, "steps": args.steps,
        "batch_size": args.batch_size, "lr": args.lr, "weight_decay": args.weight_decay,
        "seed": args.seed, "alpha": _nice.ALPHA, "train_images": int(train.shape[0]),
        "test_images": int(test.shape[0]), "final_train_ll": final["train_ll"],
        "final_test_ll": final["test_ll"],
        "final_test_bits_per_pixel": pixel_bits_per_dim(final["test_ll"], logdet, dim),
        "seconds": final["seconds"], "jax": jax.__version__,
        "command": " ".join(["python", "targets/data/train_nice_mnist.py", *(argv or sys.argv[1:])]),
    }
    arrays = _nice.flatten(params, mean=mean.astype(np.float32), std=std.astype(np.float32),
                           record=np.array(json.dumps(record)))
    np.savez(output, **arrays)
    print(json.dumps(record))
    print(f"wrote {output} ({output.stat().st_size / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
