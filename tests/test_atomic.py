import json
import os

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


def test_module_is_standard_library_only():
    import ast
    import sys

    tree = ast.parse(open(atomic.__file__).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}
