"""How much memory a run needs, and whether the device has it (checked before any work)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import jax

from mcd_cli.runtime import devices
from mcd_cli.errors import UsageError
from mcd_cli.kernels import registry
from mcd_cli.run.plan import RunPlan, sharded_population
from mcd_cli.smc import adaptation


def available_memory() -> Optional[int]:
    """Bytes the run may still allocate on its device (host RAM on CPU), or None if unknown."""
    device = jax.devices()[0]
    if device.platform != "cpu":
        try:
            stats = device.memory_stats() or {}
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        except Exception:
            return None
    return host_memory()


def host_memory() -> Optional[int]:
    """Available host RAM: MemAvailable, capped by a cgroup (container, batch job) limit."""
    candidates = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        try:
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            candidates.append(int(limit) - usage)
    return min(candidates) if candidates else None


def format_bytes(n: float) -> str:
    """`n` bytes in a readable unit, e.g. `1.5 GiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def memory_needed(plan: RunPlan) -> dict[str, float]:
    """A generous estimate, in bytes, of the largest allocations of the run.

    Training keeps every step of every particle of the batch for backpropagation (the paper's
    stated limitation): about `batch × (K + 1) × state × 6` numbers, plus the score network's
    activations; `remat` reduces the stored steps to about `2√K`. Parameters (roughly counted:
    the score network's layers and the per-step schedules) are counted with their gradients,
    Adam moments and the recovery snapshot.
    """
    target, s, t = plan.target, plan.sconf, plan.tconf
    est = registry.estimator(s.sampler, s.backward)
    itemsize = 8 if plan.x64 else 4
    state = est.forward.state_size(target.dim)
    # The per-step schedules and the kernels' own parameters (a generous count of both).
    param_count = 4.0 * target.dim + 40.0 * s.steps
    param_count += est.backward.param_count(est.forward.score_input_dim(target.dim), target.dim, s)
    stored_steps = 2 * math.ceil(math.sqrt(s.steps)) if s.remat else s.steps
    per_step = 6 * state + est.backward.activations(s)
    training = 0.0
    if plan.load is None and t.iterations > 0:
        training = float(t.batch_size) * (stored_steps + 1) * per_step * itemsize
    chunk = sharded_population(plan) if s.smc else min(plan.chunk_size, plan.num_samples)
    estimation = float(chunk) * per_step * itemsize * 2
    # Particles are sharded: each device holds its share of the batch, of the chunk and of an SMC
    # population; resampling gathers the whole population's states on every device for a moment.
    count = devices.particle_layout(plan.devices).count
    training /= count
    estimation /= count
    if s.smc and count > 1:  # the kernel's state and the cached log γ, ∇log γ of every particle
        estimation += float(chunk) * (state + target.dim + 1) * itemsize
    estimation += tempering_record(plan)
    # --posterior keeps every population's final positions on the host until they are written.
    draws = float(plan.num_samples) * target.dim * itemsize if plan.draws else 0.0
    return {
        "training": training,
        "estimation": estimation,
        "parameters": 8.0 * param_count * itemsize,
        "host": 8.0 * plan.num_samples + 8.0 * t.iterations + draws,
    }


def tempering_record(plan: RunPlan) -> float:
    """Bytes of adaptive tempering's per-step record, held twice (the tuning population's
    `smc.Tempering`, replayed by every population, and a run's trace): at each of up to
    `max_steps` steps a β, a resampling flag, a step size, a move count and the preconditioner, a d × d factor
    where the dense one may be used (`smc.adaptation.DENSE_MAX_DIM`: 16 MiB each at d = 64), else
    d numbers.

    Example:
        >>> from types import SimpleNamespace as S
        >>> sconf = S(smc=True, adaptive=True, refine="hmc", max_steps=1000)
        >>> round(tempering_record(S(sconf=sconf, target=S(dim=64), x64=False)) / 2**20, 1)  # MiB
        31.3
    """
    s, dim = plan.sconf, plan.target.dim
    if not (s.smc and s.adaptive):
        return 0.0
    dense = s.refine in adaptation.DENSE_KERNELS and dim <= adaptation.DENSE_MAX_DIM
    per_step = (dim * dim if dense else dim) + 4
    return 2.0 * s.max_steps * per_step * (8 if plan.x64 else 4)


def check_memory(plan: RunPlan, available: Optional[int]) -> None:
    """Raises UsageError when the run clearly cannot fit in memory (before anything starts)."""
    if available is None:
        return
    need = memory_needed(plan)
    total = max(need["training"], need["estimation"]) + need["parameters"] + need["host"]
    if total <= available:
        return
    s, t = plan.sconf, plan.tconf
    have = f"about {format_bytes(max(available, 0))} is available"
    if need["host"] > available / 2:
        raise UsageError(
            f"not enough memory: {plan.num_samples} samples and {t.iterations} iterations need about "
            f"{format_bytes(need['host'])} but {have}; lower --samples or --iterations"
        )
    if need["training"] >= need["estimation"] and need["training"] > need["parameters"]:
        raise UsageError(
            f"not enough memory: training needs about {format_bytes(need['training'])} (batch "
            f"{t.batch_size} × {s.steps + 1} steps × d = {plan.target.dim}) but {have}; lower "
            "--batch-size or --steps, add --remat, or use a smaller dimension"
        )
    if need["parameters"] >= need["estimation"]:
        raise UsageError(
            f"not enough memory: the sampler's parameters need about {format_bytes(need['parameters'])} "
            f"(K = {s.steps} steps, hidden {s.hidden}, d = {plan.target.dim}) but {have}; lower "
            "--steps, --hidden or the dimension"
        )
    raise UsageError(
        f"not enough memory: estimation needs about {format_bytes(need['estimation'])} (K = {s.steps} "
        f"steps, d = {plan.target.dim}) but {have}; lower --steps or use a smaller dimension"
    )


# --------------------------------------------------------------------------------------------
# Validation before any work

