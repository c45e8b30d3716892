"""lab/patch_choice.py: the patch arm's recipe by the rule stated before its screen ran, on
every branch of the rule, and read from recipes summaries as lab/recipes.py writes them."""

from __future__ import annotations

import json

from tests.conftest import REPO, load_experiment

choice = load_experiment("patch_choice")
recipes = load_experiment("recipes")
POOLS = REPO / "reports" / "recipes" / "pools"


def _c(name: str, found: int, nesting: float | None = 0.001, runs: int = 15) -> dict:
    return {"folder": name, "overrides": ["train.short_fraction=0.25", "model.patch=16", "model.dropout=0.2",
                                          "train.tokens_per_step=524288"],
            "found": found, "runs": runs, "nesting": nesting}


def test_the_rule_as_stated():
    assert choice.FOUND_BAR == recipes.FOUND_BAR and choice.SHORT == recipes.SHORT
    more = choice.choose([_c("full", 13), _c("quarter", 14, nesting=0.01)])
    assert more["verdict"] == "chosen" and more["chosen"]["folder"] == "quarter"  # the most finders, whatever nesting
    tie = choice.choose([_c("full", 12, nesting=0.002), _c("quarter", 12, nesting=-0.001)])
    assert tie["chosen"]["folder"] == "quarter" and "smaller nesting value (-0.00100" in tie["sentence"]
    weak = choice.choose([_c("full", 3), _c("quarter", 7)])
    assert weak["verdict"] == "chosen, control expected to fail" and weak["chosen"]["folder"] == "quarter"
    assert "expected to fail" in weak["sentence"]
    none = choice.choose([_c("full", 0), _c("quarter", 0)])
    assert none["chosen"] is None and "`model.d_model=128` and `model.patch=4`" in none["sentence"]
    short = choice.choose([_c("full", 11, runs=14), _c("quarter", 0)])  # its last run could lift it to the bar
    assert short["verdict"] == "undecided" and "full has 14 of its 15" in short["sentence"]
    untied = choice.choose([_c("full", 5, nesting=None), _c("quarter", 5)])
    assert untied["verdict"] == "undecided"
    assert choice.arm_item(more["chosen"]) == "patch16=model.patch=16,model.dropout=0.2,train.tokens_per_step=524288"


