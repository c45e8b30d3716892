"""The store's record of its own files: one `manifest.json` per dataset folder.

Parquet readers do not verify page checksums by default, so a few damaged bytes in a year file can
change thousands of prices and still read. The manifest records, for every year file the store
wrote, the SHA-256 of its bytes and its row count; every read of the store checks the files it is
about to read against it first, and refuses a changed file in one line.

    <root>/btcusdt-1m/manifest.json
    {"format": 1, "files": {"btcusdt-1m-2024.parquet": {"sha256": "...", "rows": 527040, "bytes": 11686847}}}

A rewrite of a year file (an import that adds bars) records the new file as "pending" beside the
old entry before the rename and drops the old one after it, so a process killed between the two
leaves a manifest that accepts whichever file is there.

A store without a manifest (made before it existed, or a folder of year files copied in) is read
with one warning per folder: its bar rules are checked, its bytes cannot be.
`tsflash data verify --write` records one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tsflash import atomic
from tsflash.errors import UserError

log = logging.getLogger(__name__)

NAME = "manifest.json"
FORMAT = 1
RECORD_HINT = "record the files as they are with `tsflash data verify --write`, or re-import them"

_warned: set[Path] = set()  # folders already warned about, once per process


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file's bytes, read in 1 MiB blocks. Not memoised: file times tick
    coarsely (a few ms), so a file changed right after it was hashed could keep its key."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the file ({exc.strerror})") from None
    return h.hexdigest()


def parquet_rows(path: Path) -> int:
    """Rows of a Parquet file by its footer; UserError naming the file when it cannot be read."""
    try:
        return pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: a damaged name that is not UTF-8
        raise UserError(f"{path}: unreadable Parquet file ({' '.join(str(exc).split())})") from None


def file_entry(path: Path) -> dict:
    """{"sha256", "rows", "bytes"} of one year file as it is now."""
    return {"sha256": sha256_file(path), "rows": parquet_rows(path), "bytes": Path(path).stat().st_size}


def read(folder: Path) -> dict | None:
    """{file name: entry} of a dataset folder's manifest; None when it has none. A damaged
    manifest is a UserError: it no longer says what the files should be."""
    path = Path(folder) / NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the store manifest ({exc.strerror})") from None
    try:
        data = json.loads(raw.decode("utf-8"))  # a damaged byte may not even be UTF-8
        files = data["files"]
        if data.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError(f"format {data.get('format')!r}")
        for entry in files.values():
            _check_entry(entry)
            for pending in entry.get("pending", []):
                _check_entry(pending)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: damaged store manifest ({exc.__class__.__name__}: {exc}); {RECORD_HINT}") from None
    return files


def _check_entry(entry) -> None:
    if not (isinstance(entry["sha256"], str) and len(entry["sha256"]) == 64 and isinstance(entry["rows"], int)):
        raise ValueError(f"bad entry {entry!r}")


def _write(folder: Path, files: dict) -> None:
    atomic.write_json(Path(folder) / NAME, {"format": FORMAT, "files": dict(sorted(files.items()))})


def stage(folder: Path, name: str, entry: dict) -> dict | None:
    """Before a year file is replaced: accept `entry` for `name` beside what is recorded now.
    Returns the entry recorded before (None: none), for `unstage`."""
    files = read(folder) or {}
    old = files.get(name)
    if old is None:
        files[name] = {**entry, "pending": []}  # a new file: only the new bytes are right
    else:
        files[name] = {**{k: old[k] for k in ("sha256", "rows", "bytes")}, "pending": [entry]}
    _write(folder, files)
    return old


def unstage(folder: Path, name: str, old: dict | None) -> None:
    """The year file was not replaced after all (the write failed): record `old` again. Best effort:
    on a full disk this write fails too, and the pending entry, harmless, stays."""
    try:
        files = read(folder) or {}
        if old is None:
            files.pop(name, None)
        else:
            files[name] = old
        _write(folder, files)
    except (OSError, UserError):
        log.debug("could not take back the pending manifest entry of %s", name, exc_info=True)


def commit(folder: Path, name: str, entry: dict) -> None:
    """After a year file was replaced by `entry`'s bytes: record only those."""
    record(folder, {name: entry})


def record(folder: Path, entries: dict[str, dict]) -> None:
    """Set the entries of `entries` (file name -> entry), keeping the others."""
    files = read(folder) or {}
    files.update({name: {k: e[k] for k in ("sha256", "rows", "bytes")} for name, e in entries.items()})
    _write(folder, files)


def replace(folder: Path, entries: dict[str, dict]) -> None:
    """Record exactly `entries` (file name -> entry), dropping every other entry."""
    _write(folder, {name: {k: e[k] for k in ("sha256", "rows", "bytes")} for name, e in entries.items()})


def difference(entry: dict, path: Path) -> str | None:
    """What differs between the recorded `entry` (or one of its pending ones) and the file; None
    when it matches."""
    got = sha256_file(path)
    accepted = [entry, *entry.get("pending", [])]
    if any(got == e["sha256"] for e in accepted):
        return None
    try:
        rows = str(parquet_rows(path))
    except UserError:
        rows = "an unreadable file"
    what = f"sha256 expected {entry['sha256'][:16]}.., found {got[:16]}.."
    if rows != str(entry["rows"]):
        what += f"; rows expected {entry['rows']}, found {rows}"
    return what


def verify(folder: Path, paths: list[Path]) -> None:
    """Check `paths` (year files of one dataset folder) against the folder's manifest before they
    are read; UserError for the first file that differs. Files the manifest does not list (or a
    folder without a manifest) are read unverified, with one warning per folder."""
    folder = Path(folder)
    files = read(folder)
    unrecorded = []
    for path in paths:
        entry = None if files is None else files.get(path.name)
        if entry is None:
            unrecorded.append(path.name)
            continue
        if (what := difference(entry, path)) is not None:
            raise UserError(
                f"{path} differs from the store manifest ({what}): the file was changed or damaged after it was "
                f"imported; re-import the file to change it (delete it, then `tsflash data import` or "
                f"`tsflash data fetch`), or, if the change is yours, `tsflash data verify --write {folder.parent}`"
            )
    if unrecorded and folder not in _warned:
        _warned.add(folder)
        why = "has no manifest" if files is None else f"manifest does not list {', '.join(unrecorded)}"
        log.warning(
            "store folder %s %s: those year files' bytes are not verified (bar rules still are); %s",
            folder,
            why,
            RECORD_HINT.replace("verify --write", f"verify --write {folder.parent}"),
        )


def missing_recorded(folder: Path, names: set[str]) -> list[str]:
    """Names the manifest lists that are not among `names` (year files deleted after import)."""
    files = read(folder) or {}
    return sorted(set(files) - names)
