"""The report's diagnostics are registered in one list (issue 57): every module of
`tsflash.report.diagnostics` is in DIAGNOSTICS, the report computes and shows them in its order, and
a new one (here a tiny fake) reaches the report, its HTML and results.json by that one line."""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass

import pytest

from tests.report.test_report import make_run
from tsflash.report import build_report, diagnostics, load_run
from tsflash.report.compute import compute
from tsflash.report.diagnostics import DIAGNOSTICS, OWN, RUNS, TRADING, sections
from tsflash.report.markdown import table


@dataclass(frozen=True)
class Tiny:
    """A diagnostic that counts the run's cells: its numbers, a table and a sentence, nothing else."""

    name: str = "tiny"
    heading: str = "Tiny check"
    placement: str = OWN

    def compute(self, rd, nums) -> dict:
        return {"cells": len(rd.cells), "lengths": len(nums.primary)}

    def rows(self, numbers: dict) -> dict | None:
        return table(["what", "how many"], [["cells", numbers["cells"]], ["lengths", numbers["lengths"]]])

    def sentences(self, numbers: dict) -> dict[str, list[str]]:
        return {"lead": [f"Tiny check: {numbers['cells']} cells over {numbers['lengths']} lengths."],
                "notes": ["How: it counts them."]}

    def to_json(self, numbers: dict) -> dict | None:
        return numbers


@pytest.fixture
def registered(request):
    """DIAGNOSTICS with the given fake diagnostics added at its end, for one test."""
    added = list(request.param)
    DIAGNOSTICS.extend(added)
    yield added
    for d in added:
        DIAGNOSTICS.remove(d)


def test_every_diagnostic_module_is_registered_once():
    modules = {m.name for m in pkgutil.iter_modules(diagnostics.__path__)} - {"base"}
    assert {type(d).__module__.rpartition(".")[2] for d in DIAGNOSTICS} == modules
    names = [d.name for d in DIAGNOSTICS]
    assert len(set(names)) == len(names) and all(d.placement in (OWN, RUNS, TRADING) for d in DIAGNOSTICS)


def test_the_report_computes_and_shows_them_in_the_lists_order(tmp_path, monkeypatch):
    rd = load_run(make_run(tmp_path, drift=0.0))
    nums = compute(rd)
    assert list(nums.diagnostics) == [d.name for d in DIAGNOSTICS]
    assert nums.forecast.nesting is nums.diagnostics["nesting"]  # question 1's answer reads the check
    shown = [s["name"] for s in sections(nums, OWN)]
    assert shown == [d.name for d in DIAGNOSTICS if d.name in shown] and "nesting" in shown
    monkeypatch.setattr(diagnostics, "DIAGNOSTICS", DIAGNOSTICS[::-1])  # the order is the list's, nothing else
    assert [s["name"] for s in sections(nums, OWN)] == shown[::-1]


@pytest.mark.parametrize("registered", [[Tiny()]], indirect=True)
def test_a_new_diagnostic_is_one_module_and_one_line(tmp_path, registered):
    folder = make_run(tmp_path, drift=0.0)
    counts = Tiny().compute(load_run(folder), compute(load_run(folder)))
    md, html = build_report(folder)
    text = md.read_text()
    assert (f"### Tiny check\n\n**Tiny check: {counts['cells']} cells over {counts['lengths']} lengths.**\n\n"
            "| what | how many |") in text
    assert "How: it counts them." in text
    assert text.index("### Nesting check") < text.index("### Tiny check") < text.index("## Question 2")
    assert "<h3>Tiny check</h3>" in html.read_text()
    assert json.loads((folder / "results.json").read_text())["tiny"] == counts


@pytest.mark.parametrize(("registered", "within"), [
    ([Tiny(name="tiny-runs", heading="", placement=RUNS)], ("### Over training runs", "### Forecast-level tests")),
    ([Tiny(name="tiny-gates", heading="", placement=TRADING)], ("### Trading rule per candidate", "### Selection gates")),
], indirect=["registered"])
def test_one_shown_inside_a_questions_section(tmp_path, registered, within):
    folder = make_run(tmp_path, drift=0.0)
    text = build_report(folder)[0].read_text()
    head, (inside, rest) = text.split(within[0], 1)[0], text.split(within[0], 1)[1].split(within[1], 1)
    assert "**Tiny check: " in inside and "| what | how many |" in inside and "How: it counts them." in inside
    assert "Tiny check" not in head + rest
