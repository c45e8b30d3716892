"""lab/compile_parity.py on the CPU: four sweeps of one cell per N (eager, eager again, compiled,
eager at seed 1), gaps to eager on the test log-loss and the learning curve, held to the
replicate's and the second seed's; off CUDA the compiled sweep runs eager and says why."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_experiment
from tests.lab.test_recipes import TINY_VALIDATED

parity = load_experiment("compile_parity")


def test_curve_gap_is_the_largest_gap_at_a_common_step():
    a = {"step": [1, 2, 3], "val_loss": [1.0, 0.9, 0.8]}
    b = {"step": [2, 3, 4], "val_loss": [0.95, 0.7, 0.6]}
    assert parity.curve_gap(a, b) == pytest.approx(0.1)
    assert parity.curve_gap(a, {"step": [9], "val_loss": [0.0]}) is None


@pytest.mark.parametrize("compiled,replicate,seed,words", [
    (0.0, 0.0, 0.01, "within the replicate's noise"),
    (0.002, 0.001, 0.01, "outside the replicate's noise, within the seed spread"),
    (0.02, 0.001, 0.01, "outside the seed spread"),
    (None, 0.0, 0.01, "not comparable (no step both curves evaluated)"),
])
def test_verdict_holds_compiled_to_the_replicate_then_the_seed_spread(compiled, replicate, seed, words):
    assert parity.verdict(compiled, replicate, seed) == words


def test_four_sweeps_one_cell_per_n_and_a_summary_of_gaps_to_eager(tmp_path):
    argv = ["--out", str(tmp_path), "--data", "synthetic:random-walk", "--lengths", "32,64", "--device", "cpu",
            "--preset", "cpu"]
    for item in [t for t in TINY_VALIDATED if not t.startswith(("train.seeds", "splits.n_folds"))]:
        argv += ["--set", item]
    assert parity.main(argv) == 0
    for name, (compiled, seed) in parity.VARIANTS.items():
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["splits"]["n_folds"] == 1 and config["train"]["seeds"] == [seed]
        assert config["train"]["compile"] is compiled
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(summary["rows"]) == ["32", "64"]
    for n, row in summary["rows"].items():
        gaps = row["gaps"]
        # the CPU trains deterministically: the same cell twice, and compiled (run eager here), match bit for bit
        assert gaps["eager-again"] == {"log_loss": 0.0, "curve": 0.0} and gaps["compiled"] == gaps["eager-again"]
        assert gaps["eager-seed1"]["log_loss"] > 0  # another seed is another training run
        assert row["log_loss_verdict"] == row["curve_verdict"] == "within the replicate's noise"
        compiled = summary["variants"]["compiled"][n]
        assert not compiled["compiled"] and compiled["reason"] != "train.compile is off"  # why it ran eager
    table = (tmp_path / "summary.md").read_text()
    assert "| 64 |" in table and "no (" in table
    assert (tmp_path / "curves.png").stat().st_size > 0
    before = table
    assert parity.main(argv) == 0  # complete sweeps are not run again; the summary is the same
    assert (tmp_path / "summary.md").read_text() == before
