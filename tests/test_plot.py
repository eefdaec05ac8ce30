"""Figures (`mcd_cli.report.plot`), the log-weight summary they draw, and the terminal sparkline.

The files must be valid: a PNG decodes with matplotlib, a PDF starts with `%PDF`, an SVG parses as
XML. The fitted Pareto tail drawn on the histogram must be the PSIS fit: on draws from a known
generalised Pareto its shape is recovered within a tolerance from its sampling error, and its
expected counts add up to the tail's size. Without matplotlib, `--plot` is a one-line usage error
before any work starts.
"""

from __future__ import annotations

import builtins
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from conftest import NO_TRAIN, NO_TRAIN_COMPARE, one_line_error
from mcd_cli import report, stats
from mcd_cli.report import plot

pytest.importorskip("matplotlib")


def synthetic_record(**extra) -> dict:
    rec = {
        "label": "ULA-MCD", "target": "synthetic", "dim": 2, "steps": 16, "log_z": 0.01,
        "log_z_stderr": 0.02, "status": "ok", "reference_log_z": 0.0,
    }
    rec.update(extra)
    return rec


@pytest.fixture(scope="module")
def weights() -> stats.WeightSummary:
    return stats.summarize_weights(np.random.default_rng(0).normal(size=4096) * 0.8)


def test_weight_summary_is_bounded_and_counts_every_weight():
    lw = np.r_[np.random.default_rng(1).normal(size=10_000), -np.inf, np.nan, np.inf]
    s = stats.summarize_weights(lw)
    assert sum(s.counts) == 10_000 and s.num_below == 0 and s.num_zero == 1 and s.num_samples == 10_001
    assert len(s.counts) == stats.HISTOGRAM_BINS and len(s.edges) == stats.HISTOGRAM_BINS + 1
    assert len(s.tail) == stats.tail_length(10_001) and s.tail == tuple(sorted(s.tail))
    assert s.pareto_k == stats.pareto_k(lw[~np.isnan(lw) & (lw != np.inf)])
    assert s.log_cutoff < s.tail[0]


def test_fitted_tail_recovers_a_known_generalised_pareto():
    # Weights w = 1 + GPD(k = 0.3, σ = 2) exceedances: the tail beyond the cutoff is again a GPD
    # with the same k, so the fit must find k within a few of its standard errors,
    # sd(k̂) ≈ (1 + k)/√M for the M tail draws (Zhang & Stephens 2009).
    import scipy.stats

    k_true, n = 0.3, 40_000
    w = 1.0 + scipy.stats.genpareto.rvs(c=k_true, scale=2.0, size=n, random_state=np.random.default_rng(2))
    s = stats.summarize_weights(np.log(w))
    m = len(s.tail)
    assert abs(s.pareto_k - k_true) < 4 * (1 + k_true) / math.sqrt(m), s.pareto_k
    expected = s.tail_counts(s.edges)
    # All the tail's mass lies in the bins but what the fit puts beyond the largest draw (about one
    # draw's worth, 1/(M + 1) on average).
    assert m - 5 < expected.sum() <= m
    # The fitted counts follow the tail's own histogram: a chi-square per bin well inside its range.
    observed = np.histogram(np.asarray(s.tail), bins=np.asarray(s.edges))[0]
    used = expected > 5
    chi2 = float(np.sum((observed[used] - expected[used]) ** 2 / expected[used]))
    assert chi2 < scipy.stats.chi2.ppf(0.999, used.sum()), chi2


def test_a_long_lower_tail_is_counted_but_not_drawn():
    lw = np.r_[np.random.default_rng(4).normal(size=1000), [-400.0, -250.0]]
    s = stats.summarize_weights(lw)
    assert s.num_below == 2 and sum(s.counts) == 1000
    assert s.edges[0] == pytest.approx(np.median(lw) - stats.HISTOGRAM_SPAN * (lw.max() - np.median(lw)))


def test_no_tail_gives_no_fitted_counts():
    s = stats.summarize_weights(np.zeros(100))
    assert s.pareto_k == -math.inf and s.log_cutoff is None
    assert not s.tail_counts(s.edges).any()


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_estimate_figure_files_are_valid(tmp_path, weights, suffix):
    path = tmp_path / f"run{suffix}"
    curve = -3.0 * np.exp(-np.arange(200) / 40.0) + np.r_[np.zeros(199), np.nan]
    plot.save(plot.estimate_figure(synthetic_record(), [curve], weights), path)
    data = path.read_bytes()
    if suffix == ".png":
        import matplotlib.image

        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 600
    elif suffix == ".pdf":
        assert data.startswith(b"%PDF")
    else:
        root = ET.fromstring(data)
        assert root.tag.endswith("svg")


def _svg_text(path) -> str:
    return "".join(ET.parse(path).getroot().itertext())


