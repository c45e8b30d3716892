"""A cell's files through optuna.artifacts: hosts that share only the storage and an artifact store.

Before a cell's trial is completed, the files its job wrote in the worker's run folder (a model
cell's summary and per-bar arrays, its fold's scores; a configuration's daily series; the
baselines; precision.json) are uploaded to that trial, their paths in the run folder kept in its
user attribute "files" ({path: artifact id}; optuna-dashboard lists them under the trial). A cell
is saved when its trial is COMPLETE with its files; a host fetches what its run folder lacks
(`CellFiles.fetch`), a cell's summary last, since on disk it marks the cell done. The store is
--artifacts: a folder (optuna's FileSystemArtifactStore; by default <run folder>/artifacts) or
s3://bucket (Boto3ArtifactStore: boto3 installed by the user, AWS_ENDPOINT_URL for an
S3-compatible server). A private study (no --storage, no --artifacts) has no store: its one
run folder is all there is.

A running cell's checkpoint travels too: each time the engine rewrites it, it is uploaded to the
cell's trial (user attribute "checkpoint", the previous upload removed from the store), and optuna's
retry copies that attribute to the queued copy of a cell whose worker died, so the worker that pops
it, on any host, resumes from it (`restore_checkpoint`). A saved cell's checkpoint leaves the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from optuna.artifacts import FileSystemArtifactStore, download_artifact, upload_artifact
from optuna.artifacts.exceptions import ArtifactNotFound
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState

from tsflash.atomic import atomic_path
from tsflash.runfolder import CELL_SUFFIX, RunFolder

log = logging.getLogger(__name__)

FILES = "files"  # the user attribute of a cell trial: {path in the run folder: artifact id}
CHECKPOINT = "checkpoint"  # the same for the latest checkpoint of a running cell


def open_store(spec: str | None, folder: RunFolder):
    """The artifact store named by --artifacts (module doc)."""
    if spec and spec.startswith("s3://"):
        from optuna.artifacts import Boto3ArtifactStore

        return Boto3ArtifactStore(spec.removeprefix("s3://").strip("/"))
    path = Path(spec) if spec else folder.artifacts_dir
    path.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(path)


class CellFiles:
    """Upload a job's files to its cell trial; fetch those of COMPLETE cells into the run folder."""

    def __init__(self, store, ledger, folder: RunFolder):
        self.store, self.ledger, self.folder = store, ledger, folder

    def upload(self, cell: Trial, paths: Iterable[Path]) -> None:
        if self.store is None:
            return
        # a cell failed under this worker (its beat came late) belongs to the worker that retries it
        with contextlib.suppress(UpdateFinishedTrialError):
            cell.set_user_attr(
                FILES,
                {
                    self.folder.relative(p): upload_artifact(
                        artifact_store=self.store, file_path=str(p), study_or_trial=cell
                    )
                    for p in paths
                    if p.exists()
                },
            )

    def upload_checkpoint(self, cell: Trial, ckpt_dir: Path, seen: dict[str, int]) -> None:
        """Upload the checkpoint files in `ckpt_dir` rewritten since `seen` ({path: mtime_ns}, updated)
        to the running `cell`, and remove the uploads they replace (called after every step: one stat)."""
        if self.store is None or not ckpt_dir.is_dir():
            return
        changed = {}
        for p in ckpt_dir.glob("*.pt"):
            if seen.get(str(p)) != (mtime := p.stat().st_mtime_ns):
                seen[str(p)] = mtime
                changed[self.folder.relative(p)] = p
        if changed:
            old = cell.user_attrs.get(CHECKPOINT, {})
            cell.set_user_attr(
                CHECKPOINT,
                old
                | {
                    name: upload_artifact(artifact_store=self.store, file_path=str(p), study_or_trial=cell)
                    for name, p in changed.items()
                },
            )
            self._remove(old[name] for name in changed if name in old)

    def restore_checkpoint(self, cell: Trial, ckpt_dir: Path) -> None:
        """Put a retried cell's checkpoint (uploaded by the worker it lost) in this run folder, unless
        one is here already (its own host resumes from its own file)."""
        uploaded = cell.user_attrs.get(CHECKPOINT) if self.store else None
        if not uploaded or (ckpt_dir.is_dir() and any(ckpt_dir.glob("*.pt"))):
            return
        with contextlib.suppress(ArtifactNotFound):
            for name, artifact_id in uploaded.items():
                with atomic_path(self.folder.root / name) as tmp:
                    download_artifact(artifact_store=self.store, file_path=str(tmp), artifact_id=artifact_id)
            log.info(
                "cell %s: its checkpoint fetched from the artifact store (written by the worker it lost)",
                cell.user_attrs.get("cell"),
            )

    def drop_checkpoint(self, cell: Trial) -> None:
        """A saved cell's checkpoint leaves the store (its attribute is emptied)."""
        if self.store is not None and (uploaded := cell.user_attrs.get(CHECKPOINT)):
            with contextlib.suppress(UpdateFinishedTrialError):
                cell.set_user_attr(CHECKPOINT, {})
            self._remove(uploaded.values())

    def _remove(self, artifact_ids: Iterable[str]) -> None:
        for artifact_id in artifact_ids:
            with contextlib.suppress(ArtifactNotFound, OSError):
                self.store.remove(artifact_id)

    def saved(self) -> dict[str, FrozenTrial]:
        """The COMPLETE cells with their files, by cell name (none without a store)."""
        cells = self.ledger.trials(TrialState.COMPLETE, study=self.ledger.cells) if self.store else []
        return {t.user_attrs["cell"]: t for t in cells if FILES in t.user_attrs}

    def fetch(self, which: Callable[[FrozenTrial], bool] = lambda cell: True) -> None:
        """Download the files of the saved cells `which` selects that the run folder lacks."""
        fetched = 0
        for cell in filter(which, self.saved().values()):
            for name, artifact_id in sorted(cell.user_attrs[FILES].items(), key=lambda f: f[0].endswith(CELL_SUFFIX)):
                if not (path := self.folder.root / name).exists():
                    try:
                        with atomic_path(path) as tmp:
                            download_artifact(artifact_store=self.store, file_path=str(tmp), artifact_id=artifact_id)
                        fetched += 1
                    except ArtifactNotFound:  # a store left behind: the cell is trained again where it is needed
                        log.warning("%s of cell %s is not in the artifact store", name, cell.user_attrs["cell"])
                        break
        if fetched:
            log.info("fetched %d file(s) of other workers' cells from the artifact store", fetched)
