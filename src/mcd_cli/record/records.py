"""The record of one run: a typed, frozen value, and its JSON line.

`run.execute` returns a `RunRecord`; the command line prints it (`report`) and writes it as one JSON
object per line (`as_dict`, schema in docs/json.md, versioned by `SCHEMA_VERSION`). The record holds
everything needed to reproduce the run: the target's spec, resolved path and content hash, and the
complete sampler, training and run settings under `config`, whose keys are `--config` keys:

    mcd estimate --json gmm8 | jq .config > run.yaml && mcd estimate --config run.yaml

reproduces the estimate bit for bit on the same machine (JSON is valid YAML). A conditional target's
run (`run.perdatum`) gives a `DatumRecord` per datum and a `DataRecord`, its summary, instead
(`record.data`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from mcd_cli._version import __version__
from mcd_cli.io.checkpoint import json_ready
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.record.messages import advice, code_dicts, texts
from mcd_cli.stats import Combined, Estimate, WeightSummary, pareto_k_limit

SCHEMA_VERSION = 3


def finite(value: Any) -> Optional[float]:
    """`value` as a float when it is a finite number, else None (JSON has no NaN)."""
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    """What identifies a target: its name and parameters, how it was named, and its content.

    `sha256` hashes the target file's bytes (or the YAML read from stdin), the --data file's bytes
    and the parameters, so two records with the same hash were computed on the same density.
    """

    name: str
    dim: int
    params: dict
    spec: Optional[str]
    path: Optional[str]
    sha256: str
    log_z: Optional[float]
    args: Optional[dict] = None
    model: Optional[str] = None
    data: Optional[str] = None

    @classmethod
    def of(
        cls,
        target: Any,
        spec: Optional[str] = None,
        text: Optional[str] = None,
        args: Optional[dict] = None,
        model: Optional[str] = None,
        data: Optional[str] = None,
    ) -> "TargetInfo":
        """The identity of `target`, named `spec` on the command line; `text`: its stdin content;
        `args`, `model`, `data`: the --param values, --model name and --data file it was loaded
        with (None: not recorded; the config then names the target's own parameters)."""
        params = json_ready(dict(target.params))
        digest = hashlib.sha256()
        source = str(getattr(target, "source", "") or "")
        path = Path(source) if source and source not in ("builtin", "<stdin>") else None
        if text is not None:
            digest.update(text.encode())
        elif path is not None and path.is_file():
            digest.update(path.read_bytes())
        else:
            digest.update(f"{target.name}:{target.dim}:{source}".encode())
        if data is not None and Path(data).is_file():
            digest.update(Path(data).read_bytes())
        digest.update(json.dumps(params, sort_keys=True).encode())
        return cls(
            name=str(target.name),
            dim=int(target.dim),
            params=params,
            spec=spec,
            path=str(path) if path is not None else (source or None),
            sha256=digest.hexdigest(),
            log_z=finite(target.log_z),
            args=json_ready(dict(args)) if args is not None else None,
            model=model,
            data=data,
        )


def _seconds(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(float(value), 3)


def _summary(sizes: Optional[tuple]) -> Optional[dict]:
    """The initial step sizes in brief: first, median, last, smallest and largest."""
    if not sizes:
        return None
    values = sorted(sizes)
    return {
        "first": sizes[0],
        "median": values[len(values) // 2],
        "last": sizes[-1],
        "min": values[0],
        "max": values[-1],
    }


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One `mcd estimate` run (or one cell of `mcd compare`): settings, estimate, diagnostics.

    `combined` holds the estimate, its verdict and the headline standard error (`stats`): with one
    repeat that estimate's own (delta method), with R repeats their mean and the spread over the
    repeats (sd/√R); none at all when the verdict is unreliable. Diagnostics are averaged over
    repeats, except `pareto_k` (the worst) and the counts (summed).
    """

    target: TargetInfo
    sampler: SamplerConfig
    training: TrainConfig
    combined: Combined
    seed: int
    num_samples: int
    repeats: int
    x64: bool
    iterations_run: int
    skipped_steps: int
    recoveries: int
    train_seconds: float
    estimate_seconds: float
    device: str
    version: str
    devices: int = 1  # devices the particles were sharded over, all processes together
    processes: int = 1  # processes of a --distributed run
    loaded_from: Optional[str] = None
    init_warnings: tuple = ()  # what the initial-distribution fit warned about
    elbo_history: tuple = ()  # per repeat: the training ELBO of every iteration (NaN if skipped; from the checkpoint before a resume)
    init_method: str = ""  # the initial distribution used (auto resolves to auto:target, auto:vi, ...)
    start_seconds: float = 0.0  # the initial-distribution fit and the curvature run
    initial_step_sizes: Optional[tuple] = None  # δ_1 … δ_K the curvature run chose (None: fixed sizes)
    initial_step_scale: Optional[float] = None  # the factor the step sizes' AIS check applied (run.ais_step_scale)
    stop_reasons: tuple = ()  # per repeat: why training stopped ("iterations", "plateau" or "time")
    model_index: Optional[int] = None  # model i of a comparison (root key fold_in(key(seed), i))
    weights: tuple[WeightSummary, ...] = ()  # per repeat: the log weights' histogram and fitted tail
    kind: str = "estimate"  # "model" for a model of `mcd compare A B ...`
    smc: tuple = ()  # per repeat: the SMC diagnostics (`run.estimate_smc`); empty without SMC
    particles: Optional[int] = None  # the SMC population size asked for (None: one population)
    policy: Optional[dict] = None  # the estimation policy's stages (`mcd_cli.policy`); None: method as given
    stage: Optional[int] = None  # stage s of a policy run (its keys: `run.plan.estimation_root`)
    train_stage: Optional[int] = None  # the stage whose training keys a policy's final run used
    checkpoint_failures: int = 0  # training checkpoints that could not be written (the run went on)
    compile_seconds: Optional[float] = None  # of the run's wall time, compiling (`runtime.compile_clock`)
    start_compile_seconds: Optional[float] = None  # of `start_seconds`, compiling
    import_seconds: Optional[float] = None  # the command's import of mcd_cli and JAX (None: a library call)
    # the final SMC populations' posterior draws, `{name: (chains, draws, ...)}` (`run.draws`), when
    # the plan kept them (--posterior); not part of the JSON record
    draws: Optional[dict] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def estimates(self) -> tuple[Estimate, ...]:
        return self.combined.estimates

    @property
    def log_z(self) -> float:
        return self.combined.log_z

    @property
    def log_z_stderr(self) -> Optional[float]:
        return self.combined.log_z_stderr

    @property
    def status(self) -> str:
        return self.combined.status.value

    @property
    def label(self) -> str:
        return self.sampler.label

    @property
    def ess(self) -> float:
        return sum(e.ess for e in self.estimates) / len(self.estimates)

    @property
    def elbo(self) -> float:
        return sum(e.elbo for e in self.estimates) / len(self.estimates)

    @property
    def pareto_k(self) -> float:
        return max(e.pareto_k for e in self.estimates)

    @property
    def train_elbo_last(self) -> Optional[float]:
        """Mean training ELBO over the last 10% of the iterations run (all repeats), or None."""
        tails = [h[-max(1, len(h) // 10):] for h in self.elbo_history if len(h)]
        values = [v for tail in tails for v in tail if math.isfinite(v)]
        return sum(values) / len(values) if values else None

    def _what_ran(self) -> dict:
        """The method and its kernels, moves and schedule: only what ran (adaptive tempered SMC
        runs no annealing kernels, so it names none)."""
        s = self.sampler
        return {
            "method": s.method,
            "sampler": None if s.adaptive else s.sampler,
            "backward": None if s.adaptive else s.backward,
            "steps": None if s.adaptive else int(s.steps),
            "temperatures": self.temperatures,
            "moves": s.moves,
            "schedule": s.schedule,
        }

    @property
    def temperatures(self) -> Optional[int]:
        """Adaptive tempering: the most temperatures any population took (each one's: `smc.steps`)."""
        steps = [k for d in self.smc for k in d["steps"]]
        return int(max(steps)) if self.sampler.adaptive and steps else None

    @property
    def error(self) -> Optional[float]:
        return None if self.target.log_z is None else self.log_z - self.target.log_z

    def config(self) -> dict:
        """Every setting of the run, keyed as `--config` accepts them (reproduces the run)."""
        param = self.target.args if self.target.args is not None else self.target.params
        out: dict = {"target": self.target.spec or self.target.path, "param": param}
        out.update({k: v for k, v in (("model", self.target.model), ("data", self.target.data)) if v is not None})
        out.update(dataclasses.asdict(self.sampler))
        if self.sampler.adaptive:  # no forward kernels run (the moves' reversal is `ais`); their number is an outcome
            del out["sampler"], out["steps"]
        out.update(dataclasses.asdict(self.training))
        for name in ("max_seconds", "min_updates"):  # training's clock: only a policy's learning pilot has one
            if out[name] is None:
                del out[name]
        out.update(samples=self.num_samples, seed=self.seed, repeats=self.repeats, x64=self.x64)
        if self.loaded_from is not None:
            out["load"] = self.loaded_from
        if self.model_index is not None:
            out["model_index"] = self.model_index
        if self.particles is not None:
            out["particles"] = self.particles
        if self.stage is not None:
            out["stage"] = self.stage
        if self.train_stage is not None:
            out["train_stage"] = self.train_stage
        return json_ready(out)

    def smc_section(self) -> Optional[dict]:
        """The record's `smc` section: the first repeat's per-step trace (its first population) and
        its settings; counts, final ESS/N and acceptance over every repeat and population."""
        return smc_section(self.smc)

    @property
    def log_z_is(self) -> tuple[Optional[float], Optional[float]]:
        """The importance-sampling estimate of the same kernels beside an SMC estimate (mean over
        repeats, and its standard error: the run's own with one repeat, sd/√R with more)."""
        values = [d["log_z_is"] for d in self.smc if d.get("log_z_is") is not None]
        if not values or len(values) != len(self.smc):
            return None, None
        if len(values) == 1:
            return values[0], self.smc[0]["log_z_is_stderr"]
        from mcd_cli.stats import combine

        return combine(values)

    def as_dict(self) -> dict:
        """The JSON record (docs/json.md): flat keys, every number finite or None."""
        n = int(sum(e.num_samples for e in self.estimates) / len(self.estimates))
        ess, k = self.ess, self.pareto_k
        s, t = self.sampler, self.training
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "target": self.target.name,
            "dim": self.target.dim,
            "target_params": self.target.params,
            "target_spec": self.target.spec,
            "target_path": self.target.path,
            "target_sha256": self.target.sha256,
            "label": self.label,
            **self._what_ran(),
            "log_z": finite(self.log_z),
            "log_z_stderr": finite(self.log_z_stderr),
            "log_z_stderr_method": self.combined.log_z_stderr_method,
            "status": self.status,
            "reasons": texts(self.combined.reasons),
            "reason_codes": code_dicts(self.combined.reasons),
            "advice": advice(self.combined),
            "delta_stderr": finite(self.combined.delta_stderr),
            "replicate_stderr": finite(self.combined.replicate_stderr),
            "stderr_disagree": self.combined.stderr_disagree,
            "log_z_repeats": [finite(e.log_z) for e in self.estimates],
            "status_repeats": [e.status.value for e in self.estimates],
            "log_z_is": finite(self.log_z_is[0]),
            "log_z_is_stderr": finite(self.log_z_is[1]),
            "smc": self.smc_section(),
            "elbo": finite(self.elbo),
            "ess": finite(ess),
            "ess_per_sample": finite(ess / n) if n else None,
            "pareto_k": finite(k),
            "pareto_tail": k != -math.inf,
            "pareto_k_ok": bool(k <= pareto_k_limit(n)),
            "num_samples": n,
            "nonfinite_weights": int(sum(e.num_nonfinite for e in self.estimates)),
            "reference_log_z": self.target.log_z,
            "error": finite(self.error),
            "seed": int(self.seed),
            "repeats": len(self.estimates),
            "iterations": int(t.iterations),
            "iterations_run": int(self.iterations_run),
            "batch_size": int(t.batch_size),
            "lr": float(t.lr),
            "hidden": int(s.hidden),
            "learn_schedule": bool(s.learn_schedule),
            "train_elbo_last": finite(self.train_elbo_last),
            "init": s.init,
            "init_method": self.init_method or s.init,
            "init_warnings": list(self.init_warnings),
            "step_size_rule": s.step_size,
            "initial_step_sizes": _summary(self.initial_step_sizes),
            "initial_step_scale": None if self.initial_step_scale is None else float(self.initial_step_scale),
            "loss": t.objective,
            "stop": t.stop,
            "stop_reasons": list(self.stop_reasons),
            "start_seconds": round(float(self.start_seconds), 3),
            "start_compile_seconds": _seconds(self.start_compile_seconds),
            "skipped_steps": int(self.skipped_steps),
            "recoveries": int(self.recoveries),
            "checkpoint_failures": int(self.checkpoint_failures),
            "loaded_from": self.loaded_from,
            "model_index": self.model_index,
            "train_seconds": round(float(self.train_seconds), 3),
            "estimate_seconds": round(float(self.estimate_seconds), 3),
            "compile_seconds": _seconds(self.compile_seconds),
            "import_seconds": _seconds(self.import_seconds),
            "device": self.device,
            "devices": int(self.devices),
            "processes": int(self.processes),
            "precision": "float64" if self.x64 else "float32",
            "version": self.version,
            "config": self.config(),
            "policy": self.policy,
        }

    def to_json(self) -> str:
        """One JSON line; refuses NaN/inf (the record holds None instead)."""
        return json.dumps(self.as_dict(), allow_nan=False, separators=(", ", ": "))


def smc_section(repeats: Sequence[dict]) -> Optional[dict]:
    """The `smc` section of a record from each repeat's SMC diagnostics (`run.estimate_populations`):
    the first repeat's settings and per-step trace (its first population); counts, final ESS/N and
    acceptance over every repeat and population. None without SMC."""
    if not repeats:
        return None
    first = dict(repeats[0])
    accept = [d["mean_acceptance"] for d in repeats if d["mean_acceptance"] is not None]
    first.update(
        steps=[k for d in repeats for k in d["steps"]],
        resamplings=[r for d in repeats for r in d["resamplings"]],
        final_ess=[finite(e) for d in repeats for e in d["final_ess"]],
        mean_acceptance=finite(sum(accept) / len(accept)) if accept else None,
        log_z_populations=[finite(v) for d in repeats for v in d["log_z_populations"]],
        genealogy_stderr=[finite(v) for d in repeats for v in d["genealogy_stderr"]],
        log_z_is_repeats=[finite(d["log_z_is"]) for d in repeats],
    )
    for key in ("ess", "acceptance", "step_size", "beta"):
        first[key] = [finite(v) for v in first[key]]
    return json_ready(first)


def comparison_record(comparison: Any, records: Sequence[dict], seed: int) -> dict:
    """The `kind: comparison` record of `mcd compare A B ...` (docs/json.md).

    Args:
        comparison: the `comparison.Comparison` of the models.
        records: the models' records (`kind: model`), in order.
        seed: the root seed (model i used `fold_in(key(seed), i)`).
    """
    body = comparison.as_dict()
    for model, rec in zip(body["models"], records):
        model.update(
            target=rec["target"],
            target_spec=rec["target_spec"],
            target_sha256=rec["target_sha256"],
            model_index=rec.get("model_index"),
            label=rec["label"],
        )
        for key in ("log_z", "log_z_stderr", "log_bf", "log_bf_stderr", "two_ln_b"):
            model[key] = finite(model[key])
    return {"schema_version": SCHEMA_VERSION, "kind": "comparison", **body, "seed": int(seed), "version": __version__}
