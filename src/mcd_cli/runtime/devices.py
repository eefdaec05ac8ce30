"""Devices and processes: the one-dimensional mesh particles are sharded over, and JAX's
multi-process runtime.

Every particle of a training batch and of an estimation chunk is independent of the others, so the
particle axis is the one axis to shard: a `Mesh` of `n` devices named `particles`, the particles
placed with `NamedSharding(mesh, P("particles"))`, the parameters replicated. XLA then runs each
device's share and inserts the one cross-device reduction the objective needs (the batch mean of
the log weights, hence the gradient average). Particle `i` keeps its key `fold_in(key, i)` whatever
the mesh, so the estimate does not depend on the number of devices.

Many hosts use JAX's own multi-controller runtime: every process runs the same program,
`jax.distributed.initialize` connects them (auto-detected under SLURM and Open MPI), and the mesh
then spans the devices of all processes. Results of a chunk are replicated to every process, so all
of them compute the same estimate; only process 0 writes files (`is_primary`).

Example:
    >>> layout = particle_layout(1)
    >>> layout.count, round_up(130, 4)
    (1, 132)
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mcd_cli.errors import UsageError

AXIS = "particles"


class Layout(NamedTuple):
    """A one-dimensional mesh and the two shardings a run needs (hashable: a static argument)."""

    mesh: Mesh
    particles: NamedSharding  # the particle axis split over the mesh
    replicated: NamedSharding  # the same value on every device (parameters, results)

    @property
    def count(self) -> int:
        """Devices in the mesh, over all processes."""
        return int(self.mesh.devices.size)


def parse_count(value: object) -> Optional[int]:
    """`--devices` as a count per process: `all` (or None) is None, otherwise a positive integer.

    Raises:
        UsageError: anything else.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    try:
        count = int(str(value).strip())
    except ValueError:
        count = 0
    if count < 1 or isinstance(value, bool):
        raise UsageError(f"--devices must be 'all' or a positive number of devices, got {value!r}")
    return count


def particle_layout(per_process: Optional[int] = None) -> Layout:
    """The mesh of the first `per_process` local devices of every process (None: all of them).

    Raises:
        UsageError: more devices asked for than a process has.
    """
    by_process: dict[int, list] = {}
    for device in jax.devices():
        by_process.setdefault(device.process_index, []).append(device)
    have = min(len(devs) for devs in by_process.values())
    if per_process is not None and per_process > have:
        kind = jax.devices()[0].platform
        raise UsageError(
            f"--devices {per_process} asks for more devices than the {have} {kind} device(s) this "
            "process has; use --devices all or a smaller number (on the CPU, "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N simulates N devices)"
        )
    take = have if per_process is None else per_process
    chosen = [d for p in sorted(by_process) for d in by_process[p][:take]]
    mesh = Mesh(np.array(chosen), (AXIS,))
    return Layout(mesh, NamedSharding(mesh, PartitionSpec(AXIS)), NamedSharding(mesh, PartitionSpec()))


def round_up(size: int, count: int) -> int:
    """The smallest multiple of `count` that is at least `size`."""
    return -(-int(size) // int(count)) * int(count)


def initialize(
    coordinator: Optional[str] = None, num_processes: Optional[int] = None, process_id: Optional[int] = None
) -> None:
    """Starts JAX's multi-process runtime (before any computation); idempotent.

    With no arguments the cluster is detected from the environment (SLURM, Open MPI, ...); otherwise
    all three are needed: the coordinator's `HOST:PORT` (process 0 listens there), the number of
    processes and this one's index.

    Raises:
        UsageError: incomplete or invalid arguments, no cluster detected, or a runtime already
            started with different settings (one line naming the fix).
    """
    explicit = [coordinator is not None, num_processes is not None, process_id is not None]
    if any(explicit) and not all(explicit):
        raise UsageError(
            "--coordinator, --num-processes and --process-id go together; give all three, or none "
            "to detect the cluster (SLURM, Open MPI)"
        )
    if coordinator is not None:
        host, sep, port = coordinator.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise UsageError(f"--coordinator must be HOST:PORT (e.g. node001:12345), got {coordinator!r}")
        if num_processes < 1:
            raise UsageError(f"--num-processes must be at least 1, got {num_processes}")
        if not 0 <= process_id < num_processes:
            raise UsageError(f"--process-id must be between 0 and {num_processes - 1}, got {process_id}")
    if jax.distributed.is_initialized():
        return
    try:
        jax.distributed.initialize(coordinator, num_processes, process_id)
    except ValueError as err:
        raise UsageError(
            f"--distributed could not find its cluster ({' '.join(str(err).split())}); run under "
            "srun or mpirun, or give --coordinator HOST:PORT --num-processes N --process-id I"
        ) from None
    except RuntimeError as err:
        raise UsageError(
            f"--distributed could not start JAX's runtime ({' '.join(str(err).split())[:300]}); start it "
            "before any other JAX work, and check that the coordinator address is reachable"
        ) from None


def process_index() -> int:
    """This process's index (0 without `--distributed`)."""
    return int(jax.process_index())


def process_count() -> int:
    """Processes taking part (1 without `--distributed`)."""
    return int(jax.process_count())


def is_primary() -> bool:
    """Whether this process writes the outputs: the table, JSON lines, files and checkpoints."""
    return process_index() == 0
