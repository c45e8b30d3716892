"""The ranking check in a report (issue 29, deliverable 5): a run at three lengths or more reads each N
against the next shorter one over training runs, in its report, its questions.json and the plan's
state; the plan states the rule, and the slow regime's expectation names it."""

from __future__ import annotations

import json

import numpy as np
from tests.report.test_replicate import _report_ready, pair_tables

from tsflash.report import build_report, wording
from tsflash.sweep import preregister
from tsflash.sweep.plan import SweepOptions


def test_a_report_at_several_lengths_ranks_them(tmp_path):
    run, _ = pair_tables(np.random.default_rng(5))  # LENGTHS 32..256, three seeds, no true difference
    folder = _report_ready(tmp_path, tmp_path / "run", run)
    text = build_report(folder)[0].read_text()
    ranking = json.loads((folder / "questions.json").read_text())["forecast"]["runs"]["ranking"]
    assert [(p["reference"], p["series"]) for p in ranking["pairs"]] == [("n32", "n64"), ("n64", "n128"),
                                                                         ("n128", "n256")]
    assert ranking["verdict"] in ("in order", "out of order", "not shown")
    assert "**Ranking check (each N against the next shorter one over training runs, log-loss, Holm over 3 pairs): " \
           "N=64 minus N=32 " in text
    assert text.index("Ranking check") < text.index("Nesting check")


def test_the_plan_states_the_ranking_rule_and_the_regime_expects_it(tmp_path):
    plan = preregister.build_plan(SweepOptions(lengths=[512, 4096, 32768], preset="full"), [("per-bar", [])],
                                  controls=[("regime", "synthetic:regime:0:tilt=0.0375")])
    assert plan["ranking"] == {"rule": wording.RANKING_RULE}
    assert "ranking check \"in order\"" in plan["controls"][0]["expect"]
    _, md = preregister.write_plan(plan, tmp_path / "plan")
    assert f"**Ranking check**: {wording.RANKING_RULE}" in md.read_text()
    two = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), [("per-bar", [])])
    assert two["ranking"] is None  # two lengths: question 1's comparison is all there is
