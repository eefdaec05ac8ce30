"""The library's defaults: sizes by device, the SMC population split, and the estimation method.

Every default a run takes that is not a field default of `SamplerConfig`/`TrainConfig` lives here,
so `mcd estimate`, `mcd compare`, the library's `execute` and the benchmark cells run the same
thing; the command line's help texts read these values.
"""

from __future__ import annotations

from typing import Optional

import jax

DEFAULT_CHUNK = 1024
CPU_BATCH = 128  # --batch-size auto on a CPU: the paper's batch
ACCELERATOR_BATCH = 1024  # --batch-size auto on a GPU/TPU (see auto_batch_size)
ACCELERATOR_UNROLL = 4  # lax.scan unroll of the steps on a GPU/TPU (see auto_unroll)
DEFAULT_SAMPLES = 16_384

# SMC's particles run by default as this many independent populations: their spread is a standard
# error that survives the collapse of each population's genealogy (stats.merge_runs).
DEFAULT_POPULATIONS = 8
MIN_DEFAULT_POPULATION = 128
# Small populations carry more of the adaptive choices' bias, which grows with the dimension, so the
# default split keeps at least this many particles per dimension in each population (docs/method.md,
# "Several populations"; benchmarks/results/peers.md).
POPULATION_PER_DIM = 10


def population_size(num_samples: int, particles: Optional[int], dim: int = 0) -> int:
    """SMC particles per population: `particles` (at most `num_samples`); by default
    `num_samples / DEFAULT_POPULATIONS` when that divides evenly into populations of at least
    `max(MIN_DEFAULT_POPULATION, POPULATION_PER_DIM · dim)`, else all `num_samples` in one population.

    Example:
        >>> population_size(16384, None), population_size(512, None), population_size(512, 128)
        (2048, 512, 128)
        >>> population_size(4096, None, dim=50), population_size(4096, None, dim=200)
        (512, 4096)
    """
    if particles is not None:
        return min(particles, num_samples)
    share, rest = divmod(num_samples, DEFAULT_POPULATIONS)
    smallest = max(MIN_DEFAULT_POPULATION, POPULATION_PER_DIM * dim)
    return share if rest == 0 and share >= smallest else num_samples


def auto_batch_size(platform: Optional[str] = None) -> int:
    """`--batch-size auto`: `CPU_BATCH` on a CPU, `ACCELERATOR_BATCH` on a GPU or TPU.

    On a CPU the update's time grows in proportion to the batch, so the paper's batch is kept. On an
    accelerator a small batch's update is bound by kernel launches, not arithmetic, so a batch 8×
    larger costs far less than 8× the time and gives gradients with 8× less variance (measured:
    benchmarks/results/scaling.md). `validate` refuses the run when that batch does not fit in memory.
    """
    platform = platform or jax.devices()[0].platform
    return CPU_BATCH if platform == "cpu" else ACCELERATOR_BATCH


def auto_unroll(platform: Optional[str] = None) -> int:
    """Steps fused per iteration of the annealing scan: 1 on a CPU, `ACCELERATOR_UNROLL` on a GPU or TPU.

    On an accelerator fusing steps saves kernel launches for some compile time; on a CPU it made the
    update slower (benchmarks/results/scaling.md, the training-step rows).
    """
    platform = platform or jax.devices()[0].platform
    return 1 if platform == "cpu" else ACCELERATOR_UNROLL



# The estimation method of `mcd estimate` when an option fixes the method but leaves these unset
# (and of per-datum runs): SMC with the kernels (resampling when ESS/N falls below SMC_RESAMPLE,
# SMC_REFINE_STEPS HMC moves after each resampling), or, with the adaptive schedule,
# ADAPTIVE_REFINE_STEPS moves per temperature. Why these values: docs/method.md, "Refinement" and
# "Adaptive tempering". `SamplerConfig()` alone is the paper's importance sampling (resample 0), as
# are `mcd compare`'s estimator grid and `--preset paper`. With no method option at all, `mcd
# estimate` runs the policy below.
SMC_RESAMPLE = 0.5
SMC_REFINE = "hmc"
SMC_REFINE_STEPS = 5
ADAPTIVE_REFINE_STEPS = 15


