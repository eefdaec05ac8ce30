"""The fit of a run: trained parameters for each repeat, from training, a --save file, or none.

`fitter(plan, target, step_sizes, sharding)` returns the `Fit` of the plan — a function
`(key, repeat, progress) -> Fitted` — and the training settings as run. Checkpointing is a wrapper
around training, not part of it: `Checkpoints` resumes a state and saves one every
`checkpoint_every` iterations; `saved_on_interrupt` turns Ctrl-C (or SIGTERM) into `Interrupted`
after saving the last consistent training state, during training or during the estimate that
follows it (so a resume only estimates). A checkpoint is insurance, not a failure mode: one that
cannot be written (a full disk, a quota) leaves the previous one in place, is warned about once and
counted (`Fitted.checkpoint_failures`), and training goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Optional

import jax
import numpy as np

from mcd_cli.path import annealing
from mcd_cli.io import checkpoint
from mcd_cli.runtime import devices
from mcd_cli.io import files
from mcd_cli.config import TrainConfig
from mcd_cli.errors import Interrupted, TooSlow, os_reason
from mcd_cli.run.plan import Progress, RunPlan, file_meta, root_key
from mcd_cli.train.loop import TrainingInterrupted, fit, init_train_state, make_train_chunk


class Fitted(NamedTuple):
    """The parameters of one repeat and how they were obtained."""

    params: Any
    state: Any = None  # the final TrainState (None when nothing was trained)
    history: Optional[np.ndarray] = None  # the training ELBO of every iteration (a resumed run: from its checkpoint)
    stop_reason: Optional[str] = None
    seconds: float = 0.0
    skipped: int = 0
    recoveries: int = 0
    iterations_run: int = 0
    checkpoint_failures: int = 0  # checkpoints that could not be written (the run went on)


Fit = Callable[[jax.Array, int, Progress], Fitted]


def default_interrupt_dir(plan: RunPlan) -> Path:
    """Where Ctrl-C saves training when no --checkpoint directory was given."""
    return Path(f"mcd-checkpoint-{plan.target.name}-seed{plan.seed}")


def save_interrupted(
    plan: RunPlan, state: Any, repeat: int, history: Optional[np.ndarray] = None
) -> tuple[Optional[Path], str]:
    """Saves `state` (and its ELBO history) where a resume finds it: `(directory, "")`, or `(None, why not)`."""
    directory = plan.checkpoint_dir or default_interrupt_dir(plan)
    if not devices.is_primary():
        return Path(directory), ""
    try:
        files.ensure_directory(directory, "checkpoint directory")
        checkpoint.save_state(
            plan.state_path(repeat, directory), state, {**file_meta(plan), "repeat": repeat}, history=history
        )
        return Path(directory), ""
    except (OSError, checkpoint.CheckpointError) as err:
        return None, str(err)


@contextlib.contextmanager
def saved_on_interrupt(plan: RunPlan, repeat: int, state: Any = None, total: int = 0) -> Iterator[None]:
    """Ctrl-C inside the block raises `Interrupted` after saving the training state: the one
    `TrainingInterrupted` carries, else `state` (None: nothing trained, plain KeyboardInterrupt)."""
    try:
        yield
    except TrainingInterrupted as interrupted:
        saved, reason = save_interrupted(plan, interrupted.state, repeat, interrupted.history)
        raise Interrupted(saved, interrupted.state.iteration, total, reason) from None
    except KeyboardInterrupt:
        if state is None:
            raise
        saved, reason = save_interrupted(plan, state, repeat)
        raise Interrupted(saved, state.iteration, total, reason) from None


@dataclasses.dataclass
class Checkpoints:
    """The checkpoint of one repeat's training under --checkpoint DIR (no-ops without one).

    A save that fails with an OS error leaves the previous checkpoint in place (`checkpoint`
    writes atomically): the first failure is warned about on stderr, every one is counted in
    `failures`, and training continues.
    """

    path: Optional[Path]
    every: int
    meta: Optional[dict]
    failures: int = dataclasses.field(default=0, init=False)
    saved: Optional[int] = dataclasses.field(default=None, init=False)  # the last iteration saved
    history: Optional[np.ndarray] = dataclasses.field(default=None, init=False)  # the resumed ELBO history

    @classmethod
    def of(cls, plan: RunPlan, repeat: int) -> "Checkpoints":
        if plan.checkpoint_dir is None:
            return cls(None, 0, None)
        return cls(plan.state_path(repeat), plan.checkpoint_every, {**file_meta(plan), "repeat": repeat})

    def resume(self, state: Any, resume: bool) -> Any:
        """The saved state when resuming and one exists, else `state`; the saved ELBO history goes
        to `history` (pass it to `training.fit`)."""
        if self.path is not None and resume and self.path.exists():
            state, meta = checkpoint.load_state(self.path, state)
            self.saved = int(state.iteration)
            self.history = meta.get("elbo_history")
        return state

    def save(self, state: Any, history: Optional[np.ndarray] = None) -> None:
        if not devices.is_primary():
            return
        try:
            checkpoint.save_state(self.path, state, self.meta, history=history)
        except OSError as err:
            self.failures += 1
            if self.failures == 1:
                resume = "afresh" if self.saved is None else f"from the checkpoint of iteration {self.saved}, which is kept"
                print(
                    f"warning: cannot write checkpoint '{self.path}' ({os_reason(err)}); training goes on (--resume "
                    f"would start {resume}); failures are counted in the record's checkpoint_failures",
                    file=sys.stderr,
                    flush=True,
                )
            return
        self.saved = int(state.iteration)

    @property
    def on_checkpoint(self) -> Optional[Callable[[Any, np.ndarray], None]]:
        return self.save if self.path is not None else None


def trained_config(plan: RunPlan) -> TrainConfig:
    """The training settings as run: adaptive tempering trains nothing (its moves are Metropolis moves)."""
    return dataclasses.replace(plan.tconf, iterations=0) if plan.sconf.adaptive else plan.tconf


def fitter(
    plan: RunPlan, target: Any, step_sizes: Any, sharding: Any = None, betas: Any = None
) -> tuple[Fit, TrainConfig]:
    """The plan's fit and its training settings as run: the parameters of a --load file (the same for
    every repeat; the file's iteration count), the initial parameters (adaptive tempering), or training
    (from the start's `step_sizes` and, for a tempered schedule, `betas`)."""
    s, t = plan.sconf, trained_config(plan)
    if plan.load is not None:
        template = annealing.init_params(root_key(plan.seed, plan.model_index), target, s)
        loaded, meta = checkpoint.load_params(plan.load, template)
        t = dataclasses.replace(t, iterations=int(meta.get("train_config", {}).get("iterations", 0)))
        return (lambda key, repeat, progress: Fitted(loaded)), t
    if s.adaptive:  # only the initial distribution of the parameters is used
        return (lambda key, repeat, progress: Fitted(annealing.init_params(key, target, s))), t
    update = make_train_chunk(target, s, t, sharding=sharding) if t.iterations > 0 else None

    def train(key: jax.Array, repeat: int, progress: Progress) -> Fitted:
        saver = Checkpoints.of(plan, repeat)
        state = saver.resume(init_train_state(key, target, s, t, step_sizes=step_sizes, betas=betas), plan.resume)
        label = "training" if plan.repeats == 1 else f"training {repeat + 1}/{plan.repeats}"
        callback = progress.training(label, total=t.iterations, start=state.iteration)
        first = state.iteration
        with saved_on_interrupt(plan, repeat, total=t.iterations):
            result = fit(
                state, target, s, t, callback=callback, checkpoint_every=saver.every,
                on_checkpoint=saver.on_checkpoint, update=update, history=saver.history, seconds=t.max_seconds,
                min_updates=t.min_updates,
            )
        if result.stop_reason == "slow":  # a learning pilot that cannot be used: its estimate is not made
            raise TooSlow(result.state.iteration, result.seconds, t.min_updates, t.max_seconds)
        return Fitted(
            result.state.params, result.state, result.elbo_history, result.stop_reason, result.seconds,
            result.skipped, result.recoveries, result.state.iteration - first, saver.failures,
        )

    return train, t