def test_it_reads_the_summaries_recipes_writes(tmp_path, capsys):
    # the tenth screen's committed patch pool: 12 of 15 N=32768 runs, none found: undecided until complete
    full = choice.candidate(POOLS / "unfinished-patch-full-seed0")
    assert (full["found"], full["runs"], full["nesting"]) == (0, 12, None)
    assert "train.tokens_per_step=2097152" in full["overrides"] and "train.patience=0" in full["overrides"]
    assert choice.arm_item(full) == "patch16=model.patch=16,train.tokens_per_step=2097152"  # no screen setting
    summary = json.loads((POOLS / "unfinished-patch-full-seed0" / "summary.json").read_text())
    run = summary["runs"][0]
    run["per_n"]["32768"] |= {"cells": 15, "found": 2}  # the other's 3 missing runs could pass 2
    run["nesting"]["32768"] = {"log_loss": {"mean": 0.0004}}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(summary))
    assert choice.main([str(tmp_path / "a"), str(POOLS / "unfinished-patch-full-seed0")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Undecided:")  # the second has 12 of 15
    run["per_n"]["32768"] |= {"found": 13}
    (tmp_path / "a" / "summary.json").write_text(json.dumps(summary))
    assert choice.main([str(tmp_path / "a")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Chosen: {tmp_path / 'a'} (the most finders, 13 of 15; found at N=32768: {tmp_path / 'a'} 13 of 15).",
        "--arm patch16=model.patch=16,train.tokens_per_step=2097152"]


def test_the_last_round_chooses_the_smallest_nesting_value_when_none_finds_the_echo():
    """`--final` (stated before the round of `model.d_model=128` and `model.patch=4` ran): none found
    still puts an arm in the plan, the one with the smallest nesting value, its control expected to fail."""
    rounds = [_c("drop", 0, nesting=0.0006), _c("d128", 0, nesting=-0.0002), _c("p4", 0, nesting=0.0001)]
    assert choice.choose(rounds)["chosen"] is None  # not the last round: the next candidates
    last = choice.choose(rounds, final=True)
    assert last["verdict"] == "chosen, control expected to fail" and last["chosen"]["folder"] == "d128"
    assert "smallest nesting value, -0.00020" in last["sentence"] and "expected to fail" in last["sentence"]
    assert choice.choose([*rounds[:2], _c("p4", 0, nesting=None)], final=True)["verdict"] == "undecided"
    assert choice.choose([_c("p4", 2), _c("d128", 0)], final=True)["chosen"]["folder"] == "p4"  # a finder still wins
    four = {**_c("p4", 0), "overrides": ["train.short_fraction=0.25", "model.patch=4", "model.dropout=0.2",
                                         "train.tokens_per_step=524288"]}
    assert choice.arm_item(four) == "patch4=model.patch=4,model.dropout=0.2,train.tokens_per_step=524288"


def test_the_eleventh_screen_finds_nothing_with_residual_dropout(capsys):
    """reports/recipes/pools/patch-drop-*: dropout 0.2 at 2.1 M and 524,288 bars a step, 15 N=32768
    runs each, the echo found in none: nothing chosen, the next round's candidates named."""
    drop, quarter = (choice.candidate(POOLS / f"patch-drop{q}-seed0") for q in ("", "-q"))
    assert (drop["runs"], drop["found"], quarter["runs"], quarter["found"]) == (15, 0, 15, 0)
    assert choice.main([str(POOLS / "patch-drop-seed0"), str(POOLS / "patch-drop-q-seed0")]) == 0
    assert "nothing is chosen; the next candidates are `model.d_model=128` and `model.patch=4`" in capsys.readouterr().out


def test_missing_runs_decide_nothing_unless_no_outcome_of_them_changes_the_choice():
    # 4 of 14 against 0 of 15: even if the missing run finds it, 5 < 12 and nobody else can reach 4
    four = choice.choose([_c("p4", 4, runs=14), _c("d128", 0)], final=True)
    assert four["verdict"] == "chosen, control expected to fail" and four["chosen"]["folder"] == "p4"
    assert "4 of 14; settled with 1 N=32768 run(s) missing" in four["sentence"]
    assert choice.settled([_c("p4", 12, runs=14), _c("d128", 3)])  # at the bar already: its last run cannot undo it
    assert not choice.settled([_c("p4", 11, runs=14), _c("d128", 3)])  # the last run could lift it to 12
    assert not choice.settled([_c("p4", 4, runs=14), _c("d128", 3, runs=14)])  # d128 could reach 4: a tie
    assert not choice.settled([_c("p4", 0, runs=14), _c("d128", 0)])  # none found yet: the last run could find it
    assert choice.choose([_c("p4", 4, runs=13), _c("d128", 3, runs=14)])["verdict"] == "undecided"


def test_the_last_round_chooses_patches_of_four_bars(capsys):
    """The committed last round (d_model 128: 0 of 15; patches of 4 bars: 4 of 14, one N=32768 run
    missing) with the eleventh screen's dropout pools: patches of 4 bars, the control expected to fail."""
    pools = [POOLS / name for name in ("patch-d128-seed0", "unfinished-patch4-seed0", "patch-drop-seed0", "patch-drop-q-seed0")]
    assert choice.main(["--final", *map(str, pools)]) == 0
    out = capsys.readouterr().out
    assert "unfinished-patch4-seed0 (the most finders, 4 of 14; settled" in out and "expected to fail" in out
    assert out.rstrip().endswith("--arm patch4=model.dropout=0.2,model.patch=4,train.tokens_per_step=524288")
