"""Scoring fold by fold: a fold's small score file is written once all its seeds are saved, and a
run folder that loses every per-bar cell (a device's state archive) retrains only the cells of
folds not scored yet, then scores exactly as an uninterrupted run (tiny sweeps on CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest

from tests.sweep.test_sweep import TINY
from tsflash import cli, engine
from tsflash.config import config_from_dict
from tsflash.runfolder import RunFolder
from tsflash.scoring.daily import (
    BarReturns,
    cell_arrays,
    concat_losses,
    daily_series,
    daily_series_of_folds,
    fold_daily,
    fold_losses,
    read_losses,
    series_from_cells,
)
from tsflash.sweep import run as sweep
from tsflash.sweep.workers import CellQueue

SEEDS = [0, 1]
KEYS = ("n32", "n64")
N_FOLDS = 2


def argv(out: Path) -> list[str]:
    args = ["sweep", "--lengths", "32,64", "--data", "synthetic:random-walk", "--out", str(out), "--preset", "cpu",
            "--device", "cpu", "--no-precision", "--set", f"train.seeds={SEEDS}"]
    for item in TINY:
        args += ["--set", item]
    return args


def loadable(folder: RunFolder, key: str, fold: int, seed: int) -> bool:
    stem = folder.cell_stem(key, fold, seed)
    return folder.cell_marker(key, fold, seed).exists() and folder.cell_npz(stem).exists()


pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, list[tuple[str, int, bool]]]:
    """The tiny sweep with two seeds in one go, and each fold file write: (key, fold, were all
    the fold's seeds saved with their arrays at that moment)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    folder, writes = RunFolder(out), []
    write = sweep.write_fold_scores

    def recorded(f, key, fold, scores):
        writes.append((key, fold, all(loadable(folder, key, fold, s) for s in SEEDS)))
        return write(f, key, fold, scores)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sweep, "write_fold_scores", recorded)
        assert cli.main(argv(out)) == 0
    return out, writes


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[Path, str]:
    """The same sweep stopped by its time budget once a trial's fold 0 (both seeds) and fold 1
    seed 0 are saved; then every per-bar file (cells/*/*.npz) is deleted, as a state archive
    does. Returns the folder (before any resume) and the key of the unfinished trial."""
    out = tmp_path_factory.mktemp("interrupted") / "run"

    def late(queue: CellQueue) -> bool:  # the budget runs out after the third model cell, deterministically
        queue.out_of_time = len(list((out / "cells").glob("n*/*.cell.json"))) >= 3
        return queue.out_of_time

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CellQueue, "_late", late)
        assert cli.main(argv(out) + ["--time-budget", "3600"]) == 0
    assert not (out / "report.md").exists()
    (key,) = {p.parent.name for p in (out / "cells").glob("n*/*.cell.json")}
    for npz in (out / "cells").glob("*/*.npz"):
        npz.unlink()
    return out, key


def ledger(run: Path) -> dict:
    """Per trial key: its value, intermediate values and user attrs (the ledger's own left out)."""
    meta = json.loads((run / "run.json").read_text())
    study = optuna.load_study(study_name=meta["study_name"], storage=f"sqlite:///{run / 'optuna.db'}")
    return {t.user_attrs["key"]: (t.value, t.intermediate_values,
                                  {k: v for k, v in t.user_attrs.items() if k not in ("worker", "heartbeat")})
            for t in study.trials}


def assert_tables_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_a_fold_is_scored_once_all_its_seeds_are_saved(uninterrupted, interrupted):
    run, writes = uninterrupted
    assert writes and all(ready for _, _, ready in writes)
    assert {(key, fold) for key, fold, _ in writes} == {(key, fold) for key in KEYS for fold in range(N_FOLDS)}
    folder = RunFolder(run)
    assert all(folder.fold_scores_path(key, fold).is_file() for key in KEYS for fold in range(N_FOLDS))
    # the stopped run: fold 0 of its trial is scored, fold 1 (seed 1 missing) is not
    stopped, key = interrupted
    folder = RunFolder(stopped)
    assert folder.cell_marker(key, 1, 0).exists() and not folder.cell_marker(key, 1, 1).exists()
    assert folder.fold_scores_path(key, 0).is_file() and not folder.fold_scores_path(key, 1).exists()
    # without its per-bar arrays a cell is saved only through its fold's scores
    assert folder.cell_saved(key, 0, 0) and folder.cell_saved(key, 0, 1)
    assert not folder.cell_saved(key, 1, 0) and not folder.cell_saved(key, 1, 1)
    assert folder.saved_cell_keys() == [key, key]


def test_a_cell_whose_files_were_left_behind_before_its_fold_was_scored_counts_nowhere(interrupted):
    """Fold 1's seed 0 has its summary but neither its arrays nor its fold's scores: it is trained
    again, so it is not a measurement of the cell time a resumed slice plans with (it may have
    shared its GPU with another run), though it was trained (the scaling benchmark counts it)."""
    stopped, key = interrupted
    folder = RunFolder(stopped)
    cfg = config_from_dict(json.loads(folder.config_json.read_text()))
    assert folder.n_finished_cells() == N_FOLDS + 3  # the baselines' folds and the three cells trained
    observed = []

    class Cost:
        def observe(self, work, seconds):
            observed.append((work.n, seconds))

    sweep._observe_saved_cells(Cost(), folder, cfg, model_params=1000)
    summaries = {(c["fold"], c["seed"]): c["seconds"] for c in folder.cell_summaries()[0]}
    assert len(summaries) == 3 and sorted(observed) == sorted((int(key[1:]), summaries[0, s]) for s in SEEDS)


