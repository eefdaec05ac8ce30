"""What a per-datum run keeps as its data are estimated (`run.perdatum`): a few numbers per datum
and running means, so its memory does not grow with the diagnostics of every datum."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mcd_cli.config import SamplerConfig
from mcd_cli.record import DatumRecord, finite
from mcd_cli.run.estimate import smc_settings


class SMCTotals:
    """Running means over the data of the SMC diagnostics (constant memory in the number of data)."""

    def __init__(self) -> None:
        self.count, self.steps, self.resamplings, self.final_ess = 0, 0.0, 0.0, 0.0
        self.accept, self.accept_count, self.log_z_is, self.is_count = 0.0, 0, 0.0, 0

    def add(self, d: dict) -> None:
        self.count += 1
        self.steps += float(np.mean(d["steps"]))
        self.resamplings += float(np.mean(d["resamplings"]))
        self.final_ess += float(np.mean(d["final_ess"]))
        if d["mean_acceptance"] is not None:
            self.accept, self.accept_count = self.accept + d["mean_acceptance"], self.accept_count + 1
        if d["log_z_is"] is not None and math.isfinite(d["log_z_is"]):
            self.log_z_is, self.is_count = self.log_z_is + d["log_z_is"], self.is_count + 1

    def section(self, s: SamplerConfig, population: int, populations: int) -> dict:
        mean = lambda total, n: finite(total / n) if n else None  # noqa: E731
        return {
            **smc_settings(s, population, populations),
            "mean_steps": mean(self.steps, self.count),
            "mean_resamplings": mean(self.resamplings, self.count),
            "mean_final_ess": mean(self.final_ess, self.count),
            "mean_acceptance": mean(self.accept, self.accept_count),
            "mean_log_z_is": mean(self.log_z_is, self.is_count) if self.is_count == self.count else None,
        }


class Tally:
    """What the summary keeps as the data are estimated: each datum's log Ẑ and standard error (two
    numbers), the counts by status, the SMC running means, and the training and estimation totals."""

    def __init__(self) -> None:
        self.log_z: list[float] = []
        self.stderr: list[float] = []
        self.known: list[float] = []
        self.counts = {"ok": 0, "warn": 0, "unreliable": 0, "failed": 0}
        self.codes: set[str] = set()  # the distinct reason codes of the data's verdicts
        self.smc = SMCTotals()
        self.train_seconds, self.estimate_seconds, self.skipped, self.recoveries = 0.0, 0.0, 0, 0
        self.checkpoint_failures = 0  # data-log lines that could not be written (the run went on)

    def trained(self, params: Any, seconds: float, skipped: int, recoveries: int) -> Any:
        """Counts one training (`_fit`'s result) and returns its parameters."""
        self.train_seconds, self.skipped, self.recoveries = (
            self.train_seconds + seconds, self.skipped + skipped, self.recoveries + recoveries
        )
        return params

    def add(self, rec: DatumRecord) -> None:
        if rec.smc is not None:
            self.smc.add(rec.smc)
        self.counts[rec.status] += 1
        self.codes.update(r["code"] for r in rec.reason_codes)
        if rec.log_z is not None:
            self.log_z.append(rec.log_z)
            self.stderr.append(rec.log_z_stderr if rec.log_z_stderr is not None else rec.delta_stderr)
            if rec.known_log_z is not None:
                self.known.append(rec.known_log_z)
