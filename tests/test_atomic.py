import errno
import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from tsflash import atomic


def _siblings(folder):
    return sorted(p.name for p in folder.iterdir())


def test_success_writes_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.bin"
    with atomic.atomic_path(path) as tmp:
        assert tmp.parent == path.parent
        assert tmp.name == f"out.bin.tmp-{os.getpid()}"
        assert not path.exists()  # nothing visible under the real name until the block ends
        tmp.write_bytes(b"hello")
    assert path.read_bytes() == b"hello"
    assert _siblings(tmp_path) == ["out.bin"]


def test_keep_suffix(tmp_path):
    path = tmp_path / "plot.png"
    with atomic.atomic_path(path, keep_suffix=True) as tmp:
        assert tmp.name == f"plot.tmp-{os.getpid()}.png"
        tmp.write_bytes(b"png")
    assert path.read_bytes() == b"png"
    assert _siblings(tmp_path) == ["plot.png"]


def test_exception_leaves_no_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic.atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert _siblings(tmp_path) == []


def test_exception_leaves_existing_target_untouched(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic.atomic_path(path) as tmp:
            tmp.write_text("new, half written")
            raise KeyboardInterrupt
    assert path.read_text() == "old"
    assert _siblings(tmp_path) == ["out.txt"]


def test_failed_replace_removes_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    path.write_text("old")

    def killed(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert _siblings(tmp_path) == ["out.txt"]


def test_exception_before_temporary_exists(tmp_path):
    with pytest.raises(ValueError):
        with atomic.atomic_path(tmp_path / "x"):
            raise ValueError
    assert _siblings(tmp_path) == []


def test_parent_folders_are_created(tmp_path):
    path = tmp_path / "a" / "b" / "c.txt"
    atomic.write_text(path, "x")
    assert path.read_text() == "x"
    assert _siblings(path.parent) == ["c.txt"]


def test_overwrites_existing_target(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    atomic.write_text(path, "new")
    assert path.read_text() == "new"


def test_helpers(tmp_path):
    assert atomic.write_bytes(tmp_path / "b", b"\x00\x01") == tmp_path / "b"
    assert (tmp_path / "b").read_bytes() == b"\x00\x01"
    assert atomic.write_text(str(tmp_path / "t"), "é\n") == tmp_path / "t"
    assert (tmp_path / "t").read_bytes() == "é\n".encode()
    obj = {"b": 1, "a": [1.5, None]}
    atomic.write_json(tmp_path / "j.json", obj, indent=1, sort_keys=True)
    assert (tmp_path / "j.json").read_text() == json.dumps(obj, indent=1, sort_keys=True)
    assert json.loads((tmp_path / "j.json").read_text()) == obj
    assert _siblings(tmp_path) == ["b", "j.json", "t"]


def _record_syncs(monkeypatch) -> list[tuple[str, Path]]:
    """Record os.fsync (by the path its descriptor was opened with) and os.replace, in order."""
    events, opened = [], {}
    real_open, real_fsync, real_replace = os.open, os.fsync, os.replace

    def recording_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        opened[fd] = Path(path)
        return fd

    def recording_fsync(fd):
        events.append(("fsync", opened[fd]))
        real_fsync(fd)

    def recording_replace(src, dst):
        events.append(("replace", Path(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    return events


def test_fsync_of_the_file_before_the_replace_and_of_the_folder_after(tmp_path, monkeypatch):
    """A power loss after the write leaves the old file or the whole new one, never an empty one."""
    events = _record_syncs(monkeypatch)
    atomic.write_bytes(tmp_path / "out.bin", b"data")
    tmp = tmp_path / f"out.bin.tmp-{os.getpid()}"
    assert events == [("fsync", tmp), ("replace", tmp), ("fsync", tmp_path)]
    assert (tmp_path / "out.bin").read_bytes() == b"data"


def test_no_folder_fsync_without_o_directory(tmp_path, monkeypatch):
    events = _record_syncs(monkeypatch)
    monkeypatch.delattr(os, "O_DIRECTORY")  # as on Windows
    atomic.write_text(tmp_path / "out.txt", "x")
    tmp = tmp_path / f"out.txt.tmp-{os.getpid()}"
    assert events == [("fsync", tmp), ("replace", tmp)]


def test_a_folder_that_cannot_be_synced_is_not_an_error(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # a filesystem that cannot sync a folder
            raise OSError(errno.EINVAL, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic.write_text(tmp_path / "out.txt", "x")
    assert (tmp_path / "out.txt").read_text() == "x"


def test_nan_policy(tmp_path):
    """NaN tokens in files tsflash reads back; null with strict=True (files for other readers)."""
    obj = {"a": math.nan, "b": [math.inf, 1.5], "c": np.float64(-math.inf)}
    atomic.write_json(tmp_path / "state.json", obj)
    assert (tmp_path / "state.json").read_text() == json.dumps(obj, indent=1, sort_keys=True)
    back = json.loads((tmp_path / "state.json").read_text())
    assert math.isnan(back["a"]) and back["b"] == [math.inf, 1.5] and back["c"] == -math.inf
    atomic.write_json(tmp_path / "results.json", obj, strict=True)
    strict = (tmp_path / "results.json").read_text()
    assert json.loads(strict) == {"a": None, "b": [None, 1.5], "c": None}
    assert "NaN" not in strict and "Infinity" not in strict


def test_json_safe():
    got = atomic.json_safe({1: np.float32("nan"), "a": (np.int64(3), np.bool_(True), None, "s"),
                            "b": np.array([1.0, np.inf]), "p": {"q": np.float64(0.25)}})
    assert got == {"1": None, "a": [3, True, None, "s"], "b": [1.0, None], "p": {"q": 0.25}}
    assert type(got["a"][0]) is int and type(got["a"][1]) is bool and type(got["p"]["q"]) is float


def test_module_is_standard_library_only():
    import ast
    import sys

    tree = ast.parse(open(atomic.__file__).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}
