"""lab/patch_budget.py: the label budget of each arm, and the committed toy summary
(reports/recipes/patch-budget-toy) recomputed from its committed cells."""

from __future__ import annotations

import json

from tests.conftest import REPO, load_experiment

budget = load_experiment("patch_budget")
PUBLISHED = REPO / "reports" / "recipes" / "patch-budget-toy"


def test_a_patch_scores_one_bar_in_p():
    assert budget.labels_per_step(("model.patch=4", "train.tokens_per_step=2048")) == 512
    assert budget.labels_per_step(("model.patch=1", "train.tokens_per_step=2048")) == 2048
    assert {n: budget.labels_per_step(o) for n, o in budget.ARMS.items()} == {
        "bar": 2048, "bar-x4": 8192, "patch4": 512, "patch4-x4": 2048}


def test_the_committed_toy_summary_recomputes_from_its_cells():
    summary = budget.summarize(PUBLISHED)
    assert budget.render(summary) == (PUBLISHED / "summary.md").read_text()
    assert all(row["runs"] == 9 and row["folds"] == 3 for row in summary.values())
    for name, overrides in budget.ARMS.items():  # the arms differ in the patch and the batch alone
        config = json.loads((PUBLISHED / name / "config.json").read_text())
        assert config["model"].get("patch", 1) == int(overrides[0].split("=")[1])
        assert config["train"]["tokens_per_step"] == int(overrides[1].split("=")[1])
    assert summary["patch4-x4"]["gain"] > summary["bar"]["gain"] > summary["patch4"]["gain"]
