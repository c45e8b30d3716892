"""Atomic file writes: write a temporary sibling, then os.replace it over the real name.

Why: a process killed mid-write (Ctrl-C, OOM, a preempted job) must never leave a half-written
file under the real name, where a later run would read it as complete (a resumed sweep trusts
its markers and checkpoints; the data cache trusts its parquet files). The bytes go to
`<name>.tmp-<pid>` in the same folder and only a finished file is renamed over `path`;
rename is atomic on POSIX within one filesystem, which a sibling in the same folder guarantees.
Readers therefore see either the old file or the new one, never a mixture. On any exception
the temporary is removed and an existing target is left untouched.

Standard library only (no torch/numpy/pyarrow at module level): light modules such as store,
selection and report import it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, keep_suffix: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; on success os.replace it over `path`.

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
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # only still there when the block or the replace failed


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


def write_json(path: str | os.PathLike, obj, **json_kwargs) -> Path:
    """Atomically write `json.dumps(obj)` (no trailing newline) to `path`.

    Defaults: indent=1, sorted keys, `json_default` for numpy values and paths; `json_kwargs`
    override them.
    """
    kwargs = {"indent": 1, "sort_keys": True, "default": json_default} | json_kwargs
    return write_text(path, json.dumps(obj, **kwargs))
