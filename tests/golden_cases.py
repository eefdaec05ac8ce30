"""The small runs whose records are kept in tests/golden/records.jsonl (see tests/golden/make_golden.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from typer.testing import CliRunner

# A conditional target with exact log p(x): z ~ N(0, I_2), x | z ~ N(W z, 0.25 I_3).
CONDITIONAL = textwrap.dedent(
    """
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.stats import multivariate_normal, norm

    W = np.array([[0.5, -1.0], [1.2, 0.3], [-0.7, 0.8]], dtype=np.float32)
    dim = 2
    data = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32) * 1.5

    def log_density(z, x):
        return jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, W @ z, 0.5))

    def log_z(x):
        return multivariate_normal.logpdf(x, jnp.zeros(3), W @ W.T + 0.25 * jnp.eye(3))
    """
)

SMALL = ["--param", "dim=2", "--steps", "4", "--hidden", "8", "--batch-size", "16"]
CASES: dict[str, list[str]] = {
    "is_ula_mcd": ["estimate", "gmm8", *SMALL, "--iterations", "20", "--samples", "256", "--resample", "0"],
    "smc_ula_mcd": ["estimate", "gmm8", *SMALL, "--iterations", "20", "--samples", "1024"],
    "smc_uha_mcd": ["estimate", "gauss_narrow", *SMALL, "--sampler", "uha", "--iterations", "10", "--samples", "512"],
    "smc_adaptive": ["estimate", "gmm8", "--param", "dim=2", "--backward", "ais", "--iterations", "0",
                     "--schedule", "adaptive", "--samples", "1024"],
    "is_repeats": ["estimate", "laplace", *SMALL, "--backward", "ais", "--iterations", "0", "--samples", "256",
                   "--resample", "0", "--repeats", "3", "--seed", "4"],
    "compare_grid": ["compare", "gmm8", *SMALL, "--backward", "ais,mcd", "--iterations", "5", "--samples", "128"],
    "compare_models": ["compare", "gmm8", "gauss_shift", "--param", "dim=2", "--steps", "4", "--backward", "ais",
                       "--iterations", "0", "--samples", "256", "--batch-size", "16"],
    "perdatum_is": ["estimate", "{conditional}", "--steps", "4", "--hidden", "8", "--batch-size", "16",
                    "--iterations", "10", "--samples", "128", "--resample", "0", "--separate"],
    "perdatum_adaptive": ["estimate", "{conditional}", "--backward", "ais", "--iterations", "0",
                          "--schedule", "adaptive", "--samples", "256"],
}

# Fields that depend on the machine, the time or the path, not on the computation.
VOLATILE = {
    "seconds", "train_seconds", "estimate_seconds", "start_seconds", "compile_seconds", "start_compile_seconds",
    "import_seconds", "device", "devices", "processes",
    "version", "target_path", "target_sha256", "target_spec", "target_info", "path", "sha256", "spec",
}


def run_case(args: list[str], workdir: Path) -> list[dict]:
    """Runs `mcd ARGS --json` in this process; the JSON lines it printed."""
    from mcd_cli.cli import app

    conditional = Path(workdir) / "conditional_target.py"
    if any("{conditional}" in a for a in args):
        conditional.write_text(CONDITIONAL)
    argv = [a.replace("{conditional}", str(conditional)) for a in args] + ["--json", "--quiet"]
    result = CliRunner().invoke(app, argv)
    if result.exit_code != 0:
        raise RuntimeError(f"mcd {' '.join(argv)} exited {result.exit_code}: {result.stderr}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def comparable(value):
    """The record without its volatile fields (recursively)."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value
