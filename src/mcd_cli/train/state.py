"""The state of training: everything needed to continue where it stopped (`TrainState`), what
`train.loop.fit` returns (`TrainResult`), and how training ends early (`TrainingDiverged`,
`TrainingInterrupted`)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import jax
import numpy as np

from mcd_cli.errors import RunFailed


class TrainingDiverged(RunFailed):
    """Training kept producing non-finite losses or gradients after every allowed recovery."""


class TrainingInterrupted(Exception):
    """Training was interrupted (Ctrl-C); `state` is the last consistent `TrainState`, `history` the
    training ELBO of its iterations `0 … state.iteration − 1`."""

    def __init__(self, state: "TrainState", history: Optional[np.ndarray] = None):
        super().__init__(f"training interrupted at iteration {state.iteration}")
        self.state = state
        self.history = history


class TrainState(NamedTuple):
    """Everything needed to continue training exactly where it stopped (a checkpoint saves it whole).

    `recent` holds the ELBOs of the last `2 × TrainConfig.plateau_window` updates (NaN where an
    update was skipped or has not run), at index `iteration mod 2W`: what the stopping rule needs.
    """

    params: Any
    opt_state: Any
    key: jax.Array
    iteration: int = 0
    lr_scale: float = 1.0
    skipped: int = 0
    recoveries: int = 0
    bad_streak: int = 0
    snapshot_params: Any = None
    snapshot_opt_state: Any = None
    recent: Any = None


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `fit` returns: the final state, the ELBO of every iteration `0 … state.iteration − 1`
    (NaN if skipped; those before a resume as the checkpoint kept them) and why training stopped
    ("iterations": the cap was reached; "plateau": the stopping rule)."""

    state: TrainState
    elbo_history: np.ndarray
    skipped: int
    recoveries: int
    seconds: float
    stop_reason: str = "iterations"

    @property
    def params(self) -> Any:
        return self.state.params
