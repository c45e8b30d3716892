"""lab/probe_rereport.py: a finished run without the probe gets its probe rows per N in a
re-report, as the sweep would have fitted them, and the run folder itself is left as it was; the
re-report is written once, and a run that has the probe already is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import load_experiment
from tests.sweep.test_sweep import sweep_argv
from tsflash import cli

rereport = load_experiment("probe_rereport")

pytestmark = pytest.mark.usefixtures("single_thread")


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_without_the_probe_is_re_reported_with_it_and_left_unchanged(tmp_path):
    without, with_probe = tmp_path / "without", tmp_path / "with"
    assert cli.main(sweep_argv("synthetic:random-walk", without) + ["--set", "eval.probe=false"]) == 0
    assert "Linear information probe" not in (without / "report.md").read_text()
    before = _digests(without)
    out = tmp_path / "rereport"
    assert rereport.main([str(without), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "**Linear information probe" in md and "| baseline: linear probe N=64 |" in md
    assert _digests(without) == before  # the published folder is never written
    with pytest.raises(SystemExit, match="exists; a re-report is written once"):
        rereport.main([str(without), "--out", str(out)])
    # the same probe rows as a sweep that fitted them itself (the same folds, bars and rule)
    assert cli.main(sweep_argv("synthetic:random-walk", with_probe)) == 0
    row = next(line for line in (with_probe / "report.md").read_text().splitlines() if line.startswith("| N=64 | "))
    assert row in md.splitlines()
    with pytest.raises(SystemExit, match=r"already has probe baselines \(probe-32, probe-64\)"):
        rereport.main([str(with_probe), "--out", str(tmp_path / "again")])


@pytest.mark.slow  # about 30 s on 2 cores: the BTC bars, five folds of probes and a whole report
def test_the_published_probe_rereport_recomputes_from_the_run_and_the_bars(shared_store, tmp_path):
    """The committed BTC re-report's probe numbers, from the second edition's folder and the shared
    bars (its fingerprint checked), as committed."""
    import json

    from tests.conftest import REPO

    run = REPO / "reports" / "h200-btcusdt-1m-second-edition"
    committed = json.loads((run / "rereport-2026-12-probe" / "results.json").read_text())["probe"]
    assert rereport.main([str(run), "--root", str(shared_store), "--out", str(tmp_path / "again")]) == 0
    rebuilt = json.loads((tmp_path / "again" / "results.json").read_text())["probe"]
    # every committed number the same (to 1e-9: another CPU's BLAS may round the regression's last
    # digits otherwise); numbers added since (the probe's steps between consecutive N) may be new
    def close(was, now) -> bool:
        if isinstance(was, dict):
            return was.keys() <= now.keys() and all(close(was[k], now[k]) for k in was)
        if isinstance(was, list):
            return len(was) == len(now) and all(close(x, y) for x, y in zip(was, now, strict=True))
        if isinstance(was, float) and isinstance(now, float):
            return now == pytest.approx(was, rel=1e-9, abs=1e-12, nan_ok=True)
        return was == now

    assert close(committed, rebuilt)
    assert [(t["shorter"], t["longer"]) for t in rebuilt["steps"]] == [(512, 4096), (4096, 32768)]
    longest = committed["rows"][-1]
    assert longest["n"] == 32768 and not longest["reads_more"] and longest["vs_shortest"]["log_loss"]["p"] > 0.5