def test_the_fold_scores_are_what_the_cells_score(uninterrupted):
    """The trial's series and loss table joined from fold files equal those scored from the
    per-bar cells in one go (how every trial was scored before fold files), bit for bit."""
    folder = RunFolder(uninterrupted[0])
    for key in KEYS:
        from_cells = series_from_cells(folder, key, N_FOLDS, SEEDS, fee_bps=5.0)
        saved = folder.read_series(key)
        assert all(np.array_equal(from_cells[k], saved[k]) for k in ("days", "net", "gross"))
        losses = concat_losses([fold_losses(key, k, [cell_arrays(folder.cell_stem(key, k, s)) for s in SEEDS],
                                            [f"seed{s}" for s in SEEDS]) for k in range(N_FOLDS)])
        assert_tables_equal(read_losses(folder, key), {k: v.astype(object) if v.dtype.kind == "U" else v
                                                       for k, v in losses.items()})


@pytest.mark.slow  # a third tiny sweep, resumed (about 20 s on 2 shared cores)
def test_a_run_that_lost_its_cells_retrains_only_unscored_folds(uninterrupted, interrupted, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(interrupted[0], run)
    key = interrupted[1]
    folder = RunFolder(run)
    cfg = config_from_dict(json.loads(folder.config_json.read_text()))
    assert sweep._baselines_done(folder, cfg)  # their arrays are gone, but their series are written
    for p in [*(run / "series").glob("baseline-*"), *(run / "forecasts").glob("baseline-*")]:
        p.unlink()  # as if the baselines' job had been cut before it wrote them: now they are trained again
    assert not sweep._baselines_done(folder, cfg)
    baselines = {p: p.stat().st_mtime_ns for p in (run / "cells" / "baselines").glob("*.cell.json")}
    scored = folder.fold_scores_path(key, 0)
    kept = scored.stat().st_mtime_ns
    trained = []
    run_cell = engine.run_cell  # what the sweep trains a cell with

    def counted(prepared, n, k, seed, *args, **kwargs):
        trained.append((f"n{n}", k, seed))
        return run_cell(prepared, n, k, seed, *args, **kwargs)

    monkeypatch.setattr(engine, "run_cell", counted)
    assert cli.main(argv(run)) == 0
    assert (run / "report.md").is_file()
    other = next(k for k in KEYS if k != key)
    unscored = [(key, 1, 0), (key, 1, 1)] + [(other, k, s) for k in range(N_FOLDS) for s in SEEDS]
    assert sorted(trained) == sorted(unscored)  # fold 0 of the stopped trial is not trained again
    assert scored.stat().st_mtime_ns == kept  # read, not scored again
    assert all(p.stat().st_mtime_ns != t for p, t in baselines.items())
    a, b = RunFolder(uninterrupted[0]), RunFolder(run)
    assert a.series_names() == b.series_names()
    for name in a.series_names():
        sa, sb = a.read_series(name), b.read_series(name)
        assert all(np.array_equal(sa[k], sb[k]) for k in ("days", "net", "gross")), name
        assert_tables_equal(read_losses(a, name), read_losses(b, name))
    assert ledger(run) == ledger(uninterrupted[0])  # values, per-fold Sharpe ratios, fold metrics, paths


@pytest.mark.parametrize("seed", range(20))
def test_folds_join_into_the_daily_series_bit_for_bit(seed):
    """Fold boundaries anywhere in a UTC day (one fold may lie inside a single day): joining the
    folds' FoldDaily gives exactly `daily_series` of their per-bar paths."""
    rng = np.random.default_rng(seed)
    step = 60_000_000  # 1m bars, with gaps
    times = np.cumsum(rng.choice([step, step, step, 7 * step, 700 * step], size=int(rng.integers(50, 9000))))
    times += int(rng.integers(0, 10**7)) * step  # a start anywhere in some 19 years
    cuts = np.sort(rng.choice(np.arange(1, len(times)), size=int(rng.integers(0, 6)), replace=False))
    scale = rng.choice([1e-4, 1e-2, 0.3])  # daily growth beyond [0.5, 2] too
    parts = []
    for t in np.split(times, cuts):
        net = rng.normal(0, scale, len(t)).clip(-0.9)
        parts.append(BarReturns(t, net, net + rng.normal(0, scale / 10, len(t)), np.zeros(len(t))))
    rng.shuffle(parts)
    want, got = daily_series(parts), daily_series_of_folds([fold_daily(p) for p in parts])
    for k in ("days", "net", "gross"):
        assert want[k].dtype == got[k].dtype and np.array_equal(want[k], got[k]), k


def test_a_fold_inside_one_day_joins_both_neighbours():
    rng = np.random.default_rng(7)
    day, step = 86_400_000_000, 60_000_000
    times = 19_000 * day + np.arange(3 * 1440) * step  # three whole UTC days
    cuts = [1440 + 100, 1440 + 900]  # the middle fold lies inside day 2, shared with both neighbours
    parts = [BarReturns(t, r, 2 * r, np.zeros(len(t)))
             for t, r in zip(np.split(times, cuts), np.split(rng.normal(0, 1e-3, len(times)), cuts), strict=True)]
    joined = daily_series_of_folds([fold_daily(p) for p in parts])
    assert len(fold_daily(parts[1]).days) == 1 and len(joined["days"]) == 3
    assert all(np.array_equal(daily_series(parts)[k], joined[k]) for k in ("days", "net", "gross"))


def test_the_published_run_has_its_baselines_without_their_arrays():
    published = RunFolder(Path(__file__).resolve().parents[2] / "reports" / "h200-btcusdt-1m")
    cfg = config_from_dict(json.loads(published.config_json.read_text()))
    assert not list(published.cells_dir.glob("*/*.npz")) and not published.forecasts_dir.exists()
    assert sweep._baselines_done(published, cfg)  # nothing to train again when it is resumed or re-reported
