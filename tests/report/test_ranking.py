"""The ranking check in a report (issue 29, deliverable 5): a run at three lengths or more reads each N
against the next shorter one over training runs, in its report, its questions.json and the plan's
state; the plan states the rule, and the slow regime's expectation names it."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

from tests.report.test_replicate import _report_ready, pair_tables
from tests.stats.test_ranking import three
from tsflash.report import build_report, wording
from tsflash.report.diagnostics.probe import Difference, ProbeCheck, ProbeStep
from tsflash.report.diagnostics.ranking import DOES_NOT_FOLLOW, FOLLOWS, NO_ORDER, information_order, ranking_sentence
from tsflash.stats.runs import ranking_check
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
    assert "ranking check \"follows the information\"" in plan["controls"][0]["expect"]
    _, md = preregister.write_plan(plan, tmp_path / "plan")
    assert f"**Ranking check**: {wording.RANKING_RULE}" in md.read_text()
    two = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), [("per-bar", [])])
    assert two["ranking"] is None  # two lengths: question 1's comparison is all there is


def _probe(*reads_more: bool) -> ProbeCheck:
    """A probe whose steps between 512, 4096 and 32768 read more (or not) as given."""
    lengths = (512, 4096, 32768)
    return ProbeCheck(steps=[ProbeStep(a, b, Difference(-0.002 if more else 0.0, -0.003, -0.001, 0.01, 10),
                                       0.01 if more else 0.9) for (a, b), more in zip(itertools.pairwise(lengths), reads_more, strict=True)])


@pytest.mark.parametrize("shifts, probe, expected", [
    ((0.0, -0.02, -0.02), (True, False), FOLLOWS),  # better where the probe reads more, level where it does not
    ((0.0, -0.02, -0.04), (True, False), FOLLOWS),  # better still where it does not: no claim against it
    ((0.0, 0.0, 0.0), (True, False), DOES_NOT_FOLLOW),  # the information is not used
    ((0.0, -0.02, 0.0), (True, False), DOES_NOT_FOLLOW),  # worse where the probe reads no less
    ((0.0, -0.02, -0.04), (False, False), NO_ORDER),
])
def test_the_ranking_is_held_to_the_order_of_the_information(shifts, probe, expected):
    ranking = ranking_check(three(np.random.default_rng(0), shifts))
    assert information_order(ranking, _probe(*probe), [512, 4096, 32768]) == expected
    text = ranking_sentence(ranking, _probe(*probe).steps, expected)
    assert (f"the ranking {expected}." if expected != NO_ORDER else "no order to hold the ranking to") in text
    assert ("N=4096 reads more than N=512" if probe[0] else "N=4096 no more shown than N=512") in text


def test_no_information_order_without_both_or_on_other_lengths():
    ranking = ranking_check(three(np.random.default_rng(0), (0.0, -0.02, -0.02)))
    assert information_order(None, _probe(True, False), [512, 4096, 32768]) is None
    assert information_order(ranking, ProbeCheck(), [512, 4096, 32768]) is None
    assert information_order(ranking, _probe(True, False), [512, 2048, 32768]) is None
    # a ranking with fewer pairs than the probe has steps is not read pair against step
    assert information_order(dataclasses.replace(ranking, pairs=ranking.pairs[:1]), _probe(True, False),
                             [512, 4096, 32768]) is None
