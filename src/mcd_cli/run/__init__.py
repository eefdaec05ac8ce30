"""One run, start to finish, as a library call: plan → start → fit → estimate → record.

`validate(plan)` fails fast on everything that can be known before training (paths that cannot be
written, files that do not match, memory that is not there); `execute(plan, progress)` does the
work and returns a `RunRecord`. Nothing here imports the command line or the renderer: progress
goes through the small `Progress` protocol, which the CLI implements with rich.

Modules: `defaults` (the library's defaults and the estimation method), `plan` (`RunPlan`, keys,
sizes), `memory`, `validate`, `start` (initial distribution and pilot), `fit` (checkpointed
training), `smc_kernels` (the SMC kernels of a configuration, and the SMC run), `estimate` (the
estimators), `draws` (the final populations as posterior draws), `execute`. The default policy,
which chooses the method and the effort by running plans, is the floor above (`mcd_cli.policy`).
"""

from mcd_cli.run.defaults import (
    ACCELERATOR_BATCH, ACCELERATOR_UNROLL, ADAPTIVE_REFINE_STEPS, CPU_BATCH, DEFAULT_CHUNK,
    ADAPTIVE_SMC, DEFAULT_POPULATIONS, LEARNED_MCD, TRAINED_MCD, Method,
    DEFAULT_SAMPLES, MIN_DEFAULT_POPULATION, POPULATION_PER_DIM, SMC_REFINE, SMC_REFINE_STEPS, SMC_RESAMPLE,
    auto_batch_size, auto_unroll, method_defaults, population_size,
)
from mcd_cli.run.plan import (
    NUMERICS_ONLY, NoProgress, Progress, RunPlan, SavedRun, device_name, file_meta, plan_warnings, read_saved,
    root_key, rounding_notes, sampler_config_from_file, sharded_plan, sharded_population, sharded_sizes, version,
)
from mcd_cli.run.memory import available_memory, check_memory, format_bytes, host_memory, memory_needed
from mcd_cli.run.validate import check_state_meta, validate, validate_populations
from mcd_cli.path.step_sizes import ais_step_scale  # re-exported: `run.ais_step_scale` is how docs and benchmarks name it
from mcd_cli.run.start import INIT_STREAM, CURVATURE_STREAM, SCALE_STREAM, Start, initial_target, start
from mcd_cli.run.fit import default_interrupt_dir
# `smc_kernels` stays the module's name here (`run.smc_kernels.smc_kernels(sconf)` the function).
from mcd_cli.run.smc_kernels import compiled as compiled_smc, run_smc, stationarity_moves
from mcd_cli.run.draws import DRAWS_STREAM, posterior_draws
from mcd_cli.run.estimate import estimate_populations, estimate_smc, smc_settings, stationarity_of
from mcd_cli.run.execute import execute

__all__ = [name for name in dir() if not name.startswith("_")]
