"""Tests for tsflash.stats.gate: the gates on a real edge and on noise, the trial ledger, the
verdict's reason codes, a run's selection (alignment, dropped candidates, reduced blocks,
effective trials and power), and the defaults shared with tsflash.config."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tsflash.stats import SelectionInputError
from tsflash.stats.gate import Gate, Reason, complete_trials, select_run
from tsflash.stats.sharpe import psr, sharpe


def _noise_candidates(rng, k, t, scale=0.01):
    return {f"n={2**(i + 6)}": scale * rng.standard_normal(t) for i in range(k)}


def test_gate_passes_a_real_edge():
    rng = np.random.default_rng(12)
    cands = _noise_candidates(rng, 6, 400)
    cands["n=edge"] = 0.004 + 0.01 * rng.standard_normal(400)  # SR 0.4 per day
    v = Gate(n_blocks=8).evaluate(cands)
    assert v.selected == "n=edge" and v.passed and v.passes_dsr and v.passes_pbo
    assert v.dsr >= 0.95 and v.pbo <= 0.5
    assert v.reasons == (Reason.DSR_MET, Reason.PBO_MET, Reason.PASSED)
    assert v.sharpe == pytest.approx(v.table[-1]["sharpe"]) and v.n_trials == 7
    assert len(v.table) == 7 and [row["selected"] for row in v.table].count(True) == 1
    row = next(r for r in v.table if r["selected"])
    assert row["sharpe_annual"] == pytest.approx(row["sharpe"] * math.sqrt(365))
    json.dumps(v.to_dict())  # a verdict is JSON-serialisable for the report


def test_gate_no_candidate_passes_is_a_normal_verdict():
    rng = np.random.default_rng(13)
    v = Gate(n_blocks=8).evaluate(_noise_candidates(rng, 8, 200))
    assert not v.passed
    assert v.reasons[-1] == Reason.NOT_PASSED
    assert v.reasons[0] == (Reason.DSR_MET if v.passes_dsr else Reason.DSR_BELOW_MIN)
    assert v.reasons[1] == (Reason.PBO_MET if v.passes_pbo else Reason.PBO_ABOVE_MAX)
    assert all(isinstance(r, str) and " " not in r for r in v.reasons)  # codes, not sentences
    assert v.selected == max(v.table, key=lambda r: r["sharpe"])["name"]


def test_gate_uses_the_full_trial_ledger():
    rng = np.random.default_rng(14)
    cands = _noise_candidates(rng, 4, 300)
    cands["n=edge"] = 0.002 + 0.01 * rng.standard_normal(300)
    gate = Gate(n_blocks=6)
    base = gate.evaluate(cands)
    more = gate.evaluate(cands, n_trials=200)
    assert more.dsr_result.n_trials == 200 and more.dsr < base.dsr
    ledger = rng.normal(0, 0.08, size=40)
    v = gate.evaluate(cands, trial_sharpes=ledger)
    assert v.dsr_result.n_trials == 40
    assert v.dsr_result.sr_variance == pytest.approx(ledger.var(ddof=1))
    assert base.dsr_result.sr_variance == pytest.approx(np.var([r["sharpe"] for r in base.table], ddof=1))


def test_gate_from_config_uses_the_selection_settings():
    from tsflash.config import SelectionConfig

    gate = Gate.from_config(SelectionConfig(min_dsr=0.9, max_pbo=0.4, cscv_blocks=8))
    assert (gate.min_dsr, gate.max_pbo, gate.n_blocks) == (0.9, 0.4, 8)
    assert Gate.from_config(SelectionConfig()) == Gate()


def test_gate_errors():
    rng = np.random.default_rng(15)
    with pytest.raises(SelectionInputError, match=r"aligned \(same number of periods\), got lengths \{'a': 50, 'b': 49\}"):
        Gate(n_blocks=4).evaluate({"a": rng.standard_normal(50), "b": rng.standard_normal(49)})
    with pytest.raises(SelectionInputError, match=r"at least 2 candidates .*got 1: \['a'\]"):
        Gate().evaluate({"a": rng.standard_normal(50)})
    with pytest.raises(SelectionInputError, match=r"candidate 'b': the Sharpe ratio needs returns with non-zero variance"):
        Gate(n_blocks=4).evaluate({"a": rng.standard_normal(50), "b": np.zeros(50)})
    with pytest.raises(SelectionInputError, match=r"candidate 'a' must be finite"):
        Gate(n_blocks=4).evaluate({"a": np.r_[np.nan, rng.standard_normal(49)], "b": rng.standard_normal(50)})
    with pytest.raises(SelectionInputError, match=r"n_trials=2 < 3"):
        Gate(n_blocks=4).evaluate({c: rng.standard_normal(50) for c in "abc"}, n_trials=2)
    with pytest.raises(SelectionInputError, match=r"Gate thresholds must be probabilities in \[0, 1\], got min_dsr=95"):
        Gate(min_dsr=95).evaluate({c: rng.standard_normal(50) for c in "ab"})


def test_gate_noise_control_rarely_passes():
    """Zero-mean random-walk returns: the deflated gate passes rarely, the undeflated one often."""
    k, t, runs = 8, 128, 100
    gate = Gate(n_blocks=8)
    passed = naive = 0
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        cands = _noise_candidates(rng, k, t)
        v = gate.evaluate(cands)
        passed += v.passed
        naive += max(r["psr"] for r in v.table) >= 0.95  # best-of-K PSR(0), no deflation, no PBO
    assert passed / runs <= 0.06, passed
    assert naive / runs >= 0.2, naive  # the control is not vacuous: picking the best does fool PSR


# ------------------------------------------------------------------------------ a run's selection


def test_complete_trials_counts_a_slot_once():
    trials = [{"state": "COMPLETE", "slot": "n32/0", "value": 0.1}, {"state": "FAIL", "slot": "n64/0", "value": None},
              {"state": "COMPLETE", "slot": "n32/0", "value": 0.2}, {"state": "COMPLETE", "key": "n64", "value": 0.3}]
    assert [t["value"] for t in complete_trials(trials)] == [0.1, 0.3]


def _days(t):
    return np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-01-01") + t)


def test_select_run_is_the_gate_with_the_ledger():
    rng = np.random.default_rng(21)
    series = {f"n{2 ** (5 + i)}": (_days(120), 0.01 * rng.standard_normal(120)) for i in range(4)}
    ledger = [{"state": "COMPLETE", "key": k, "slot": f"{k}/0", "value": float(sharpe(r))} for k, (_, r) in series.items()]
    ledger.append({"state": "COMPLETE", "key": "n32", "slot": "n32/1", "value": 0.3})  # a 5th trial, not a candidate
    out = select_run(series, ledger, n_blocks=8)
    v = Gate(n_blocks=8).evaluate({k: r for k, (_, r) in series.items()}, n_trials=5,
                                  trial_sharpes=[t["value"] for t in ledger])
    assert out.n_trials == 5 and out.verdict.dsr == v.dsr and out.verdict.pbo == v.pbo
    assert out.sr_variance == pytest.approx(np.var([t["value"] for t in ledger], ddof=1))
    assert [c["dsr"] for c in out.candidates] == [r["dsr"] for r in v.table]  # every candidate against one ledger
    assert out.n_blocks_used == 8 and out.dropped == [] and len(out.days) == 120


def test_select_run_aligns_drops_and_reduces_blocks():
    rng = np.random.default_rng(22)
    series = {"n32": (_days(12), 0.01 * rng.standard_normal(12)), "n64": (_days(10)[1:], 0.01 * rng.standard_normal(9)),
              "n128": (_days(12), np.zeros(12)), "n256": (_days(12), 0.01 * rng.standard_normal(12))}
    out = select_run(series, [], n_blocks=16)
    assert len(out.days) == 9 and out.n_blocks == 16 and out.n_blocks_used == 8  # 9 common days: 8 blocks
    assert out.dropped == ["n128"] and "error" in out.candidates[2] and math.isnan(out.candidates[2]["dsr"])
    assert out.n_trials == 4 and out.sr_variance is None  # no ledger: the candidates' Sharpe ratios
    assert out.verdict.reasons[-1] in (Reason.PASSED, Reason.NOT_PASSED)
    few = select_run({"n32": series["n32"], "n128": series["n128"]}, [])
    assert few.verdict.reasons == (Reason.TOO_FEW_CANDIDATES, Reason.NOT_PASSED) and few.verdict.selected == "n32"
    assert select_run({}, []).verdict.reasons == (Reason.NO_CANDIDATE, Reason.NOT_PASSED)


def test_select_run_reports_effective_trials_power_and_profitable_candidates():
    rng = np.random.default_rng(5)
    days = np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-01-01") + 400)
    common = rng.normal(0, 0.01, 400)
    series = {f"n{2 ** (5 + i)}": (days, common + rng.normal(0.0002 * i, 0.002, 400)) for i in range(4)}
    trials = [{"state": "COMPLETE", "slot": f"{k}/0", "key": k, "value": sharpe(r)} for k, (_, r) in series.items()]
    out = select_run(series, trials, n_blocks=8)
    d = out.deflation
    assert out.n_profitable == sum(r.mean() > 0 for _, r in series.values())
    assert 1.0 <= d.effective.n_effective < 1.5  # one common factor dominates
    assert d.n_trials_effective == 1 and d.dsr_effective.n_trials == 1 and d.dsr_effective.sr0 == 0.0
    assert d.dsr_effective.dsr >= out.verdict.dsr  # fewer trials, a lower bar
    assert d.t == 400 and psr(d.min_sharpe, out.verdict.sr0, t=400) == pytest.approx(0.95)
    assert d.min_sharpe_effective < d.min_sharpe
    sel_x = series[out.verdict.selected][1]
    if sharpe(sel_x) > out.verdict.sr0:
        assert psr(sel_x, out.verdict.sr0) < 0.95 or d.min_trl <= 400
    else:
        assert d.min_trl == math.inf


def test_the_defaults_have_one_home():
    """365 periods a year, min DSR 0.95, max PBO 0.5 and 16 CSCV blocks are each written once, in the
    statistics module that owns them; the config, the gate, the run's selection and the report use those."""
    import importlib
    import inspect

    from tsflash.config import ExperimentConfig, SelectionConfig
    from tsflash.stats.pbo import CSCV_BLOCKS, MAX_PBO, pbo_cscv
    from tsflash.stats.sharpe import DSR_CONFIDENCE, PERIODS_PER_YEAR, min_passing_sharpe, min_track_record_length

    assert (PERIODS_PER_YEAR, DSR_CONFIDENCE, MAX_PBO, CSCV_BLOCKS) == (365.0, 0.95, 0.5, 16)
    cfg = SelectionConfig()
    assert (cfg.min_dsr, cfg.max_pbo, cfg.cscv_blocks) == (DSR_CONFIDENCE, MAX_PBO, CSCV_BLOCKS)
    assert ExperimentConfig().selection == cfg
    gate = Gate()
    assert (gate.min_dsr, gate.max_pbo, gate.n_blocks, gate.periods_per_year) == (
        DSR_CONFIDENCE, MAX_PBO, CSCV_BLOCKS, PERIODS_PER_YEAR)

    def default(f, name):
        return inspect.signature(f).parameters[name].default

    assert [default(select_run, k) for k in ("min_dsr", "max_pbo", "n_blocks", "periods_per_year")] == [
        DSR_CONFIDENCE, MAX_PBO, CSCV_BLOCKS, PERIODS_PER_YEAR]
    assert default(pbo_cscv, "n_blocks") == CSCV_BLOCKS
    assert default(min_track_record_length, "confidence") == default(min_passing_sharpe, "confidence") == DSR_CONFIDENCE
    compute = importlib.import_module("tsflash.report.compute")  # the package's `compute` is its function
    assert compute.PERIODS_PER_YEAR is PERIODS_PER_YEAR and compute.CSCV_BLOCKS is CSCV_BLOCKS
