"""Fees at scoring time: a finished tiny sweep re-scored from its per-bar cells, without retraining."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_experiment
from tsflash import cli
from tsflash.errors import UserError
from tsflash.report import build_report
from tsflash.report.rescore import check_overrides, default_out_dir, flat_overrides

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "reports" / "h200-btcusdt-1m"

# A tiny sweep on the synthetic random walk, two seeds (the seed-averaged series is re-scored too).
TINY = [
    'data.start="2024-01-01"', 'data.end="2024-01-08"', "splits.test_days=2", "splits.n_folds=2", "splits.val_days=0",
    "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.steps=3", "train.tokens_per_step=256",
    "train.warmup_steps=1", "eval.baseline_lags=2", "eval.batch_tokens=4096", "selection.cscv_blocks=4",
    "train.seeds=[0, 1]",
]
SERIES = ("n32", "n64", "baseline-prior", "baseline-logreg")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rescore") / "run"
    argv = ["sweep", "--lengths", "32,64", "--data", "synthetic:random-walk", "--out", str(out), "--preset", "cpu",
            "--no-precision"]
    for item in TINY:
        argv += ["--set", item]
    assert cli.main(argv) == 0
    return out


def _series(folder: Path, name: str) -> dict:
    with np.load(folder / "series" / f"{name}.npz") as z:
        return {k: z[k] for k in ("days", "net", "gross")}


def test_the_runs_own_fee_reproduces_its_series_and_verdict(run):
    before = (run / "report.md").read_text()
    md, html = build_report(run, overrides={"eval.fee_bps": 5.0})
    out = md.parent
    assert out == run / "rescored" / "fee-5bps" and html.parent == out
    assert (run / "report.md").read_text() == before  # the run's own report is never overwritten
    for name in SERIES:
        a, b = _series(run, name), _series(out, name)
        for field in ("days", "net", "gross"):
            assert np.array_equal(a[field], b[field]), (name, field)
    old, new = (json.loads((d / "results.json").read_text()) for d in (run, out))
    assert new["verdict"] == old["verdict"]
    assert new["selection"]["candidates"] == old["selection"]["candidates"]
    assert new["selection"]["sr_variance"] == old["selection"]["sr_variance"]
    assert new["rescored"]["overrides"] == {"eval.fee_bps": 5.0} and new["rescored"]["run_fee_bps"] == 5.0


def test_zero_fee_makes_net_equal_gross(run, tmp_path):
    md, _ = build_report(run, overrides={"eval": {"fee_bps": 0}}, out_dir=tmp_path / "free")
    assert md == tmp_path / "free" / "report.md"
    for name in SERIES:
        s = _series(tmp_path / "free", name)
        assert np.array_equal(s["net"], s["gross"]), name
        assert np.array_equal(s["gross"], _series(run, name)["gross"])  # fees never touch gross returns
    res = json.loads((tmp_path / "free" / "results.json").read_text())
    assert res["setup"]["config"]["eval"]["fee_bps"] == 0
    text = md.read_text()
    assert "re-scored at eval.fee_bps = 0 from the per-bar positions saved by the run `run` (which charged 5 bps)" in text
    # the DSR's ledger is re-scored too: its trial values are the new daily Sharpe ratios
    by_key = {c["key"]: c["sharpe"] for c in res["selection"]["candidates"]}
    net = _series(tmp_path / "free", "n32")["net"]
    assert by_key["n32"] == pytest.approx(net.mean() / net.std(ddof=1), rel=1e-12)


def test_a_higher_fee_costs_more(run, tmp_path):
    build_report(run, overrides={"eval.fee_bps": 20}, out_dir=tmp_path / "dear")
    for name in SERIES:
        cheap, dear = _series(run, name)["net"], _series(tmp_path / "dear", name)["net"]
        assert np.all(dear <= cheap), name
        if not name.startswith("baseline-"):  # the models trade; the class prior may hold flat throughout
            assert dear.sum() < cheap.sum(), name


def test_keys_that_need_retraining_are_refused(run):
    with pytest.raises(UserError, match=r"report --set train.steps: only scoring keys can change without retraining "
                                        r"\(eval.entry_threshold, eval.fee_bps, eval.seed_inference, eval.strategy\); train.steps changes "
                                        r"the trained models"):
        build_report(run, overrides={"train": {"steps": 5}})
    with pytest.raises(UserError, match=r"report --set eval.fee_bps: must be a number >= 0 \(basis points\), got -1"):
        check_overrides({"eval.fee_bps": -1})
    with pytest.raises(UserError, match=r"a re-scored report never overwrites the run's own report"):
        build_report(run, overrides={"eval.fee_bps": 1}, out_dir=run)
    assert flat_overrides({"eval": {"fee_bps": 2}, "x.y": 1}) == {"eval.fee_bps": 2, "x.y": 1}
    with pytest.raises(UserError, match=r"report --set eval.seed_inference: must be one of fold, crossed, got 'seeds'"):
        check_overrides({"eval.seed_inference": "seeds"})


def test_the_crossed_test_is_a_re_report_that_needs_no_cell_files(run, tmp_path):
    """--set eval.seed_inference=crossed changes the tests only: no per-bar cell file is read (a
    copy without them reports) and the trading figures stand (question 1's family under it:
    tests/report/test_runlevel_report.py)."""
    bare = tmp_path / "bare"
    shutil.copytree(run, bare, ignore=shutil.ignore_patterns("rescored"))
    removed = [f.unlink() for f in (bare / "cells").rglob("*.npz")]  # the per-bar cell files, as a published run
    assert removed
    out = tmp_path / "crossed"
    build_report(bare, overrides={"eval.seed_inference": "crossed"}, out_dir=out)
    text = (out / "report.md").read_text()
    assert "eval.seed_inference = crossed" in text and "crossed random effects" in text
    rebuilt = json.loads((out / "questions.json").read_text())["forecast"]["runs"]["comparisons"]
    own = json.loads((run / "questions.json").read_text())
    assert json.loads((out / "questions.json").read_text())["trading"] == own["trading"]
    assert len(rebuilt) == len(own["forecast"]["runs"]["comparisons"])
    assert default_out_dir(run, {"eval.seed_inference": "crossed"}) == run / "rescored" / "seeds-crossed"


def test_the_noise_control_trains_each_seed_once_and_rescores(run, tmp_path):
    """lab/noise_control.py: run_all reuses the finished seed-0 sweep (trained at 5 bps)
    and re-scores it at 0 bps instead of training it again."""
    nc = load_experiment("noise_control")
    seed0 = tmp_path / "seed0"
    shutil.copytree(run, seed0, ignore=shutil.ignore_patterns("rescored"))
    (seed0 / "questions.json").write_text('{"forecast": {"answer": "stale"}}')  # a report of older rules
    rows, secs = nc.run_all([0], [5.0, 0.0], tmp_path, nc._parser().parse_args([]))
    assert [(r["fee_bps"], r["seed"], r["ok"], r["reused"]) for r in rows] == [(5.0, 0, True, True), (0.0, 0, True, True)]
    assert secs == []  # nothing trained here: no sweep time to report
    assert json.loads((seed0 / "questions.json").read_text())["forecast"]["answer"] != "stale"  # rebuilt
    assert len(json.loads((seed0 / "run.json").read_text())["invocations"]) == 1  # no second training
    zero = json.loads((seed0 / "rescored" / "fee-0bps" / "results.json").read_text())
    assert zero["setup"]["config"]["eval"]["fee_bps"] == 0.0
    zero_q = json.loads((seed0 / "rescored" / "fee-0bps" / "questions.json").read_text())
    assert {k: v for k, v in rows[1].items() if k not in ("seconds", "git_commit", "reused")} == nc.row_from_results(
        zero, 0.0, 0, zero_q)
    assert rows[0]["q1_available"] and rows[0]["q1_answer"] == rows[1]["q1_answer"]  # forecasts do not pay fees
    assert rows[0]["q2_strategy"] == "horizon"
    five = json.loads((seed0 / "results.json").read_text())
    assert rows[0]["dsr"] == five["verdict"]["dsr"] and rows[0]["candidate_sharpes"] != rows[1]["candidate_sharpes"]
    assert list(nc.summarize(rows)["by_fee"]) == ["5", "0"]


def test_a_run_without_per_bar_cells_cannot_be_rescored(tmp_path):
    run = tmp_path / "published"
    shutil.copytree(PUBLISHED, run)
    with pytest.raises(UserError, match=r"re-scoring needs the per-bar cell files \(cells/\*\*/\*\.npz\); "
                                        r".*published/cells/.*\.npz is missing \(a published run does not commit"):
        build_report(run, overrides={"eval.fee_bps": 2})
    assert not (run / "rescored").exists()


def test_the_trading_rule_is_rescored_too(run, tmp_path):
    """The tiny run was scored under the horizon rule (the default); the one-bar rule and a fixed
    entry threshold re-score the same cells without training."""
    res = json.loads((run / "results.json").read_text())
    assert res["setup"]["config"]["eval"]["strategy"] == "horizon"
    q = json.loads((run / "questions.json").read_text())["trading"]
    assert q["strategy"] == "horizon" and q["horizon"] == 15
    assert all("argmax (no validation predictions)" in r["sources"] for r in q["rows"])  # no validation tail
    md, _ = build_report(run, overrides={"eval.strategy": "one-bar"})
    assert md.parent == run / "rescored" / "one-bar"
    one_bar = json.loads((md.parent / "questions.json").read_text())["trading"]
    assert one_bar["strategy"] == "one-bar" and all(r["sources"] == ["one-bar"] for r in one_bar["rows"])
    # the one-bar rule re-scored is the engine's own path: its turnover is the cells' metrics
    cells = [json.loads(p.read_text()) for p in (run / "cells" / "n32").glob("*.cell.json")]
    n32 = next(r for r in one_bar["rows"] if r["series"] == "n32")
    assert n32["turnover"] == pytest.approx(np.mean([c["metrics"]["turnover"] for c in cells]))
    assert n32["turnover"] > next(r for r in q["rows"] if r["series"] == "n32")["turnover"]  # holding h bars trades less
    strict = build_report(run, overrides={"eval.entry_threshold": 0.99}, out_dir=tmp_path / "strict")[0].parent
    rows = json.loads((strict / "questions.json").read_text())["trading"]["rows"]
    assert all(r["turnover"] == 0 and r["sources"] == ["fixed"] for r in rows)  # nothing clears 0.99
    assert "Trading rule: horizon: 15 overlapping sub-portfolios" in (strict / "report.md").read_text()
    with pytest.raises(UserError, match=r"report --set eval.strategy must be one of one-bar, horizon, got 'weekly'"):
        check_overrides({"eval.strategy": "weekly"})


def test_the_sweep_keeps_the_per_day_loss_sums_of_its_forecasts(run):
    """Question 1's paired tests read the sweep's compact loss sums (forecasts/*.npz): the same
    numbers as from the per-bar cells, for each seed and the two seeds' ensemble."""
    from tsflash.report.compute import forecast_question, losses_from_cells, losses_from_sweep
    from tsflash.report.rundata import load_run

    rd = load_run(run)
    names = ["n32", "n64", "baseline-logreg", "baseline-prior", "baseline-volatility", "baseline-probe-32",
             "baseline-probe-64"]  # the probe per N: the default's eval.probe
    assert sorted(p.stem for p in (run / "forecasts").glob("*.npz")) == sorted(names)
    sweep, cells = losses_from_sweep(rd, names), losses_from_cells(rd)

    def keyed(t):
        order = np.lexsort((t["day"], t["fold"], t["member"].astype(str), t["series"].astype(str)))
        return {k: v[order] for k, v in t.items()}

    a, b = keyed(sweep), keyed(cells)
    assert set(a["member"]) == {"seed0", "seed1", "ensemble"}
    for k in ("series", "member", "fold", "day"):
        assert np.array_equal(a[k].astype(str), b[k].astype(str)), k
    for k in set(a) - {"series", "member", "fold", "day"}:
        assert np.allclose(a[k], b[k], rtol=1e-12, atol=0), k
    fq = forecast_question(rd, ["n32", "n64"])
    assert fq.available and fq.source.startswith("the sweep's per-day loss sums")
    assert fq.dm_answer in ("better", "no better", "worse") and set(fq.comparisons[0].seed_diffs) == {"seed0", "seed1"}
