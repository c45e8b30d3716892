"""The committed A/A summary (reports/controls/aa/summary.md) is what the script computes from the
committed run folders: no figure in it was typed by hand."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("runlevel_second_edition",
                                                  REPO / "experiments" / "runlevel_second_edition.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_committed_aa_summary_recomputes_exactly_from_the_committed_runs(tmp_path):
    out = tmp_path / "summary.md"
    assert _script().main(["--out", str(out)]) == 0
    assert out.read_text() == (REPO / "reports" / "controls" / "aa" / "summary.md").read_text()


def test_every_aa_pair_and_replicate_names_a_committed_run_folder():
    script = _script()
    folders = list(script.REPLICATES.values()) + [p for pair in script.AA_PAIRS.values() for p in pair]
    missing = [f for f in folders if not (REPO / f / "run.json").exists()]
    assert not missing, missing
