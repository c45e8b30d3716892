"""The linear information probe in the report (`tsflash.report.diagnostics.probe`): the probe's difference to
the shortest N is the t over its fold differences, Holm over the longer N decides, and the sentence
says whether a linear reader finds far information, with the transformer's test beside it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tsflash.report.diagnostics.probe import (
    PROBE_SCORES,
    ProbeCheck,
    ProbeRow,
    fold_difference,
    probe_check,
    probe_sentence,
)
from tsflash.runfolder import baseline_order, probe_n
from tsflash.stats.runs import one_sample_t


def _run(per_fold: dict[int, list[float]]):
    """A RunData stand-in with probe baselines whose log-loss per fold is given (other scores 0.5)."""
    baselines = [{"name": "prior", "fold": f, "metrics": {"log_loss": 1.1}} for f in range(3)]
    for n, losses in per_fold.items():
        baselines += [{"name": f"probe-{n}", "fold": f, "metrics": {"log_loss": v, "direction_log_loss_moves": 0.69,
                                                                     "move_log_loss": 0.5}}
                      for f, v in enumerate(losses)]
    return SimpleNamespace(baselines=baselines, baseline_names=sorted({b["name"] for b in baselines}))


def test_names_order_and_parse():
    assert probe_n("probe-512") == 512 == probe_n("baseline-probe-512") and probe_n("prior") is None
    assert probe_n("probe-x") is None
    names = ["volatility", "probe-32768", "prior", "probe-512", "logreg", "probe-4096"]
    assert sorted(names, key=baseline_order) == ["logreg", "prior", "volatility", "probe-512", "probe-4096", "probe-32768"]


def test_difference_is_the_fold_t_and_holm_decides():
    short, mid, far = [1.00, 1.02, 0.98], [0.999, 1.0195, 0.9795], [0.990, 1.011, 0.969]
    check = probe_check(_run({512: short, 4096: mid, 32768: far}), [], None)
    assert [r.n for r in check.rows] == [512, 4096, 32768] and check.shortest == 512
    d = check.rows[2].vs_shortest["log_loss"]
    mean, _, _, _, p, (lo, hi) = one_sample_t(np.subtract(far, short))
    assert (d.mean, d.lo, d.hi, d.p, d.folds) == pytest.approx((mean, lo, hi, p, 3))
    assert check.rows[0].vs_shortest == {} and set(check.rows[1].vs_shortest) == set(PROBE_SCORES)
    ps = sorted(r.vs_shortest["log_loss"].p for r in check.rows[1:])
    assert sorted(r.p_holm for r in check.rows[1:]) == pytest.approx([2 * ps[0], max(2 * ps[0], ps[1])])
    assert check.rows[2].reads_more == (check.rows[2].p_holm < 0.05)


def test_sentence_says_found_or_not_and_names_the_transformer():
    found = ProbeRow(32768, "baseline-probe-32768", {}, {"log_loss": fold_difference([-0.01, -0.011, -0.009])},
                     transformer=SimpleNamespace(estimate=0.002, p=0.3), p_holm=0.004)
    base = ProbeRow(512, "baseline-probe-512", {}, {})
    text = probe_sentence(ProbeCheck([base, found]))
    assert "the far bars hold information a linear reader finds (at N=32768)" in text
    assert "The transformer at the same N, over training runs: N=32768 +0.002 (p 0.3)" in text
    none = ProbeRow(32768, "baseline-probe-32768", {}, {"log_loss": fold_difference([0.01, -0.011, 0.002])}, p_holm=0.9)
    assert "give a linear reader nothing significant over N=512's" in probe_sentence(ProbeCheck([base, none]))
    assert probe_sentence(ProbeCheck()) == "" and "no longer N" in probe_sentence(ProbeCheck([base]))
    one = fold_difference([0.01])
    assert one.folds == 1 and math.isnan(one.p) and not one.significant


def test_the_probe_steps_are_each_n_against_the_next_shorter_one():
    short, mid, far = [1.00, 1.02, 0.98], [0.99, 1.011, 0.969], [0.9899, 1.0111, 0.9688]
    check = probe_check(_run({512: short, 4096: mid, 32768: far}), [], None)
    assert [(t.shorter, t.longer) for t in check.steps] == [(512, 4096), (4096, 32768)]
    first, second = check.steps
    assert first.difference.mean == pytest.approx(np.mean(np.subtract(mid, short)))
    assert second.difference.mean == pytest.approx(np.mean(np.subtract(far, mid)))
    assert sorted(t.p_holm for t in check.steps) == pytest.approx(
        sorted(np.minimum(1, [2 * min(first.difference.p, second.difference.p),
                              max(2 * min(first.difference.p, second.difference.p),
                                  max(first.difference.p, second.difference.p))])))
    assert first.reads_more and not second.reads_more  # 4096 adds information, 32768 adds none
    assert check.to_dict()["steps"][0]["reads_more"] is True
