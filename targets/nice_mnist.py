"""NICE flow trained on MNIST digits downsampled to size × size (paper's flow target): log Z = 0.

The paper's normalising-flow experiment (Doucet et al. 2022, appendix "Normalizing Flow"): the
target is the density of a NICE flow fitted by maximum likelihood to MNIST at 7 × 7, 14 × 14 or
28 × 28 (d = 49, 196, 784). A trained flow puts its mass on a thin, curved, image-like set, which
is what makes the experiment hard; being a normalised density, its log Z is exactly 0.

The density lives in the space the flow was trained in: each pixel's dequantised grey level in
logit space, standardised by the training digits' per-pixel mean and standard deviation (the
preprocessing and the architecture are in `_nice.py`; the weights, the standardisation and the
training record in `data/nice_mnist_{size}.npz`, written by `data/train_nice_mnist.py`). The
initial distribution is N(0, I) in that space, i.e. the training digits' per-pixel logit means
and standard deviations: a diagonal Gaussian moment-matched to the data, which the samplers must
bend onto the flow's correlated, curved mass.

Parameters (set with `--param key=value`): size, 7 (default), 14 or 28; all three flows are bundled.
"""

import _nice
from mcd_cli.targets import TargetError


def make_target(size=7):
    if size not in _nice.SIZES:
        raise TargetError(f"nice_mnist: size must be 7, 14 or 28, got {size}")
    path = _nice.weights_path(size)
    if not path.is_file():
        raise TargetError(
            f"nice_mnist: the {size} × {size} flow's weights {path.name} are missing; create them "
            f"with `python {_nice.TRAIN_SCRIPT} --size {size}` (run from the source checkout)"
        )
    params, _ = _nice.load_flow(size)
    dim = size * size

    def log_density(x):
        return _nice.log_prob(params, x)

    return {
        "log_density": log_density,
        "dim": dim,
        "log_z": 0.0,
        # Declared, so that --init auto keeps it: a variational fit is narrower than the flow's
        # mass and biased the estimates low (−0.10 to −0.16 at SE 0.03 from the VI start).
        "initial": {"mean": 0.0, "scale": 1.0},
        "name": "nice_mnist",
        "description": (
            f"NICE flow fitted to MNIST digits at {size} × {size} (d = {dim}), density in the "
            "standardised logit space of its training data"
        ),
    }


def flow(size=7):
    """The trained flow's parameters for `size` (for exact samples: `_nice.sample`)."""
    return _nice.load_flow(size)[0]

