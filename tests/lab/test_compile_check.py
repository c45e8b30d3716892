"""lab/compile_check.py on the CPU: both sweeps at the rule, one fold and one seed each, a
summary per N with compiled over eager; off CUDA the compiled sweep runs eager and says why."""

from __future__ import annotations

import json

from tests.conftest import load_experiment
from tests.lab.test_recipes import TINY_VALIDATED

check = load_experiment("compile_check")


def test_both_sweeps_run_the_rule_on_one_cell_and_the_summary_says_what_compiling_did(tmp_path):
    argv = ["--out", str(tmp_path), "--data", "synthetic:random-walk", "--lengths", "32,64", "--device", "cpu",
            "--preset", "cpu"]
    for item in [t for t in TINY_VALIDATED if not t.startswith(("train.seeds", "splits.n_folds"))] + [
            "train.steps=6", "train.short_length=16", "train.restart_screen=2"]:
        argv += ["--set", item]
    assert check.main(argv) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(summary["rows"]) == ["32", "64"]
    for mode in check.MODES:
        config = json.loads((tmp_path / mode / "config.json").read_text())
        assert config["splits"]["n_folds"] == 1 and config["train"]["seeds"] == [0]
        assert (config["train"]["restarts"], config["train"]["restart_screen"], config["train"]["ema_decay"]) == (4, 2, 0.98)
        assert config["train"]["compile"] is (mode == "compiled")
    for row in summary["rows"].values():
        assert row["eager"]["reason"] == "train.compile is off" and not row["compiled"]["compiled"]
        assert row["compiled"]["reason"] and row["compiled"]["reason"] != "train.compile is off"  # why it ran eager
        assert row["train_ratio"] > 0 and row["cell_ratio"] > 0
    table = (tmp_path / "summary.md").read_text()
    assert "| 64 |" in table and "no (" in table
    before = (tmp_path / "summary.md").read_text()
    assert check.main(argv) == 0  # complete sweeps are not run again; the summary is the same
    assert (tmp_path / "summary.md").read_text() == before


def test_the_committed_h200_check_recomputes_and_compiling_does_not_pay_at_the_longest_n():
    """reports/recipes/compile-check: the H200's two sweeps (2026-12-05). Compiling halves an N=512
    cell (0.54) and makes an N=32768 cell 1.22 times as long, compiling included; the plan's hours
    are at N=32768, so the third edition trains eager (reports/recipes/README.md, eleventh screen)."""
    from tests.conftest import REPO

    kept = REPO / "reports/recipes/compile-check"
    summary = check.summarize(kept)
    assert check.render(summary) == (kept / "summary.md").read_text()
    ratios = {n: round(row["cell_ratio"], 2) for n, row in summary["rows"].items()}
    assert ratios == {512: 0.54, 32768: 1.22}
    assert all(row["compiled"]["compiled"] for row in summary["rows"].values())
