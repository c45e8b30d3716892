"""The report's first screen in a real browser (benchmarks/report_screenshot.py): both answers' leads
lie above the fold of a 1280 x 800 window. Skips only where no Chromium is installed."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "report_screenshot.py"
SECOND_EDITION = REPO / "reports" / "h200-btcusdt-1m-second-edition"


def _script():
    spec = importlib.util.spec_from_file_location("report_screenshot", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow  # a whole report and three Chromium runs: about 10 s on 2 cores
def test_both_leads_are_above_the_fold_in_chromium(tmp_path):
    shot = _script()
    if shot.find_chromium() is None:
        pytest.skip("no Chromium installed (apt install chromium)")
    if not any(SECOND_EDITION.glob("cells/n32768/*.cell.json")):
        pytest.skip("the second edition's cell summaries are absent")
    result = shot.run(SECOND_EDITION, tmp_path)
    assert result["above_the_fold"] == {"lead-forecast": True, "lead-trading": True}
    boxes = result["boxes"]
    assert set(boxes) == set(shot.LEADS)
    assert boxes["lead-forecast"]["y"] < boxes["lead-trading"]["y"] < boxes["q1-lead"]["y"] < boxes["q2-lead"]["y"]
    assert all(words <= 40 for k, words in result["words"].items() if k.startswith("q"))
    assert all(words <= 44 for words in result["words"].values())  # "Question 1 (forecasting):" and the lead
    assert _png_size(tmp_path / "first-screen.png") == _png_size(tmp_path / "question-1.png") == (1280, 800)
    assert json.loads((tmp_path / "boxes.json").read_text())["boxes"] == boxes
    assert "lie above the fold" in (tmp_path / "README.md").read_text()


def test_the_committed_screenshot_says_the_leads_were_above_the_fold():
    path = REPO / "reports" / "bench" / "report-screenshot" / "boxes.json"
    if not path.exists():
        pytest.skip("reports/bench/ is not checked out")
    committed = json.loads(path.read_text())
    assert committed["above_the_fold"] == {"lead-forecast": True, "lead-trading": True}
    assert committed["viewport"]["width"] == 1280