def method_defaults(values: dict) -> None:
    """Fills the estimation method's unset fields (None) of `values` in place: `resample` defaults
    to `SMC_RESAMPLE`, `refine` to `SMC_REFINE` when the run resamples or tempers adaptively, and
    `refine_steps` to `SMC_REFINE_STEPS` when it refines on a fixed schedule, `ADAPTIVE_REFINE_STEPS`
    on the adaptive one. `resample` 0 alone is plain importance sampling.

    Example:
        >>> v = {"resample": None, "refine": None, "refine_steps": None}
        >>> method_defaults(v); v
        {'resample': 0.5, 'refine': 'hmc', 'refine_steps': 5}
    """
    if values.get("resample") is None:
        values["resample"] = SMC_RESAMPLE
    adaptive = values.get("schedule") == "adaptive" or bool(values.get("adaptive"))
    if values.get("refine") is None and (values["resample"] > 0 or adaptive):
        values["refine"] = SMC_REFINE
    if values.get("refine_steps") is None and values.get("refine") not in (None, "none"):
        values["refine_steps"] = ADAPTIVE_REFINE_STEPS if adaptive else SMC_REFINE_STEPS


# The estimation policy (`run.policy`). A run starts as adaptive tempered SMC from the safe start
# (fast and robust on posteriors: docs/method.md, "The default policy") and each pilot's verdict
# raises the effort it asks for: more HMC moves per temperature when the moves did not mix, then
# longer ones (more leapfrog steps per move), a higher conditional ESS (more temperatures) when the
# weights degenerate, larger populations when they were too small to measure; MCD kernels trained
# on the fixed schedule, inside SMC (the paper's method), when none of these is left to raise.
POLICY_START = {"backward": "ais", "iterations": 0, "adaptive": True, "resample": SMC_RESAMPLE,
                "refine": SMC_REFINE, "refine_steps": ADAPTIVE_REFINE_STEPS, "target_ess": 0.5}
POLICY_TRAINED = {"backward": "mcd", "iterations": 1000, "adaptive": False, "resample": SMC_RESAMPLE,
                  "refine": SMC_REFINE, "refine_steps": SMC_REFINE_STEPS, "target_ess": 0.5}
