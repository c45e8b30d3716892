"""`tsflash data verify`: check every year file of a store on demand, and record its manifest.

Each file is checked three ways: its bytes against the manifest (tsflash.data._manifest), a full
read of every column, and the store's rules (sorted unique timestamps inside its year, the bar
rules of `store.check_bars`, the one-bar move across year files too). Reads check only the first
of these before work and the rules on the bars they read; this reads everything.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tsflash.data import _manifest as manifest
from tsflash.data import store
from tsflash.errors import UserError

log = logging.getLogger(__name__)

FAILED = ("changed", "unreadable", "bad bars", "missing", "bad manifest")


@dataclass
class FileCheck:
    """The verdict on one year file: status is "ok", "unrecorded" (no checksum to compare, bars
    fine), or one of FAILED; detail says what differs; seconds is the time the checks took."""

    path: Path
    status: str
    detail: str = ""
    rows: int | None = None
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status in FAILED


def dataset_folders(path: Path | str) -> list[tuple[Path, str, str]]:
    """(root, SYMBOL, interval) of the datasets at `path`: a store root, or one dataset folder."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"verify: store folder not found: {path}")
    sym, sep, interval = path.name.partition("-")
    if (
        sep
        and interval in store.INTERVAL_US
        and store.SYMBOL_RE.match(sym)
        and store.year_files(path.parent, sym, interval)
    ):
        return [(path.parent, sym.upper(), interval)]
    found = [(path, s, i) for s, i in store.list_datasets(path)]
    if not found:
        raise UserError(
            f"verify: {path} holds no store year files (expected <symbol>-<interval>/<symbol>-<interval>-YYYY.parquet)"
        )
    return found


def check_dataset(root: Path, symbol: str, interval: str) -> tuple[list[FileCheck], dict[str, dict]]:
    """The checks of every year file of one dataset, and the manifest entries of the files as they
    are now (what `--write` records)."""
    folder = store.dataset_dir(root, symbol, interval)
    files = store.year_files(root, symbol, interval)
    checks, entries = [], {}
    try:
        recorded = manifest.read(folder)
    except UserError as exc:
        checks.append(FileCheck(folder / manifest.NAME, "bad manifest", str(exc)))
        recorded = None
    prev_close = None
    for year, path in files.items():
        t0 = time.perf_counter()
        check, bars = _check_file(path, year, symbol, interval, (recorded or {}).get(path.name), prev_close)
        if bars is not None:
            entries[path.name] = manifest.file_entry(path)
            prev_close = float(bars.close[-1]) if len(bars) else prev_close
        check.seconds = time.perf_counter() - t0
        checks.append(check)
    for name in sorted(set(recorded or {}) - {p.name for p in files.values()}):
        checks.append(FileCheck(folder / name, "missing", "listed in the manifest, but the file is gone"))
    return checks, entries


def _check_file(path, year, symbol, interval, entry, prev_close) -> tuple[FileCheck, store.Bars | None]:
    what = manifest.difference(entry, path) if entry is not None else None
    try:
        table = store._conform(pq.read_table(path, **store.READ_OPTIONS))  # every page of every column decoded
    except (pa.ArrowException, OSError, ValueError) as exc:
        return FileCheck(path, "unreadable", str(store.unreadable(path, exc))), None
    except UserError as exc:
        return FileCheck(path, "unreadable", f"{path}: {exc}"), None
    bars = store.Bars.from_table(table, symbol, interval)
    try:
        _check_times(bars, year, path)
        store.check_bars(bars, lambda i: str(path), prev_close)
    except UserError as exc:
        return FileCheck(path, "bad bars", str(exc), len(bars)), bars
    if what is not None:
        return FileCheck(path, "changed", f"differs from the manifest: {what}", len(bars)), bars
    return FileCheck(path, "ok" if entry is not None else "unrecorded", "", len(bars)), bars


def _check_times(bars: store.Bars, year: int, path: Path) -> None:
    t = bars.open_time
    if len(t) and not (store.year_start_us(year) <= t[0] and t[-1] < store.year_start_us(year + 1)):
        raise UserError(f"{path}: bars must lie in {year}, got {store.iso(t[0])} .. {store.iso(t[-1])}")
    if len(t) > 1 and not (np.diff(t) > 0).all():
        i = int(np.argmin(np.diff(t) > 0))
        raise UserError(
            f"{path}: open_time must be strictly increasing, got {store.iso(t[i])} then {store.iso(t[i + 1])}"
        )
    off = np.flatnonzero(t % bars.interval_us)
    if len(off):
        raise UserError(f"{path}: open_time must be on the {bars.interval} grid, got {store.iso(t[off[0]])}")


def verify_store(path: Path | str, write: bool = False) -> list[FileCheck]:
    """Check every year file under `path` (a store root or one dataset folder). With write=True and
    every file readable with sound bars, record the manifest of each dataset from its files as
    they are (replacing changed entries, dropping missing ones)."""
    checks = []
    for root, symbol, interval in dataset_folders(path):
        found, entries = check_dataset(root, symbol, interval)
        checks += found
        broken = [c for c in found if c.status in ("unreadable", "bad bars")]
        if write and not broken:
            folder = store.dataset_dir(root, symbol, interval)
            manifest.replace(folder, entries)
            log.info("recorded %d year files in %s", len(entries), folder / manifest.NAME)
            for c in found:
                if c.status in ("changed", "unrecorded", "missing", "bad manifest"):
                    c.detail = (
                        f"recorded as it is now ({c.detail or c.status})"
                        if c.status != "missing"
                        else "dropped from the manifest"
                    )
                    c.status = "recorded"
    return checks
