"""The run folder: one home for where a sweep's files live and how they are named.

The sweep writes through this module and the report (and `tsflash confirm`, notebooks, tests)
reads through it, so a path, a trial key or a file convention is spelled exactly once.

Layout of a run folder (`runs/<YYYYMMDD-HHMMSS>-<config hash>` by default)::

    run.json            run key, command, options, status ("running" | "complete")
    config.json         the resolved ExperimentConfig (after preset and overrides)
    data.json           data source, fingerprint, gaps, folds with dates
    sweep.log           the log of every invocation (appended)
    optuna.db           the trial ledger (SQLite) unless --storage points elsewhere
    cells/<trial key>/fold<k>-seed<s>.{npz,json}   FoldResult.save: per-bar out-of-sample series
    cells/<trial key>/fold<k>-seed<s>.cell.json    the cell's summary; its presence = cell done
    cells/baselines/fold<k>-<name>.{npz,json}      baselines, once per fold (independent of N)
    cells/baselines/fold<k>.cell.json              summary of the fold's baselines
    scores/<trial key>/fold<k>.npz                 one fold of a trial scored (its seeds' daily portfolio
                                                   and loss table; small): written once every seed of the
                                                   fold is saved, it stands in for their per-bar arrays
    series/<trial key>.npz                         a trial's daily net/gross returns (all folds)
    series/baseline-<name>.npz                     a baseline's daily returns
    forecasts/<trial key or baseline-<name>>.npz   per-day loss sums of the forecasts (the paired
                                                   tests of question 1; small, kept when cells are not)
    checkpoints/<trial key>/fold<k>-seed<s>/       engine checkpoints of unfinished cells
    artifacts/<artifact id>                        the cells' files as uploaded to their trials (the default
                                                   --artifacts store: tsflash.sweep.artifacts)
    claims/<job>.claim, claims/.lock               run folders of the version whose workers claimed cells with
                                                   files: refused while claims remain (tsflash.sweep.run)
    optuna.db also holds the study "<study>:cells": one trial per cell (tsflash.sweep.ledger)
    ledger.json, precision.json, results.json, report.md, report.html, *.parquet, figures/
    confirm.md, confirm.html, confirm.json   `tsflash confirm`: the verdict re-tested on a later hold-out
    confirm/            its work folder, laid out as a run folder (run.json, cells/, series/, ...)

Trial keys name a configuration: "n512", or "n512-lr0.0003-wd0.05" when hyper-parameters are
searched (`encode_trial_key` / `decode_trial_key`). JSON files are written by the project's one
writer, `tsflash.atomic.write_json` (atomic and fsync'ed; indent 1, sorted keys, numpy values as
Python ones, non-finite floats kept as NaN tokens), re-exported here for the run folder's writers.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsflash import atomic
from tsflash.atomic import write_json  # noqa: F401  (re-exported: the run folder's JSON writer)
from tsflash.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

CELL_SUFFIX = ".cell.json"
# New run folders go here (git-ignored): `reports/` is only for published runs, copied there on purpose.
DEFAULT_RUNS_ROOT = Path("runs")
BASELINE_DIR = "baselines"
CLAIMS_DIR = "claims"
BASELINE_PREFIX = "baseline-"

# Short names of searched hyper-parameters inside a trial key, and back.
_SHORT = {"lr": "lr", "weight_decay": "wd"}
_LONG = {v: k for k, v in _SHORT.items()}


# ---------------------------------------------------------------------------------------------
# Trial keys


def encode_trial_key(params: dict) -> str:
    """{"n": 512} -> "n512"; {"n": 512, "lr": 3e-4, "weight_decay": 0.05} -> "n512-lr0.0003-wd0.05"."""
    key = f"n{int(params['n'])}"
    for name, value in sorted((k, v) for k, v in params.items() if k != "n"):
        key += f"-{_SHORT.get(name, name)}{value:.4g}"
    return key


def decode_trial_key(key: str) -> dict:
    """Inverse of `encode_trial_key` (values as printed, 4 significant digits):
    "n512-lr0.0003-wd0.05" -> {"n": 512, "lr": 0.0003, "weight_decay": 0.05}."""
    head, *rest = re.split(r"-(?=[A-Za-z_])", key)  # a "-" before a letter starts a part; "1e-05" stays whole
    if not head.startswith("n") or not head[1:].isdigit():
        raise ValueError(f"not a trial key: {key!r}")
    out: dict = {"n": int(head[1:])}
    for part in rest:
        i = next((j for j, ch in enumerate(part) if ch.isdigit() or ch == "."), len(part))
        out[_LONG.get(part[:i], part[:i])] = float(part[i:])
    return out


def is_baseline(name: str) -> bool:
    return name.startswith(BASELINE_PREFIX)


def baseline_series_name(baseline: str) -> str:
    """\"logreg" -> "baseline-logreg", the name of its daily series."""
    return f"{BASELINE_PREFIX}{baseline}"


PROBE_PREFIX = "probe-"  # the linear information probe's baseline at context length N: "probe-<N>"


def probe_name(n: int) -> str:
    """512 -> "probe-512", the probe baseline's name (its series: baseline_series_name of it)."""
    return f"{PROBE_PREFIX}{n}"


