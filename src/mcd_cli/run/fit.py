"""Training inside a run: the checkpointed fit of one repeat, and saving on Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import jax

from mcd_cli import checkpoint, devices
from mcd_cli.errors import Interrupted
from mcd_cli.run.plan import Progress, RunPlan, file_meta
from mcd_cli.training import TrainingInterrupted, fit, init_train_state

def default_interrupt_dir(plan: RunPlan) -> Path:
    """Where Ctrl-C saves training when no --checkpoint directory was given."""
    return Path(f"mcd-checkpoint-{plan.target.name}-seed{plan.seed}")


def save_interrupted(plan: RunPlan, state: Any, repeat: int) -> tuple[Optional[Path], str]:
    directory = plan.checkpoint_dir or default_interrupt_dir(plan)
    if not devices.is_primary():
        return Path(directory), ""
    try:
        checkpoint.ensure_directory(directory, "checkpoint directory")
        path = plan.state_path(repeat, directory)
        checkpoint.save_state(path, state, {**file_meta(plan), "repeat": repeat})
        return Path(directory), ""
    except (OSError, checkpoint.CheckpointError) as err:
        return None, str(err)


def train(plan: RunPlan, target: Any, key: jax.Array, repeat: int, progress: Progress, update, step_sizes):
    s, t = plan.sconf, plan.tconf
    state = init_train_state(key, target, s, t, step_sizes=step_sizes)
    path = plan.state_path(repeat) if plan.checkpoint_dir is not None else None
    if path is not None and plan.resume and path.exists():
        state, _ = checkpoint.load_state(path, state)
    meta = {**file_meta(plan), "repeat": repeat} if path is not None else None

    def save_checkpoint(st):
        if devices.is_primary():
            checkpoint.save_state(path, st, meta)

    on_checkpoint = save_checkpoint if path is not None else None

    label = "training" if plan.repeats == 1 else f"training {repeat + 1}/{plan.repeats}"
    callback = progress.training(label, total=t.iterations, start=state.iteration)
    start = state.iteration
    try:
        result = fit(
            state,
            target,
            s,
            t,
            callback=callback,
            checkpoint_every=plan.checkpoint_every if path is not None else 0,
            on_checkpoint=on_checkpoint,
            update=update,
        )
    except TrainingInterrupted as interrupted:
        saved, reason = save_interrupted(plan, interrupted.state, repeat)
        raise Interrupted(saved, interrupted.state.iteration, t.iterations, reason) from None
    return result, result.state.iteration - start


