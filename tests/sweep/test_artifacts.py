"""tsflash.sweep.artifacts: a job's files uploaded to its cell trial, fetched into another run
folder once the trial is COMPLETE (a cell's summary last), a store that lost them tolerated, and
no store for a private study."""

from __future__ import annotations

import logging
import os

from optuna.trial import TrialState

from tsflash.runfolder import RunFolder, write_json
from tsflash.sweep.artifacts import CHECKPOINT, FILES, CellFiles, open_store
from tsflash.sweep.ledger import Ledger, plan_slots


def saved_cell(ledger: Ledger, files: CellFiles, folder: RunFolder, name: str = "n32/fold0-seed0"):
    """A cell run in `folder`: its per-bar arrays and summary written, uploaded, its trial COMPLETE."""
    ledger.enqueue_cell(name, {"n": 32, "fold": 0, "seed": 0}, key="n32")
    cell = ledger.pop_cell(lambda t: t.number)
    stem = folder.cell_stem("n32", 0, 0)
    npz = folder.cell_npz(stem)
    npz.parent.mkdir(parents=True)
    npz.write_bytes(b"per-bar arrays")
    write_json(folder.cell_marker("n32", 0, 0), {"kind": "model"})
    files.upload(cell, [npz, folder.fold_scores_path("n32", 0), folder.cell_marker("n32", 0, 0)])  # no fold scores yet
    ledger.cells.tell(cell, 0.0)
    return cell


def test_a_cell_saved_on_one_host_is_fetched_into_another_run_folder(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    a, b = RunFolder(tmp_path / "a"), RunFolder(tmp_path / "b")
    store = open_store(str(tmp_path / "store"), a)
    hosts = [(ledger := Ledger.open("s", url, plan_slots([32], 1, 1e-3, 0.1), shared=True), CellFiles(store, ledger, f))
             for f in (a, b)]
    saved_cell(hosts[0][0], hosts[0][1], a)
    assert list(hosts[1][1].saved()) == ["n32/fold0-seed0"]
    cell = hosts[1][1].saved()["n32/fold0-seed0"]
    assert set(cell.user_attrs[FILES]) == {"cells/n32/fold0-seed0.npz", "cells/n32/fold0-seed0.cell.json"}
    hosts[1][1].fetch()
    assert b.cell_loadable("n32", 0, 0)
    assert b.cell_npz(b.cell_stem("n32", 0, 0)).read_bytes() == b"per-bar arrays"
    assert not (tmp_path / "a" / "artifacts").exists()  # the store is the shared folder


def test_a_store_that_lost_a_file_leaves_the_cell_unsaved_there(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    a, b = RunFolder(tmp_path / "a"), RunFolder(tmp_path / "b")
    ledger = Ledger.open("s", url, plan_slots([32], 1, 1e-3, 0.1), shared=True)
    cell = saved_cell(ledger, CellFiles(open_store(None, a), ledger, a), a)
    npz_id = cell.storage.get_trial(cell._trial_id).user_attrs[FILES]["cells/n32/fold0-seed0.npz"]
    (a.artifacts_dir / npz_id).unlink()
    with caplog.at_level(logging.WARNING):
        CellFiles(open_store(str(a.artifacts_dir), b), ledger, b).fetch()
    assert "cells/n32/fold0-seed0.npz of cell n32/fold0-seed0 is not in the artifact store" in caplog.text
    assert not b.cell_marker("n32", 0, 0).exists()  # its summary, fetched last, is not: trained again there


def test_a_private_study_has_no_store(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir()
    ledger = Ledger.open("s", folder.sqlite_url(), plan_slots([32], 1, 1e-3, 0.1))
    files = CellFiles(None, ledger, folder)
    saved_cell(ledger, files, folder)
    assert files.saved() == {} and not folder.artifacts_dir.exists()
    assert ledger.trials(TrialState.COMPLETE, study=ledger.cells)[0].user_attrs.get(FILES) is None


def test_a_running_cells_checkpoint_follows_it_to_the_host_that_retries_it(tmp_path):
    """Host A's worker dies mid-cell: the checkpoint it last wrote was uploaded to the cell's trial,
    optuna's retry copies that to the queued copy, and host B resumes from the same bytes; the
    replaced upload and, once the cell is saved, the last one leave the store."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    a, b = RunFolder(tmp_path / "a"), RunFolder(tmp_path / "b")
    store_dir = tmp_path / "store"
    ledger = Ledger.open("s", url, plan_slots([32], 1, 1e-3, 0.1), shared=True)
    files_a, files_b = (CellFiles(open_store(str(store_dir), f), ledger, f) for f in (a, b))
    ledger.enqueue_cell("n32/fold0-seed0", {"n": 32, "fold": 0, "seed": 0}, key="n32")
    cell = ledger.pop_cell(lambda t: t.number)
    ckpt_a, seen = a.checkpoint_dir("n32", 0, 0), {}
    ckpt_a.mkdir(parents=True)
    pt = ckpt_a / "fold0-n32-seed0.pt"
    files_a.upload_checkpoint(cell, ckpt_a, seen)  # no checkpoint yet: nothing
    assert CHECKPOINT not in cell.user_attrs
    pt.write_bytes(b"step 20")
    files_a.upload_checkpoint(cell, ckpt_a, seen)
    files_a.upload_checkpoint(cell, ckpt_a, seen)  # unchanged: not uploaded again
    first = dict(cell.user_attrs[CHECKPOINT])
    assert list(first) == ["checkpoints/n32/fold0-seed0/fold0-n32-seed0.pt"] and len(list(store_dir.iterdir())) == 1
    pt.write_bytes(b"step 40")
    os.utime(pt, ns=(pt.stat().st_mtime_ns + 10**9,) * 2)  # a later write, whatever the clock's resolution
    files_a.upload_checkpoint(cell, ckpt_a, seen)
    assert cell.user_attrs[CHECKPOINT] != first and len(list(store_dir.iterdir())) == 1  # the replaced one removed

    ledger.fail(cell.storage.get_trial(cell._trial_id))  # what optuna's heartbeat does to a dead worker's cell
    retried = ledger.pop_cell(lambda t: t.number)
    assert retried.user_attrs["cell"] == "n32/fold0-seed0" and retried.number != cell.number
    ckpt_b = b.checkpoint_dir("n32", 0, 0)
    files_b.restore_checkpoint(retried, ckpt_b)
    assert (ckpt_b / "fold0-n32-seed0.pt").read_bytes() == b"step 40"  # the engine resumes from it (test_resume)
    files_b.drop_checkpoint(retried)
    assert retried.user_attrs[CHECKPOINT] == {} and list(store_dir.iterdir()) == []


def test_a_host_with_its_own_checkpoint_keeps_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    a = RunFolder(tmp_path / "a")
    ledger = Ledger.open("s", url, plan_slots([32], 1, 1e-3, 0.1), shared=True)
    files = CellFiles(open_store(str(tmp_path / "store"), a), ledger, a)
    ledger.enqueue_cell("n32/fold0-seed0", {"n": 32, "fold": 0, "seed": 0}, key="n32")
    cell = ledger.pop_cell(lambda t: t.number)
    ckpt = a.checkpoint_dir("n32", 0, 0)
    ckpt.mkdir(parents=True)
    (ckpt / "fold0-n32-seed0.pt").write_bytes(b"uploaded")
    files.upload_checkpoint(cell, ckpt, {})
    (ckpt / "fold0-n32-seed0.pt").write_bytes(b"newer, written here")
    files.restore_checkpoint(cell, ckpt)
    assert (ckpt / "fold0-n32-seed0.pt").read_bytes() == b"newer, written here"