def probe_n(name: str) -> int | None:
    """N of a probe baseline's name or series name ("probe-512", "baseline-probe-512"), else None."""
    name = name.removeprefix(BASELINE_PREFIX)
    tail = name.removeprefix(PROBE_PREFIX)
    return int(tail) if tail != name and tail.isdigit() else None


def baseline_order(name: str) -> tuple:
    """Sort key of baseline names: the fixed baselines by name, then the probes by N."""
    n = probe_n(name)
    return (n is not None, n or 0, name)


# What a run's kept record (`RunFolder.copy_record`) leaves out at the top of the folder: the
# report's rendered forms and the daily forecast table, rebuilt from the rest.
RECORD_SKIP = ("figures", "report.html", "forecast_daily.parquet")
# ... and, of a finished run only, what a resume reads back (fold scores, daily series, loss tables).
RESUME_FILES = ("scores", "series", "forecasts")


# ---------------------------------------------------------------------------------------------
# JSON


class DamagedFile(UserError, ValueError):
    """A run folder's file that cannot be read as what it should be: one line naming it. Also a
    ValueError, so a caller that skips unreadable folders (`find_unfinished_run`) still does."""


def read_json(path: Path) -> dict:
    """A JSON file of a run folder; DamagedFile naming it when it is not valid JSON."""
    try:
        return json.loads(Path(path).read_text())
    except ValueError as exc:  # JSONDecodeError and undecodable bytes
        raise DamagedFile(f"{path} is damaged: not valid JSON ({exc.__class__.__name__}: {exc})") from None


