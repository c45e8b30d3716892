"""lab/probe.py: a market already in OUT/probe.json is kept when others are added, but only
at the same lengths; `--set` changes a synthetic market only, and names itself in the section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, load_experiment

probe = load_experiment("probe")


def _fold(loss: float) -> dict:
    return {"log_loss": loss, "direction": 0.69, "move_log_loss": 0.5, "n_scored": 10, "n_fit": 100, "seconds": 0.1}


def test_an_earlier_markets_record_is_read_back_only_at_the_same_lengths(tmp_path):
    assert probe.read_record(tmp_path / "probe.json", (512, 4096)) == {}
    record = {"iid": {"run": "x", "seconds": 1.0, "overrides": [], "prior": [_fold(1.1)] * 2,
                      "512": [_fold(1.0)] * 2, "4096": [_fold(0.99)] * 2}}
    (tmp_path / "probe.json").write_text(json.dumps(record))
    assert probe.read_record(tmp_path / "probe.json", (512, 4096)) == record
    with pytest.raises(SystemExit, match=r"holds iid at lengths \(512, 4096\), this run asks \(512, 32768\)"):
        probe.read_record(tmp_path / "probe.json", (512, 32768))


def test_set_changes_a_synthetic_market_only_and_is_named_in_its_section():
    with pytest.raises(SystemExit, match="--set and --source change a synthetic market only"):
        probe.market_bars(REPO / probe.MARKETS["btc"], Path("no-store"), {"splits": {"n_folds": 10}})
    res = {"prior": [_fold(1.1)] * 3, 512: [_fold(1.0)] * 3, 4096: [_fold(0.99), _fold(0.98), _fold(0.995)]}
    text = probe.market_table("regime", res, (512, 4096), 60.0, ["splits.n_folds=10"])
    assert text.startswith(f"### {probe.TITLES['regime']} `splits.n_folds=10`")
    assert "| 4096 | 7 (1 .. 4096) | 0.98833 |" in text


def test_a_source_variant_must_be_of_the_markets_own_kind():
    with pytest.raises(SystemExit, match="is not a variant of"):
        probe.market_bars(REPO / probe.MARKETS["regime"], Path("no-store"), None, "synthetic:iid:0")