# With a --time-limit and --learn (`Policy.learn`, off by default since session 36: over 20 seeds of
# brownian_motion at ten minutes the learned final runs were not measurably closer to the truth
# than the adaptive ones, RMSE 0.024 against 0.029 where used, and 2 of 7 were `unreliable`, at 16
# times the wall time), where adaptive SMC's last pilot is not `ok` and the limit leaves time beside
# the final run, the policy spends POLICY_LEARN_SHARE of that time (at least
# POLICY_LEARN_MIN_SECONDS, at most POLICY_LEARN_MAX_ITERATIONS updates) learning MCD kernels
# (`POLICY_LEARNED`: trained by the clock as an importance sampler, `train_with="is"`) in a pilot
# that the final run reuses when it made at least POLICY_LEARN_MIN_UPDATES updates and is `ok`
# (training whose rate cannot make them in its time stops at the end of a chunk after the second,
# and no estimate is made of it: `training.fit`'s `min_updates`). A
# standard error above --max-se is not learned for: with a time limit the adaptive final run grows
# into the time left instead (not held to MAX_FINAL_FACTOR): no learning pilot measured against an
# `ok` adaptive one was used (many_well, d = 32, --max-se 0.01 at 3 minutes: 9 of 9 refused, 1.2-3.9
# times adaptive SMC's variance per second where both were `ok`; gmm8, d = 20, --max-se 0.005 at 10
# minutes: 5 of 5, 6.4 times), while the adaptive final run grown into the time reaches the
# --max-se asked (docs/method.md, "The default policy", step 4). The training mode is the one the learned-kernels benchmark
# (benchmarks/results/learned_pays.md) measured winning: importance-sampling training beat mcd's
# untrained SMC on brownian_motion and many_well at 3 and 10 minutes (RMSE 0.008-0.019 against
# 0.029-0.054) and on the funnel (0.255-0.264 against 0.400-0.403), where training with SMC in the
# loop got worse with longer training (brownian_motion 0.029 at 3 minutes, 0.052 at 10) and blew
# up at one seed of five on many_well (+7.6 at 10; with the moves planned, session 36, the
# ten-minute learned-smc arms gave 0.022, 0.010 and 0.223 on the three targets). Both modes lost
# at d = 200 after 150-250 updates (gauss_narrow 14-35 nats low, gmm8 errors up to 4 nats, against
# 0.07 and 0.7 untrained); inside the policy, against its raised efforts, the learned kernels had about twice the variance
# per second (docs/method.md, "The default policy", step 4). Not through a fitted flow, where the
# flow alone did better (0.003-0.018 against 0.012-0.027).
# The learned kernels' schedule starts where adaptive tempered SMC put its temperatures and is
# learned from there (`--schedule tempered`: `run.start.tempered_betas`): on the linear schedule the
# weights degenerated in the last steps (brownian_motion, 1,200 updates, seeds 0, 1, 4: resamplings
# at steps 22, 41, 51, ..., 63) and one of the pilot's four populations had k̂ 0.53-0.75 (`warn`,
# `unreliable`, `unreliable`); from the tempered start the largest was 0.41, 0.42, 0.55. With ten
# minutes (6,500 updates) on the linear schedule, 6 of 8 learning pilots were `warn` by the mean of
# their populations' k̂ and none was used; from the tempered start all 8 were `ok` and 4 were used
# (docs/method.md, "The default policy", step 4).
POLICY_LEARNED = {**POLICY_TRAINED, "train_with": "is", "learn_schedule": True, "schedule_start": "tempered"}
POLICY_LEARN_SHARE = 0.5
POLICY_LEARN_MIN_SECONDS = 30.0
POLICY_LEARN_MIN_UPDATES = 400
POLICY_LEARN_MAX_ITERATIONS = 100_000
POLICY_MAX_MOVES = 2 * ADAPTIVE_REFINE_STEPS  # moves per temperature, doubled up to this
# When the moves still do not mix at POLICY_MAX_MOVES, or when a pilot's move correlation says
# that twice as many would not either (`pilots.doubling_too_short`), the last rung makes them longer
# instead: POLICY_LONG_MOVES moves of POLICY_LEAPFROG leapfrog steps (225 gradients per particle and
# temperature, against 180 for the 60 moves of 3 steps this rung replaced). At equal cost longer
# trajectories travel further than more short ones (ballistic, not diffusive). Measured on
# nice_flow (d = 16, 16,384 particles, seeds 0-3, diagonal preconditioner): median move correlation
# 0.44-0.57 with 60 moves of 3 steps (every seed `warn`), 0.26-0.43 with 20 of 10 and 12 of 15,
# 0.20-0.32 with 15 of 15; with the dense one (`smc.adaptation.dense_factor`) 0.15-0.27 with 15 of
# 15 (4 of 4 `ok`) but still 0.34 with 60 of 3 (seed 0).
POLICY_LEAPFROG = 15
POLICY_LONG_MOVES = ADAPTIVE_REFINE_STEPS
POLICY_TARGET_ESS = (0.5, 0.7, 0.9)  # the conditional ESS/N steps a degenerate run climbs
POLICY_MAX_POPULATION_FACTOR = 2  # populations grow (doubling) to this many times the default size
POLICY_MAX_PILOTS = 4  # pilots before the final run: the cap on stages without --time-limit
# The standard error (nats) the final run is sized for: a Bayes factor known to within about 10 %,
# well inside the unit-nat steps in which evidence is read (Kass & Raftery 1995).
DEFAULT_MAX_SE = 0.1
# A pilot runs this many populations of the final run's size: the fewest for which the verdict can
# be `ok` (stats.MIN_POPULATIONS), and the final run reuses the pilot's compiled population.
PILOT_POPULATIONS = 4
# An `ok` pilot is taken only when it predicts an `ok` final run: its stationarity |z| scaled to the
# final run's size at most this (the verdict warns above 3: `stats.smc.STATIONARITY_WARN`), and its
# populations' k̂ predicting that all the final run's stay at or below 0.5 with at least this
# probability (`pilots.tail_pass_probability`: stricter than the verdict, which judges their mean;
# a learning pilot's, that their mean does, `pilots.mean_tail_pass_probability`).
PILOT_DRIFT_MARGIN = 2.5
PILOT_TAIL_PASS = 0.8
# The final run grows to reach max_se by at most this factor over --samples.
MAX_FINAL_FACTOR = 8
