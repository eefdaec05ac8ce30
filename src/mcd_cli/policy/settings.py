"""What the default policy aims at (`Policy`), and the constants of its ladder.

Each constant was chosen by a measurement; docs/policy.md gives it, with the result file.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from mcd_cli.run.defaults import ADAPTIVE_REFINE_STEPS

# The standard error (nats) the final run is sized for: a Bayes factor known to within about 10 %
# (Kass & Raftery 1995).
DEFAULT_MAX_SE = 0.1
MAX_PILOTS = 4  # pilots before the final run: the cap on stages without --time-limit
# A pilot runs this many populations of the final run's size: the fewest for which the verdict can
# be `ok` (stats.MIN_POPULATIONS); the final run reuses the pilot's compiled population.
PILOT_POPULATIONS = 4
# Whether an `ok` pilot whose SE is within --max-se is the answer (no fresh final run); its
# populations are then tuned as a final run's are (`refine_tuning="pilot"`), since particle-tuned
# pilots are biased low (docs/benchmarks.md, "Could the accepted pilot be the answer?"). Chosen by
# the calibration, both rules on the same seeds, each with its own compilation cache (docs/method.md,
# "The answer from the pilot"): 167 against 157 of 179 runs `ok` and covering. False is the rule
# before, a fresh final run after every usable pilot (`calibration.py --fresh-final`).
ANSWER_FROM_PILOT = True
MAX_FINAL_FACTOR = 8  # the final run grows to reach max_se by at most this factor over --samples

# The ladder of adaptive SMC's efforts (docs/policy.md, "The ladder").
MAX_MOVES = 2 * ADAPTIVE_REFINE_STEPS  # moves per temperature, doubled up to this
LONG_MOVES = ADAPTIVE_REFINE_STEPS  # the last rung of mixing: this many moves ...
LONG_LEAPFROG = 15  # ... of this many leapfrog steps each
TARGET_ESS = (0.5, 0.7, 0.9)  # the conditional ESS/N steps a degenerate run climbs
MAX_POPULATION_FACTOR = 2  # populations grow (doubling) to this many times the default size

# An `ok` pilot must predict an `ok` final run (`forecasts.predicts_ok`): its stationarity |z|
# scaled to the final run's size at most DRIFT_MARGIN, and its populations' k̂ predicting that all
# the final run's stay at or below 0.5 with at least TAIL_PASS probability.
DRIFT_MARGIN = 2.5
TAIL_PASS = 0.8
# Whether a pilot that is to be the answer (`ok`, SE within --max-se) is asked the tail margin too.
# It forecasts the tails of a final run that, for such a pilot, is not made; the pilot's own verdict
# has judged its tails. Measured on the calibration of 707f852 (540 runs; the same runs, both rules:
# each record holds the pilot this rule reports), asking it sent 125 answering pilots on to more
# stages, 112 of which ended `ok` & covering against 117 for the pilots themselves, and cost 30 % of
# the time (docs/policy.md, "The margins"). True is the rule before (`calibration.py
# --answer-tail-margin`).
ANSWER_TAIL_MARGIN = False
# An `ok` pilot that is to be the answer must also have its stuck particles (`smc.stationarity`)
# carrying at most STUCK_MARGIN of its weight, half the verdict's `stats.smc.STUCK_WARN`: the share
# is read from the few dozen particles in a neck, and funnel seed 19 (6c700d5) was answered by an
# `ok` pilot at 0.42 % stuck, 0.35 nats (7 SE) low, where the flow transport this reason asks for gave
# −0.008 ± 0.007. Not asked of a pilot a final run follows: that run's verdict is its own, and asked
# of every pilot it cost nice_mnist and brownian_motion a flow each, 4 times the time, for worse
# answers (docs/policy.md, "The margins").
STUCK_MARGIN = 0.0025

# --learn: the share of the time to spare that learning MCD kernels may spend, its floor, the
# updates its kernels need to be used, and the cap on updates (docs/policy.md, "Learned kernels").
LEARN_SHARE = 0.5
LEARN_MIN_SECONDS = 30.0
LEARN_MIN_UPDATES = 400
LEARN_MAX_ITERATIONS = 100_000

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `1.5m`, `2h` or `1d`; ValueError with what is wrong.

    Example:
        >>> parse_duration("90s"), parse_duration("10m"), parse_duration("2")
        (90.0, 600.0, 2.0)
    """
    value = str(text).strip().lower()
    number, unit = (value[:-1], value[-1]) if value[-1:] in _UNITS else (value, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"a duration is a number with s, m, h or d, such as 90s or 10m; got {text!r}") from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a duration must be positive, got {text!r}")
    return seconds


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the default policy aims at and may spend.

    Attributes:
        max_se: the standard error (nats) the final run is sized to reach.
        time_limit: seconds the whole run may take (None: no limit; `max_pilots` bounds it).
        max_pilots: pilots before the final run.
        learn: with a time limit, spend time to spare on learned MCD kernels where adaptive SMC's
            pilots end short; off by default (docs/policy.md, "Learned kernels").
    """

    max_se: float = DEFAULT_MAX_SE
    time_limit: Optional[float] = None
    max_pilots: int = MAX_PILOTS
    learn: bool = False

    def __post_init__(self):
        if not (self.max_se > 0 and math.isfinite(self.max_se)):
            raise ValueError(f"max_se must be a positive number of nats, got {self.max_se}")
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {self.time_limit}")
        if self.max_pilots < 1:
            raise ValueError(f"max_pilots must be at least 1, got {self.max_pilots}")
