"""The records of a conditional target's run: one per datum (`DatumRecord`) and the summary of the
data (`DataRecord`), with their JSON lines (docs/json.md, "Per-datum records")."""

from __future__ import annotations

import dataclasses
from typing import Optional

from mcd_cli._version import __version__
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.record.messages import code_dicts, texts
from mcd_cli.record.records import SCHEMA_VERSION, TargetInfo, finite, smc_section
from mcd_cli.stats import DataSummary, Estimate, Reason


@dataclasses.dataclass(frozen=True)
class DatumRecord:
    """One datum's estimate of a conditional target (`"record": "datum"`, docs/json.md).

    The fields are the JSON values themselves (numbers finite or None), so a record read back from a
    checkpoint's data log (`from_dict`) equals the one written. `status` is `"failed"` when the datum's
    weights were all unusable: `log_z` is None and `reasons` says why. `smc` is the datum's `smc`
    section (`smc_section`), None for importance sampling.
    """

    datum: int
    log_z: Optional[float]
    log_z_stderr: Optional[float]
    log_z_stderr_method: str
    delta_stderr: Optional[float]
    ess: Optional[float]
    num_samples: int
    pareto_k: Optional[float]
    elbo: Optional[float]
    status: str
    reasons: tuple[str, ...]
    reason_codes: tuple[dict, ...]
    known_log_z: Optional[float]
    error: Optional[float]  # log_z - known_log_z
    seconds: float
    smc: Optional[dict]

    @classmethod
    def of(
        cls, datum: int, est: Optional[Estimate], known_log_z: Optional[float], error: str = "",
        smc: Optional[dict] = None,
    ) -> "DatumRecord":
        """The record of datum `datum` from its estimate (None: failed, `error` says why) and its SMC
        diagnostics (`run.estimate_populations`, None for importance sampling)."""
        section, known = smc_section(() if smc is None else (smc,)), finite(known_log_z)
        if est is None:
            codes = tuple(code_dicts([Reason("failed", {"error": error})]))
            return cls(
                datum=int(datum), log_z=None, log_z_stderr=None, log_z_stderr_method="none", delta_stderr=None,
                ess=None, num_samples=0, pareto_k=None, elbo=None, status="failed", reasons=(error,),
                reason_codes=codes, known_log_z=known, error=None, seconds=0.0, smc=section,
            )
        return cls(
            datum=int(datum), log_z=finite(est.log_z), log_z_stderr=finite(est.log_z_stderr),
            log_z_stderr_method=est.log_z_stderr_method, delta_stderr=finite(est.delta_stderr), ess=finite(est.ess),
            num_samples=int(est.num_samples), pareto_k=finite(est.pareto_k), elbo=finite(est.elbo),
            status=est.status.value, reasons=tuple(texts(est.reasons)), reason_codes=tuple(code_dicts(est.reasons)),
            known_log_z=known, error=finite(est.log_z - known_log_z) if known_log_z is not None else None,
            seconds=round(float(est.seconds), 4), smc=section,
        )

    @classmethod
    def from_dict(cls, line: dict) -> "DatumRecord":
        """The record of a JSON line written from `as_dict` (KeyError if a field is missing)."""
        values = {f.name: line[f.name] for f in dataclasses.fields(cls)}
        return cls(**{**values, "reasons": tuple(values["reasons"]), "reason_codes": tuple(values["reason_codes"])})

    def as_dict(self) -> dict:
        """The JSON line (docs/json.md)."""
        out = {"record": "datum", **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}
        return {**out, "reasons": list(self.reasons), "reason_codes": list(self.reason_codes)}


def datum_record(
    datum: int, est: Optional[Estimate], known_log_z: Optional[float], error: str = "", smc: Optional[dict] = None
) -> dict:
    """The JSON line of one datum: `DatumRecord.of(...).as_dict()`."""
    return DatumRecord.of(datum, est, known_log_z, error, smc).as_dict()


@dataclasses.dataclass(frozen=True)
class DataRecord:
    """The summary of a conditional target's per-datum run (`"record": "summary"`, docs/json.md).

    `summary` combines the data with a finite estimate (`stats.summarize_data`); `known_mean_log_z`
    is the mean of the file's `log_z(x)` over them (None unless every one has it); `smc` is the
    summary's `smc` section (None for importance sampling); `training` holds the iterations as run;
    `policy` is the default policy's account of its stages (None when options fixed the method).
    """

    target: TargetInfo
    sampler: SamplerConfig
    training: TrainConfig
    amortise: bool
    data_index: tuple[int, int]  # [start, stop) in the full data set
    num_data: int
    summary: DataSummary
    known_mean_log_z: Optional[float]
    counts: dict  # data per status: ok, warn, unreliable, failed
    num_samples: int  # per datum
    smc: Optional[dict]
    data_batch: int
    skipped_steps: int
    recoveries: int
    train_seconds: float
    estimate_seconds: float
    seed: int
    device: str
    x64: bool
    version: str = __version__
    policy: Optional[dict] = None  # the default policy's stages (run.perdatum); None when options fixed the method
    checkpoint_failures: int = 0  # data-log lines that could not be written (the run went on)

    def as_dict(self) -> dict:
        """The JSON line (docs/json.md)."""
        s, t, c = self.sampler, self.training, self.counts
        return {
            "record": "summary", "schema_version": SCHEMA_VERSION, "target": self.target.name, "dim": self.target.dim,
            "target_info": dataclasses.asdict(self.target), "label": s.label, "method": s.method,
            "sampler": None if s.adaptive else s.sampler, "backward": None if s.adaptive else s.backward,
            "steps": None if s.adaptive else s.steps, "moves": s.moves, "amortise": bool(self.amortise),
            "data_index": list(self.data_index), "num_data": self.num_data,
            "num_estimated": self.summary.num_data, "mean_log_z": finite(self.summary.mean),
            "mc_stderr": finite(self.summary.mc_stderr), "data_stderr": finite(self.summary.data_stderr),
            "known_mean_log_z": self.known_mean_log_z, "counts": dict(c),
            "not_ok": c["warn"] + c["unreliable"] + c["failed"], "num_samples": self.num_samples, "smc": self.smc,
            "iterations": t.iterations, "batch_size": t.batch_size, "data_batch": self.data_batch, "lr": t.lr,
            "skipped_steps": self.skipped_steps, "recoveries": self.recoveries,
            "checkpoint_failures": int(self.checkpoint_failures), "train_seconds": round(self.train_seconds, 3), "estimate_seconds": round(self.estimate_seconds, 3),
            "seed": self.seed, "sampler_config": dataclasses.asdict(s), "train_config": dataclasses.asdict(t),
            "device": self.device, "precision": "float64" if self.x64 else "float32", "version": self.version,
            "policy": self.policy,
        }