def test_smc_panels_are_drawn_when_the_record_has_them(tmp_path, weights):
    import matplotlib

    matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text, so the titles can be read
    try:
        smc = {"ess": [900.0, 700.0, 800.0], "beta": [0.0, 0.4, 1.0], "acceptance": [0.7, 0.6, 0.65]}
        fig = plot.estimate_figure(synthetic_record(smc=smc), [], weights)
        assert len(fig.axes) == 5
        plot.save(fig, tmp_path / "smc.svg")
        text = _svg_text(tmp_path / "smc.svg")
        for title in ("SMC: ESS", "SMC: β", "SMC: acceptance rate", "no training in this run", "k̂ = "):
            assert title in text
        fig = plot.estimate_figure(synthetic_record(smc={"beta": [0.0, 1.0]}), [], weights)
        assert len(fig.axes) == 3
        assert len(plot.estimate_figure(synthetic_record(), [], None).axes) == 2
    finally:
        matplotlib.rcParams["svg.fonttype"] = "path"


def test_compare_figure_of_settings_and_of_models(tmp_path):
    from mcd_cli.stats import comparison

    recs = [synthetic_record(), synthetic_record(label="UHA", log_z=-0.2, log_z_stderr=None, status="unreliable")]
    fig = plot.compare_figure(recs)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["ULA-MCD K=16", "UHA K=16"]
    plot.save(fig, tmp_path / "grid.pdf")
    assert (tmp_path / "grid.pdf").read_bytes().startswith(b"%PDF")
    result = comparison.from_records(recs, ["a", "b"])
    plot.save(plot.compare_figure(recs, ["a", "b"], result), tmp_path / "models.png")
    import matplotlib.image

    assert matplotlib.image.imread(tmp_path / "models.png").ndim == 3


def test_block_medians_skip_nan_and_resist_one_bad_batch():
    curve = np.r_[np.full(50, -2.0), -500.0, np.full(49, -1.0), np.nan]
    centres, medians, size = plot.block_medians(curve, blocks=10)
    assert size == 10 and centres.tolist() == [5.5 + 10 * i for i in range(10)]
    assert medians.tolist() == [-2.0] * 5 + [-1.0] * 5


def test_sparkline_spans_the_range_and_skips_nan():
    line = report.sparkline([0.0, 1.0, float("nan"), 3.0], width=4)
    assert line == "▁▃ █"
    assert len(report.sparkline(np.linspace(0, 1, 1000))) == 48
    assert report.sparkline([5.0, 5.0]) == "▁▁"


# The command line ------------------------------------------------------------------------------


def test_the_estimate_table_shows_the_training_curve_as_a_sparkline():
    from rich.console import Console

    from mcd_cli.config import SamplerConfig, TrainConfig
    from mcd_cli.record import RunRecord, TargetInfo

    combined = stats.combine_estimates([stats.summarize(np.random.default_rng(3).normal(size=256) * 0.1)])
    target = TargetInfo("synthetic", 2, {}, None, None, "0" * 64, 0.0)
    record = RunRecord(
        target, SamplerConfig(), TrainConfig(iterations=100), combined, seed=0, num_samples=256, repeats=1,
        x64=False, iterations_run=100, skipped_steps=0, recoveries=0, train_seconds=1.0,
        estimate_seconds=1.0, device="cpu", version="test",
    )
    curve = list(np.linspace(-4.0, -1.0, 100))
    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    console.print(report.estimate_table(record.as_dict(), curve))
    text = console.export_text()
    line = next(row for row in text.splitlines() if "training ELBO" in row)
    assert report.sparkline(curve) in line and "-3.864 → -1.136 (first and last tenth)" in line
    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    console.print(report.estimate_table(record.as_dict()))
    assert "training ELBO" not in console.export_text()


@pytest.mark.slow
def test_estimate_writes_the_figure_and_the_table_shows_the_training_curve(mcd, gauss_yaml, tmp_path):
    path = tmp_path / "run.png"
    args = ["estimate", gauss_yaml, *NO_TRAIN[:-2], "--iterations", "3", "--plot", path]
    code, out, err = mcd(args)
    assert code == 0, err
    assert f"figure written to {path}" in err
    assert "training ELBO" in out and any(c in out for c in report.SPARK_BARS)
    import matplotlib.image

    assert matplotlib.image.imread(path).ndim == 3


@pytest.mark.parametrize(
    "name, expected",
    [("run.jpg", "give a file ending in .png, .svg or .pdf"), ("missing/run.png", "--plot file")],
)
def test_bad_plot_paths_are_refused_before_running(mcd, gauss_yaml, tmp_path, name, expected):
    code, out, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--plot", tmp_path / name])
    assert code == 2 and out == ""
    assert expected in one_line_error(err)


def test_without_matplotlib_plot_is_a_one_line_error(mcd, gauss_yaml, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    for command in (
        ["estimate", gauss_yaml, *NO_TRAIN],
        ["compare", gauss_yaml, *NO_TRAIN_COMPARE],
        ["compare", gauss_yaml, gauss_yaml, *NO_TRAIN_COMPARE],
    ):
        code, out, err = mcd([*command, "--plot", tmp_path / "run.png"])
        assert code == 2 and out == ""
        assert "pip install 'mcd-cli[plot]'" in one_line_error(err)
    assert not (tmp_path / "run.png").exists()
