"""The record of a run: versioned, complete, and enough to reproduce the run bit for bit."""

import json

import numpy as np
import pytest
from conftest import NO_TRAIN, TINY, records

from mcd_cli import RunPlan, SamplerConfig, TrainConfig, execute, load_target
from mcd_cli.record.messages import texts
from mcd_cli.record import SCHEMA_VERSION, datum_record
from mcd_cli.stats import summarize

_TIMINGS = ("train_seconds", "estimate_seconds", "start_seconds", "compile_seconds", "start_compile_seconds", "import_seconds")


@pytest.mark.parametrize(
    "settings",
    [pytest.param(TINY + ["--iterations", "3", "--sampler", "uha", "--backward", "mcd"], marks=pytest.mark.slow), NO_TRAIN],
)
def test_a_json_line_reproduces_its_run_bit_for_bit(mcd, gauss_yaml, tmp_path, settings):
    code, out, err = mcd(["estimate", gauss_yaml, *settings, "--seed", "3", "--json"])
    assert code == 0, err
    first = records(out)[0]
    config = tmp_path / "run.json"
    config.write_text(json.dumps(first["config"]))
    code, out, err = mcd(["estimate", "--config", config, "--json"])
    assert code == 0, err
    again = records(out)[0]
    assert {k: v for k, v in again.items() if k not in _TIMINGS} == {
        k: v for k, v in first.items() if k not in _TIMINGS
    }
    assert again["log_z"] == first["log_z"] and first["log_z"] is not None


def test_a_bundled_target_is_reproduced_from_its_name_and_parameters(mcd, tmp_path):
    code, out, err = mcd(["estimate", "gmm8", "--param", "dim=2", *NO_TRAIN, "--json"])
    assert code == 0, err
    first = records(out)[0]
    assert first["config"]["target"] == "gmm8"
    (tmp_path / "run.yaml").write_text(json.dumps(first["config"]))
    code, out, err = mcd(["estimate", "--config", tmp_path / "run.yaml", "--json"])
    assert code == 0, err
    assert records(out)[0]["log_z"] == first["log_z"]


def test_the_record_identifies_the_target_and_holds_every_setting(mcd, gauss_yaml, tmp_path):
    code, out, _ = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--json"])
    rec = records(out)[0]
    assert rec["schema_version"] == SCHEMA_VERSION
    assert rec["target_spec"] == str(gauss_yaml) and rec["target_path"] == str(gauss_yaml.resolve())
    assert len(rec["target_sha256"]) == 64
    assert rec["devices"] == 1 and rec["processes"] == 1  # one device, no --distributed
    fields = set(SamplerConfig.__dataclass_fields__) | set(TrainConfig.__dataclass_fields__)
    clock = {"max_seconds", "min_updates"}  # training's clock: only a policy's learning pilot has one
    assert fields - clock <= set(rec["config"]) and not clock & set(rec["config"]), fields - set(rec["config"])
    # The hash follows the file's content, not its name.
    gauss_yaml.write_text(gauss_yaml.read_text().replace("loc: 1.0", "loc: 1.5"))
    code, out, _ = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--json"])
    assert records(out)[0]["target_sha256"] != rec["target_sha256"]


def test_execute_is_a_library_call_returning_a_frozen_record():
    target = load_target("gmm8", {"dim": "2"})
    plan = RunPlan(target, SamplerConfig(steps=2, backward="ais"), TrainConfig(iterations=0), num_samples=128, seed=5)
    record = execute(plan)
    with pytest.raises(AttributeError):
        record.log_z = 0.0
    assert record.as_dict()["seed"] == 5 and record.estimates[0].num_samples == 128
    # Same plan, same key derivation: the same numbers (benchmarks call execute for this reason).
    assert execute(plan).log_z == record.log_z


def test_a_datum_record_has_its_reasons_as_texts_and_as_codes():
    est = summarize(np.r_[np.zeros(200), np.nan])  # one weight dropped: a warning
    rec = datum_record(4, est, known_log_z=0.0)
    assert rec["status"] == "warn" and rec["reasons"] == texts(est.reasons)
    assert rec["reason_codes"] == [{"code": "nonfinite_weights", "params": {"dropped": 1, "total": 201}}]
    assert list(rec).index("reason_codes") == list(rec).index("reasons") + 1
    failed = datum_record(5, None, None, error="all 8 importance weights are zero or not finite")
    assert failed["status"] == "failed" and failed["reasons"] == ["all 8 importance weights are zero or not finite"]
    assert failed["reason_codes"] == [{"code": "failed", "params": {"error": failed["reasons"][0]}}]
    for r in (rec, failed):
        json.dumps(r, allow_nan=False)