def read_parquet(path: Path) -> pa.Table:
    """A run folder's Parquet file as a pyarrow Table; DamagedFile naming it when it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, page_checksum_verification=True)  # files written without CRCs read as before
    except FileNotFoundError:  # a missing file is not a damaged one
        raise
    except (pa.ArrowException, OSError) as exc:  # ArrowInvalid: a cut file; OSError: a page's CRC or encoding
        raise DamagedFile(f"{path} is damaged: not a readable Parquet file ({exc.__class__.__name__}: {exc})") from None


@contextmanager
def load_npz(path: Path) -> Iterator[Any]:
    """`np.load` of a run folder's .npz archive, closed after the block; DamagedFile naming it when it
    is not a readable archive or an array fails its checksum (a file changed after it was written)."""
    import numpy as np

    try:
        z = np.load(path)
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:  # ValueError: not an archive, not an array
        raise DamagedFile(f"{path} is damaged: not a readable .npz archive ({exc.__class__.__name__}: {exc})") from None
    try:
        yield z
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:  # an array's bytes, read lazily in the block
        raise DamagedFile(f"{path} is damaged: an array cannot be read ({exc.__class__.__name__}: {exc})") from None
    finally:
        z.close()


# run.json "format": raised when a change makes run folders that an older tsflash would misread.
RUN_FORMAT = 1


def check_run_meta(meta: dict, path: Path) -> dict:
    """`meta` (a run.json) if this tsflash can read its folder; UserError for one written by a newer
    version (a folder without "format" predates it: format 1)."""
    fmt = meta.get("format", 1) if isinstance(meta, dict) else None
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt > RUN_FORMAT:
        from tsflash import __version__

        raise UserError(
            f"{path} was written by a newer tsflash (run folder format {fmt!r}; tsflash {__version__} "
            f'reads formats up to {RUN_FORMAT}): use the version that wrote it (run.json "git_commit")'
        )
    return meta


def read_run_json(path: Path) -> dict:
    """A run.json, checked (`check_run_meta`); a damaged one is one line (`read_json`), not a traceback."""
    return check_run_meta(read_json(path), path)


# ---------------------------------------------------------------------------------------------
# The folder


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run folder. Nothing is created until something is written."""

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    # top-level files
    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def config_json(self) -> Path:
        return self.root / "config.json"

    @property
    def data_json(self) -> Path:
        return self.root / "data.json"

    @property
    def log_file(self) -> Path:
        return self.root / "sweep.log"

    @property
    def optuna_db(self) -> Path:
        return self.root / "optuna.db"

    @property
    def ledger_json(self) -> Path:
        return self.root / "ledger.json"

    @property
    def precision_json(self) -> Path:
        return self.root / "precision.json"

    @property
    def results_json(self) -> Path:
        return self.root / "results.json"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    # `tsflash confirm`: its answers beside the report, its cells in a RunFolder of their own
    @property
    def confirm_md(self) -> Path:
        return self.root / "confirm.md"

    @property
    def confirm_html(self) -> Path:
        return self.root / "confirm.html"

    @property
    def confirm_json(self) -> Path:
        return self.root / "confirm.json"

    @property
    def confirm_dir(self) -> Path:
        return self.root / "confirm"

    @property
    def figures_dir(self) -> Path:
        return self.root / "figures"

    @property
    def cells_dir(self) -> Path:
        return self.root / "cells"

    @property
    def series_dir(self) -> Path:
        return self.root / "series"

    @property
    def forecasts_dir(self) -> Path:
        return self.root / "forecasts"

    def forecasts_path(self, name: str) -> Path:
        """forecasts/<name>.npz: the per-day loss sums of one trial key or baseline-<name>."""
        return self.forecasts_dir / f"{name}.npz"

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def artifacts_dir(self) -> Path:
        return self.root / "artifacts"

    @property
    def claims_dir(self) -> Path:
        return self.root / CLAIMS_DIR

    def sqlite_url(self) -> str:
        return f"sqlite:///{self.optuna_db.as_posix()}"

    # cells
    def cell_stem(self, key: str, fold: int, seed: int) -> Path:
        """Stem of a model cell's FoldResult files (`<stem>.npz`, `<stem>.json`)."""
        return self.cells_dir / key / f"fold{fold}-seed{seed}"

    def cell_marker(self, key: str, fold: int, seed: int) -> Path:
        """The model cell's summary; it exists exactly when the cell is finished."""
        return _marker(self.cell_stem(key, fold, seed))

    def cell_saved(self, key: str, fold: int, seed: int) -> bool:
        """The cell is done: its summary is there, and its per-bar arrays or its fold's scores
        (`fold_scores_path`, all the trial's scoring needs of them). A state archive that left the
        per-bar files behind (a device's file size limit) keeps the summaries and the fold scores;
        a cell of a fold not yet scored is trained again."""
        return self.cell_loadable(key, fold, seed) or (
            _marker(self.cell_stem(key, fold, seed)).exists() and self.fold_scores_path(key, fold).exists()
        )

    def cell_loadable(self, key: str, fold: int, seed: int) -> bool:
        """The cell's summary and its per-bar arrays are both there (what scoring it needs)."""
        stem = self.cell_stem(key, fold, seed)
        return _marker(stem).exists() and self.cell_npz(stem).exists()

    def model_cell_markers(self) -> list[Path]:
        """The summary of every model cell trained (saved or not: `cell_saved`), in path order."""
        return sorted(self.cells_dir.glob(f"n*/fold*-seed*{CELL_SUFFIX}")) if self.cells_dir.is_dir() else []

    def saved_cell_keys(self) -> list[str]:
        """The trial key of every saved model cell (`cell_saved`), one entry a cell."""
        keys = []
        for p in self.model_cell_markers():
            m = re.fullmatch(r"fold(\d+)-seed(\d+)", p.name.removesuffix(CELL_SUFFIX))
            if m and self.cell_saved(p.parent.name, int(m[1]), int(m[2])):  # no match: not a cell's summary
                keys.append(p.parent.name)
        return keys

    @property
    def scores_dir(self) -> Path:
        return self.root / "scores"

    def fold_scores_path(self, key: str, fold: int) -> Path:
        """scores/<key>/fold<k>.npz: fold `fold` of trial `key` scored (tsflash.scoring.daily.write_fold_scores)."""
        return self.scores_dir / key / f"fold{fold}.npz"

    def checkpoint_dir(self, key: str, fold: int, seed: int) -> Path:
        return self.checkpoints_dir / key / f"fold{fold}-seed{seed}"

    @staticmethod
    def cell_npz(stem: Path) -> Path:
        """The per-bar arrays of the cell or baseline saved at `stem` (FoldResult.save)."""
        return stem.with_name(stem.name + ".npz")

    def tidy_checkpoints(self) -> None:
        """Remove the checkpoints of finished cells, then empty folders, then checkpoints/ if empty."""
        if not self.checkpoints_dir.is_dir():
            return
        for d in sorted(self.checkpoints_dir.glob("*/*")):
            if d.is_dir() and _marker(self.cells_dir / d.parent.name / d.name).exists():
                shutil.rmtree(d, ignore_errors=True)
        for d in sorted(self.checkpoints_dir.iterdir()):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        if not any(self.checkpoints_dir.iterdir()):
            self.checkpoints_dir.rmdir()

    def baseline_stem(self, fold: int, name: str) -> Path:
        return self.cells_dir / BASELINE_DIR / f"fold{fold}-{name}"

    def baseline_marker(self, fold: int) -> Path:
        return self.cells_dir / BASELINE_DIR / f"fold{fold}{CELL_SUFFIX}"

    def n_finished_cells(self) -> int:
        """Finished cells of any kind (model cells and per-fold baseline cells): those with a summary,
        also a model cell whose per-bar file a state archive left behind before its fold was scored
        (trained, so counted by the scaling benchmark's throughput, and trained again)."""
        return sum(1 for _ in self.cells_dir.rglob(f"*{CELL_SUFFIX}")) if self.cells_dir.is_dir() else 0

    def cell_summaries(self) -> tuple[list[dict], list[dict]]:
        """(model cell summaries, baseline summaries), in path order."""
        cells, baselines = [], []
        if self.cells_dir.is_dir():
            for p in sorted(self.cells_dir.rglob(f"*{CELL_SUFFIX}")):
                summary = read_json(p)
                if "baselines" in summary:
                    baselines.extend(summary["baselines"].values())
                else:
                    cells.append(summary)
        return cells, baselines

    def relative(self, path: Path) -> str:
        """A path inside the folder as stored in summaries and the ledger (relative, posix)."""
        return Path(path).relative_to(self.root).as_posix()

    # daily series
    def series_path(self, name: str) -> Path:
        """series/<name>.npz; name is a trial key or `baseline_series_name(...)`."""
        return self.series_dir / f"{name}.npz"

    def series_names(self) -> list[str]:
        return sorted(p.stem for p in self.series_dir.glob("*.npz")) if self.series_dir.is_dir() else []

    def write_series(self, name: str, days, net, gross) -> Path:
        """Daily series: days as datetime64[D] (stored as int64 days since 1970), net, gross."""
        import numpy as np

        path = self.series_path(name)
        with atomic.atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a handle: np.savez would append ".npz"
            np.savez(fh, days=np.asarray(days).astype("datetime64[D]").astype(np.int64), net=net, gross=gross)
        return path

    def read_series(self, name: str) -> dict:
        """{"days": datetime64[D] (D,), "net": (D,), "gross": (D,)}."""
        path = self.series_path(name)
        if not path.exists():
            raise UserError(f"daily series not found: {path}")
        with load_npz(path) as z:
            return {"days": z["days"].astype("datetime64[D]"), "net": z["net"], "gross": z["gross"]}

    # state
    def exists(self) -> bool:
        return self.run_json.exists()

    def read_run(self) -> dict:
        return read_run_json(self.run_json)

    def is_complete(self) -> bool:
        try:
            return self.read_run().get("status") == "complete"
        except (OSError, ValueError, UserError):
            return False

    def check_record_copy(self, dest: Path) -> None:
        """UserError unless `copy_record(dest)` can run: this is a run folder and `dest` is free."""
        if not self.exists():
            raise UserError(f"keep: {self.root} is not a tsflash run folder (no run.json)")
        if Path(dest).exists():
            raise UserError(f"keep: {dest} exists; a kept record is never overwritten (choose another destination)")

    def copy_record(self, dest: Path) -> dict:
        """Copy this run's record to `dest` (e.g. under reports/): everything but its per-bar files
        (`cells/**/*.npz`), checkpoints, uploaded artifacts, figures and HTML, which the summaries
        and re-reports do not read. A finished run leaves out its fold scores, daily series and loss
        tables too (its results, parquet tables and cell summaries hold what is published); an
        unfinished one keeps them, since a resume counts a cell done only with its fold's scores
        (`cell_saved`) and a fold's baselines only with their series (so no finished cell trains
        again). Written whole or not at all; `dest` is never overwritten. Returns what was kept."""
        dest = Path(dest)
        self.check_record_copy(dest)
        complete = self.is_complete()

        def ignore(folder: str, names: list[str]) -> set[str]:
            here = Path(folder).relative_to(self.root)
            return {n for n in names if left_out_of_record((here / n).parts, complete)}

        partial = dest.with_name(f".{dest.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.root, partial, ignore=ignore)
        record = {
            "complete": complete,
            "cells": len(self.saved_cell_keys()),
            "resumable_cells": None if complete else len(RunFolder(partial).saved_cell_keys()),
            "bytes": sum(f.stat().st_size for f in partial.rglob("*") if f.is_file()),
        }
        partial.rename(dest)
        return record

    def require_finished(self, what: str = "report") -> None:
        """UserError unless this is a finished `tsflash sweep` run folder (run.json complete)."""
        if not self.root.is_dir():
            raise UserError(f"{what}: run folder not found: {self.root}")
        if not self.run_json.exists():
            raise UserError(f"{what}: {self.root} is not a tsflash run folder (no run.json)")
        if not self.is_complete():
            raise UserError(
                f"{what}: the run in {self.root} is not finished (run.json status "
                f"{self.read_run().get('status')!r}); resume it with the same `tsflash sweep` command"
            )


def left_out_of_record(parts: tuple[str, ...], complete: bool) -> bool:
    """Whether `RunFolder.copy_record` leaves out the path `parts` (relative to the run folder): any
    checkpoints or uploaded artifacts, the per-bar cell files, what lies in RECORD_SKIP at the top,
    and of a finished run in RESUME_FILES too."""
    top = set(RECORD_SKIP) | (set(RESUME_FILES) if complete else set())
    return (
        any(p in ("checkpoints", "artifacts") for p in parts)
        or parts[0] in top
        or (len(parts) > 1 and parts[0] == "cells" and parts[-1].endswith(".npz"))
    )


def _marker(stem: Path) -> Path:
    return stem.with_name(stem.name + CELL_SUFFIX)


def find_unfinished_run(runs_root: Path, cfg_hash: str, run_key: str) -> Path | None:
    """Newest `runs_root/*-<cfg_hash>` whose run.json has `run_key` and is not complete."""
    root = Path(runs_root)
    if not root.is_dir():
        return None
    for d in sorted(root.glob(f"*-{cfg_hash}"), reverse=True):  # names start with the timestamp
        try:
            meta = read_json(d / "run.json")
        except (OSError, ValueError):
            continue
        if meta.get("run_key") == run_key and meta.get("status") != "complete":
            return d
    return None


def iter_run_folders(runs_root: Path) -> Iterator[RunFolder]:
    """Every run folder directly under `runs_root`, newest first."""
    root = Path(runs_root)
    if root.is_dir():
        for d in sorted(root.iterdir(), reverse=True):
            if (d / "run.json").exists():
                yield RunFolder(d)
