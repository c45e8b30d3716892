"""`file_error`: which system errors are the user's to fix (one line), and which stay tracebacks."""

from __future__ import annotations

import errno

import pytest

from tsflash.errors import UserError, file_error


@pytest.mark.parametrize("code, words", [
    (errno.ENOSPC, r"No space left on device \(the disk is full: free some space and run the command again; "
                   r"nothing half-written was kept\)"),
    (errno.EACCES, r"Permission denied \(check the permissions, or choose a path you can use;"),
    (errno.EROFS, r"Read-only file system \(the file system is read-only: choose a path on a writable one;"),
])  # fmt: skip
def test_a_file_error_names_the_path_and_what_to_do(code, words):
    import os

    error = file_error(OSError(code, os.strerror(code), "/data/x.parquet"))
    assert isinstance(error, UserError)
    assert str(error).startswith("/data/x.parquet: ")
    with pytest.raises(UserError, match=words):
        raise error


def test_other_errors_stay_tracebacks():
    assert file_error(OSError(errno.EIO, "Input/output error", "/dev/sda")) is None
    assert file_error(OSError("no errno")) is None
