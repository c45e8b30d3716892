"""Each question of the report opens with one lead sentence of at most 40 words, a small table and
the figure; the tests and checks follow under their own headings (issue 57, deliverable 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tsflash.report import build_report
from tsflash.report.wording import LEAD_WORDS, forecast_lead

SECOND_EDITION = Path(__file__).resolve().parents[2] / "reports" / "h200-btcusdt-1m-second-edition"
SECTION_HEADINGS = ("### Over training runs", "### Forecast-level tests", "### Baselines", "### Nesting check")


def _number(cell: str) -> float:
    return float(cell.replace("−", "-").replace("%/day", "").replace("bp", "").strip())


def _blocks(text: str, start: str, end: str) -> list[str]:
    """The non-empty blocks (paragraphs, tables, figures) between two headings of report.md."""
    body = text[text.index(start) + len(start):text.index(end)]
    return [b.strip() for b in body.split("\n\n") if b.strip()]


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in table.splitlines()[2:]]


@pytest.fixture(scope="module")
def second_edition(tmp_path_factory):
    """The second edition's report rebuilt into a temporary folder (reports/ is never written)."""
    if not any(SECOND_EDITION.glob("cells/n32768/*.cell.json")):
        pytest.skip("the second edition's cell summaries are absent")
    out = tmp_path_factory.mktemp("second") / "report"
    md, html = build_report(SECOND_EDITION, out_dir=out)
    return out, md.read_text(), html.read_text()


def test_each_question_opens_with_its_lead_a_table_and_the_figure(second_edition):
    out, text, page = second_edition
    questions = json.loads((out / "questions.json").read_text())
    leads = {q: questions[q]["lead"] for q in ("forecast", "trading")}
    for lead in leads.values():
        assert len(lead.split()) <= LEAD_WORDS and lead.count(". ") == 0 and lead.endswith("."), lead
    q1 = _blocks(text, "## Question 1: does a longer context forecast better?", "## Question 2")
    assert q1[0] == f"**{leads['forecast']}**"
    assert q1[1].startswith("| N against N=512 | score | difference per bar | 95 % interval | Holm p |")
    assert q1[2].startswith("![Benefit against N")
    positions = [text.index(h) for h in SECTION_HEADINGS]
    assert positions == sorted(positions) and positions[-1] < text.index("## Question 2")
    q2 = _blocks(text, "## Question 2: is any of it tradable after fees and multiple testing?", "## Precision")
    assert q2[0] == f"**{leads['trading']}**"
    assert q2[1].startswith("| configuration | mean daily net (5 bps) | net Sharpe/yr | break-even fee |")
    assert q2[2].startswith("![Equity curves")
    assert q2[3] == "### Trading rule per candidate" and "### Selection gates" in q2
    # the first screen: the two leads, in bold, before the setup
    top = text[:text.index("## Setup")]
    assert f"**Question 1 (forecasting): {leads['forecast']}**" in top
    assert f"**Question 2 (trading): {leads['trading']}**" in top
    assert len(top.split()) < 400  # was about 520 words, the question-1 answer alone about 200
    for element in ("lead-forecast", "lead-trading", "q1-lead", "q2-lead"):
        assert f"<p id='{element}' class='verdict'><strong>" in page
    assert page.index("id='lead-trading'") < page.index("<h2>Setup</h2>")


def test_the_lead_tables_numbers_are_the_results(second_edition):
    """Each cell of both lead tables against questions.json and results.json, to its printed digits."""
    out, text, _ = second_edition
    questions = json.loads((out / "questions.json").read_text())
    results = json.loads((out / "results.json").read_text())
    q1 = _blocks(text, "## Question 1: does a longer context forecast better?", "## Question 2")
    rows = _rows(q1[1])
    comps = questions["forecast"]["runs"]["comparisons"]
    assert len(rows) == len(comps) == 4
    score_names = {"log_loss": "log-loss", "direction": "direction score"}
    for row, c in zip(rows, comps, strict=True):
        assert row[0] == f"N={c['series'][1:]} − N=512" and row[1] == score_names[c["score"]]
        assert _number(row[2]) == pytest.approx(c["estimate"], rel=5e-3)
        lo, hi = (_number(x) for x in row[3].strip("[]").split(", "))
        assert (lo, hi) == (pytest.approx(c["ci"][0], rel=5e-3), pytest.approx(c["ci"][1], rel=5e-3))
        assert _number(row[4]) == pytest.approx(c["p_holm"], rel=5e-3)
        assert row[5] == f"{c['n_runs'][1]}, {c['n_runs'][0]}"
    q2 = _blocks(text, "## Question 2: is any of it tradable after fees and multiple testing?", "## Precision")
    rows = _rows(q2[1])
    cands = results["selection"]["candidates"]
    fees = {r["series"]: r["break_even_fee_bps"] for r in questions["trading"]["rows"]}
    assert [r[0] for r in rows] == [c["label"] for c in cands] == ["N=512", "N=4096", "N=32768"]
    for row, c in zip(rows, cands, strict=True):
        assert _number(row[1]) / 100 == pytest.approx(c["mean_daily_net"], rel=5e-3)
        assert _number(row[2]) == pytest.approx(c["sharpe_annual"], abs=5e-3)
        assert _number(row[3]) == pytest.approx(fees[c["key"]], abs=5e-3)


def test_a_lead_too_long_for_its_limit_falls_back_to_a_short_one():
    nesting = SimpleNamespace(failed=[])
    long_reason = " ".join(["why"] * 60)
    fq = SimpleNamespace(runs=SimpleNamespace(available=False, reason=long_reason), nesting=nesting)
    assert forecast_lead(fq) == "Not answered over training runs; the tests below say why."
    fq.runs.reason = "one seed per fold"
    assert forecast_lead(fq) == "Not answered over training runs: one seed per fold."
    fq.nesting = SimpleNamespace(failed=[object()])
    assert re.fullmatch(r"Not answered over training runs: one seed per fold; the nesting check fails\.", forecast_lead(fq))
