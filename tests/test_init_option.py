"""--init: the initial distribution fitted from the target, once per run, recorded."""

from conftest import one_line_error, records

NARROW = """\
name: narrow
description: "N(2, 0.05² I) in d = 3, declared start N(0, I); log Z = 0"
family: normal
params: {dim: 3, loc: 2.0, scale: 0.05}
"""
SETTINGS = ["--steps", "8", "--samples", "2048", "--backward", "ais", "--iterations", "0"]


def test_laplace_start_fixes_a_posterior_far_narrower_than_its_start(mcd, tmp_path):
    path = tmp_path / "narrow.yaml"
    path.write_text(NARROW)
    code, out, err = mcd(["estimate", path, *SETTINGS, "--init", "laplace", "--init-cov", "full", "--json"])
    assert code == 0, err
    rec = records(out)[0]
    assert rec["init"] == "laplace" and rec["config"]["init_cov"] == "full"
    assert rec["status"] == "ok" and rec["init_warnings"] == []
    # N(2, 0.05² I) is normalised: log Z = 0; the Laplace fit is exact, so the weights are constant.
    assert abs(rec["log_z"]) < 4 * rec["log_z_stderr"] + 1e-3, rec
    code, out, err = mcd(["estimate", path, *SETTINGS, "--json"])  # the declared N(0, I) start
    assert records(out)[0]["status"] == "unreliable"


def test_prior_start_needs_a_numpyro_model(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *SETTINGS, "--init", "prior"])
    assert code == 2 and out == ""
    assert "--init prior needs a NumPyro model" in one_line_error(err)
