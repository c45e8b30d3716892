"""The third edition's state as the README and docs/results.md tell it, against the committed records:
the device calls (reports/third-edition/calls/) and each unfinished run's saved cells (`lab.plan --check`)."""

from __future__ import annotations

import re

from lab.plan_state import device_calls, plan_state
from tests.conftest import REPO

PLAN = REPO / "reports" / "third-edition"
TOLD = {name: (REPO / name).read_text() for name in ("README.md", "docs/results.md")}
RUNS = {"echo": "controls/echo/per-bar", "iid": "controls/iid/per-bar"}


def test_the_device_calls_told_are_the_records():
    told = re.findall(r"after ([\d,]+) recorded device calls \(([\d,]+) s of wall-clock", TOLD["docs/results.md"])
    assert told, "docs/results.md's state line names the recorded device calls"
    calls = device_calls(PLAN)
    for n, seconds in told:
        assert (int(n.replace(",", "")), int(seconds.replace(",", ""))) == (calls["calls"], calls["seconds"])


def test_the_cells_told_of_each_control_are_the_cells_saved():
    state = {row["folder"]: row["state"] for row in plan_state(PLAN)}
    claim = r"the (echo|iid) control (?:has (\d+) of (\d+) (?:model )?cells|(has not begun))"
    told = [(name, *m) for name, text in TOLD.items() for m in re.findall(claim, text, re.IGNORECASE)]
    for name, control, saved, planned, not_begun in told:
        expected = "not started" if not_begun else f"{saved} of {planned} cells saved"
        assert state[RUNS[control.lower()]].startswith(expected), (name, control, state[RUNS[control.lower()]])
    # while the first stage runs, both files tell how far its controls are; once it is complete, neither need
    unfinished = [run for run in RUNS.values() if state[run] != "complete"]
    assert {name for name, *_ in told} == set(TOLD) or not unfinished
