"""The one registry of kernels: every estimator is a forward kernel × a backward kernel.

The command line's `--sampler` and `--backward` choices, `mcd compare`'s grid, the memory estimate,
the warnings and the test suite are all derived from `FORWARD` and `BACKWARD`. A new kernel is one
module defining a `ForwardKernel` or `BackwardKernel` value, plus one line here (or a call to
`register` from a plugin or a test).

Example:
    >>> [e.label for e in estimators()]
    ['ULA', 'ULA-MCD', 'UHA', 'UHA-MCD']
"""

from __future__ import annotations

import dataclasses
from typing import Union

from mcd_cli.kernels import ais, hmc, mala, mcd, uha, ula
from mcd_cli.kernels.base import BackwardKernel, ForwardKernel, RefineKernel

FORWARD: dict[str, ForwardKernel] = {k.name: k for k in (ula.KERNEL, uha.KERNEL)}
BACKWARD: dict[str, BackwardKernel] = {k.name: k for k in (ais.KERNEL, mcd.KERNEL)}
# Metropolis-corrected moves for the population sampler (`--refine`).
REFINE: dict[str, RefineKernel] = {k.name: k for k in (mala.KERNEL, hmc.KERNEL)}


@dataclasses.dataclass(frozen=True)
class Estimator:
    """A forward kernel and a backward kernel, and what follows from the pair."""

    forward: ForwardKernel
    backward: BackwardKernel

    @property
    def label(self) -> str:
        """The paper's name: ULA, UHA, ULA-MCD or UHA-MCD."""
        return self.forward.label + self.backward.suffix

    @property
    def trainable(self) -> bool:
        """Whether the backward kernel has a network to fit (the path is learned in every case)."""
        return self.backward.trainable


def forward(name: str) -> ForwardKernel:
    """The forward kernel called `name`.

    Raises:
        ValueError: naming the registered choices.
    """
    if name not in FORWARD:
        raise ValueError(f"sampler must be one of {', '.join(FORWARD)}, got {name!r}")
    return FORWARD[name]


def backward(name: str) -> BackwardKernel:
    """The backward kernel called `name` (ValueError naming the choices otherwise)."""
    if name not in BACKWARD:
        raise ValueError(f"backward must be one of {', '.join(BACKWARD)}, got {name!r}")
    return BACKWARD[name]


def refine(name: str) -> RefineKernel:
    """The refinement kernel called `name` (ValueError naming the choices otherwise)."""
    if name not in REFINE:
        raise ValueError(f"refine must be none or one of {', '.join(REFINE)}, got {name!r}")
    return REFINE[name]


def estimator(sampler: str, backward_name: str) -> Estimator:
    """The estimator `sampler` × `backward_name`."""
    return Estimator(forward(sampler), backward(backward_name))


def estimators() -> list[Estimator]:
    """Every registered combination, forward kernels outermost."""
    return [Estimator(f, b) for f in FORWARD.values() for b in BACKWARD.values()]


def register(kernel: Union[ForwardKernel, BackwardKernel]) -> None:
    """Adds a kernel under its name (replacing one of the same kind and name)."""
    table = FORWARD if isinstance(kernel, ForwardKernel) else BACKWARD
    table[kernel.name] = kernel


def unregister(kernel: Union[ForwardKernel, BackwardKernel]) -> None:
    """Removes a kernel added with `register`."""
    table = FORWARD if isinstance(kernel, ForwardKernel) else BACKWARD
    table.pop(kernel.name, None)
