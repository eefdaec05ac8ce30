"""Everything that can fail before training, checked before training (one-line errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from mcd_cli.io import checkpoint
from mcd_cli.runtime import devices
from mcd_cli.io import files
from mcd_cli.train import objectives
from mcd_cli.config import ESTIMATION_FIELDS
from mcd_cli.errors import UsageError
from mcd_cli.kernels import registry
from mcd_cli.run.memory import available_memory, check_memory
from mcd_cli.run.plan import NUMERICS_ONLY, RunPlan, read_saved, sharded_plan


def check_state_meta(plan: RunPlan, meta: dict, path: Path, repeat: int) -> None:
    """Raises CheckpointError unless the checkpoint at `path` belongs to this run."""
    checkpoint.check_target(meta, plan.target, str(path))
    differences = checkpoint.config_differences(
        meta.get("sampler_config", {}), plan.sconf, ignore=NUMERICS_ONLY + ESTIMATION_FIELDS
    )
    differences += checkpoint.config_differences(
        meta.get("train_config", {}), plan.tconf, ignore=("iterations", "chunk", "stop", "max_seconds", "min_updates")
    )
    if meta.get("seed") != plan.seed:
        differences.append(f"seed={meta.get('seed')!r} (this run: {plan.seed!r})")
    if meta.get("model_index") != plan.model_index:
        differences.append(f"model_index={meta.get('model_index')!r} (this run: {plan.model_index!r})")
    if meta.get("repeat", repeat) != repeat:
        differences.append(f"repeat={meta.get('repeat')!r} (this run: {repeat})")
    if differences:
        raise checkpoint.CheckpointError(
            f"checkpoint '{path}' was written by a run with {', '.join(differences[:3])}; "
            "resume with the same settings or use another --checkpoint directory"
        )


def validate_populations(num_samples: int, particles: Optional[int], population: int, per: str = "") -> None:
    """`--samples` split into whole SMC populations of at least 2 particles, or one clear error.
    `per` qualifies the sample count in the message (" per datum")."""
    if particles is not None and particles < 2:
        raise UsageError(f"--particles must be at least 2 (an SMC population), got {particles}")
    if population < 2:
        raise UsageError(f"SMC needs at least 2 particles{per}, got --samples {num_samples}")
    if num_samples % population:
        raise UsageError(
            f"--samples {num_samples} is not a multiple of --particles {population}: SMC "
            "runs whole populations; make --samples a multiple of --particles"
        )


def validate(plan: RunPlan, *, available: Optional[int] = None, check_mem: bool = True) -> None:
    """Everything that can fail before training, checked before training.

    Raises:
        UsageError / CheckpointError: one line naming the problem and the fix.
    """
    if plan.num_samples < 1:
        raise UsageError(f"--samples must be at least 1, got {plan.num_samples}")
    devices.particle_layout(plan.devices)  # enough devices?
    if plan.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {plan.repeats}")
    if plan.model_index is not None and not 0 <= plan.model_index < 2**31:
        raise UsageError(f"--model-index must be a model's position, 0 or more (below 2^31), got {plan.model_index}")
    if plan.sconf.init == "prior":
        from mcd_cli.targets.numpyro_model import is_model_target

        if not is_model_target(plan.target):
            raise UsageError(
                f"--init prior needs a NumPyro model (or a PyMC model) target, and '{plan.target.name}' "
                "is not one; use --init target, laplace or vi"
            )
    if plan.sconf.smc:
        validate_populations(plan.num_samples, plan.particles, plan.population)
        if plan.sconf.adaptive and plan.load is not None:
            raise UsageError("--schedule adaptive uses no trained kernels, so --load does not apply; drop one")
    _check_training(plan)
    if plan.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be >= 0, got {plan.checkpoint_every}")
    if plan.save is not None and plan.repeats > 1:
        raise UsageError(
            "--save stores one trained sampler: use --repeats 1 with --save (then --load it "
            "with --repeats R to estimate R times)"
        )
    if plan.load is not None and (plan.checkpoint_dir is not None or plan.resume):
        raise UsageError("--load skips training, so --checkpoint/--resume do not apply; drop one")
    if plan.resume and plan.checkpoint_dir is None:
        raise UsageError("--resume needs --checkpoint DIR (the directory the run saved to)")
    if plan.output is not None:
        files.ensure_writable(plan.output, "--output file")
    if plan.save is not None:
        files.ensure_writable(plan.save, "--save file")
    plan = _check_files(plan)  # with a checkpoint, the plan as run (its batch rounded to the devices)
    if check_mem:
        check_memory(plan, available if available is not None else available_memory())


def _check_training(plan: RunPlan) -> None:
    """The training options against the kernels and the estimator they train."""
    objective = objectives.OBJECTIVES.get(plan.tconf.objective)
    forward = registry.FORWARD[plan.sconf.sampler]
    if objective is not None and objective.detach and not forward.detachable and plan.tconf.iterations > 0:
        raise UsageError(
            f"--loss {plan.tconf.objective} holds the trajectories fixed, which needs a forward kernel with a "
            f"density at fixed points; {forward.label}'s leapfrog move has none: use --sampler ula or --loss elbo"
        )
    if plan.tconf.train_with == "smc" and plan.tconf.iterations > 0:
        if plan.sconf.adaptive:
            raise UsageError(
                "--train-with smc trains kernels on the fixed schedule, and --schedule adaptive uses none; "
                "use --schedule linear (or learned), or drop --train-with"
            )
        if not plan.sconf.resample > 0:
            raise UsageError(
                "--train-with smc resamples the training batch when its ESS/N falls below --resample, which is 0; "
                "give --resample 0.5 (the SMC estimator), or use --train-with is"
            )


def _check_files(plan: RunPlan) -> RunPlan:
    """A --load file against the settings; a --checkpoint directory's states against --resume. The
    plan, sharded as it will run when it checkpoints (a checkpoint records the batch size as run)."""
    if plan.load is not None:
        saved = plan.saved if plan.saved is not None else read_saved(plan.load, plan.target)
        differences = checkpoint.config_differences(
            saved.meta.get("sampler_config", {}), plan.sconf, ignore=NUMERICS_ONLY + ESTIMATION_FIELDS
        )
        if differences:
            raise checkpoint.CheckpointError(
                f"'{plan.load}' was trained with {', '.join(differences[:3])}; drop those options "
                "(the file's settings are used) or refit"
            )
    if plan.checkpoint_dir is not None:
        plan = sharded_plan(plan)  # a checkpoint records the batch size as run
        files.ensure_directory(plan.checkpoint_dir, "--checkpoint directory")
        for repeat in range(plan.repeats):
            path = plan.state_path(repeat)
            if not path.exists():
                continue
            meta = checkpoint.read_meta(path)
            if not plan.resume:
                raise UsageError(
                    f"'{plan.checkpoint_dir}' already holds a checkpoint (iteration "
                    f"{meta.get('iteration')}); add --resume to continue it, or choose an empty "
                    "--checkpoint directory"
                )
            check_state_meta(plan, meta, path, repeat)
    return plan
