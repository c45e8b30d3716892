"""Atomic, durable file writes, and the project's one JSON writer.

Why: a process killed mid-write (Ctrl-C, OOM, a preempted job) must never leave a half-written
file under the real name, where a later run would read it as complete (a resumed sweep trusts
its markers and checkpoints; the data cache trusts its parquet files). The bytes go to
`<name>.tmp-<pid>` in the same folder and only a finished file is renamed over `path`;
rename is atomic on POSIX within one filesystem, which a sibling in the same folder guarantees.
Readers therefore see either the old file or the new one, never a mixture. On any exception
the temporary is removed and an existing target is left untouched.

Power loss: a rename can reach the disk before the data it points to, so the temporary is
fsync'ed before `os.replace` and the folder after it (the rename itself is folder metadata).

JSON, one writer (`write_json`) and one NaN policy. Files tsflash reads back itself (the run
folder's state: run.json, cell summaries, the ledger, FoldResult metadata) keep a non-finite
float as Python's `NaN` / `Infinity` token, which `json.loads` reads back as the same float.
Files published for other readers (results.json, questions.json, confirm.json) pass
`strict=True`: non-finite floats become null (`json_safe`), plain RFC 8259 JSON that any parser
accepts. Both forms are in published run folders (reports/), which must not change a byte.

Standard library only (no torch/numpy/pyarrow at module level): light modules such as store,
selection and report import it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, keep_suffix: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; on success fsync it, os.replace it over
    `path` and fsync the folder.

    Creates `path`'s parent folders. The temporary is `<name>.tmp-<pid>`, or with
    `keep_suffix=True` `<stem>.tmp-<pid><suffix>` for writers that look at the suffix
    (matplotlib's savefig infers the format from it). If the block raises, the temporary is
    removed and `path` is not touched.

        with atomic_path(out) as tmp:
            torch.save(obj, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if keep_suffix:
        tmp = path.with_name(f"{path.stem}.tmp-{os.getpid()}{path.suffix}")
    else:
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        _fsync(tmp, os.O_RDWR)  # the writer has closed it; its bytes may still be in the page cache
        os.replace(tmp, path)
        _fsync_folder(path.parent)
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        # a write(2) that fails (a full disk) names no file: name the one being written
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # only still there when the block or the replace failed


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX). Where os.open cannot open a folder (Windows has
    no O_DIRECTORY) this is skipped: there the rename is as durable as the filesystem makes it."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        _fsync(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a filesystem that cannot sync a folder (fsync(2))
            raise


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Atomically write `data` to `path`; returns `path` as a Path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Atomically write `text` to `path`; returns `path` as a Path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return path


def json_default(o):
    """The project's JSON conventions for values json cannot encode: numpy scalars and arrays
    (duck-typed, so this module needs no numpy) and paths."""
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if hasattr(o, "tolist"):  # numpy arrays and scalars (np.generic.tolist returns the Python value)
        return o.tolist()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def json_safe(o):
    """`o` as plain values for a strict reader: non-finite floats -> None, numpy scalars and
    arrays -> Python values (duck-typed), tuples -> lists, dict keys -> str. Also the values of the
    report's Parquet tables, so that they match its results.json."""
    if isinstance(o, dict):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    if hasattr(o, "tolist"):  # numpy, before the float test: np.float64 is a float
        return json_safe(o.tolist())
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    return o


def write_json(path: str | os.PathLike, obj, *, strict: bool = False, end: str = "", **json_kwargs) -> Path:
    """Atomically write `json.dumps(obj) + end` to `path`.

    Defaults: indent=1, sorted keys, `json_default` for numpy values and paths; `json_kwargs`
    override them (the benchmarks' files: `BENCH_JSON`). NaN policy (module doc): non-finite floats
    are written as `NaN` / `Infinity`, or with `strict=True` as null, for files published to other
    readers.
    """
    kwargs: dict[str, Any] = {"indent": 1, "sort_keys": True, "default": json_default} | json_kwargs
    if strict:
        obj, kwargs["allow_nan"] = json_safe(obj), False
    return write_text(path, json.dumps(obj, **kwargs) + end)


# The layout of the benchmarks' JSON files (reports/bench/**/*.json): keys in the order measured,
# two-space indent, a final newline, anything unknown as its str().
BENCH_JSON: dict[str, Any] = {"indent": 2, "sort_keys": False, "default": str, "end": "\n"}
