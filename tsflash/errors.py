"""One home for user-facing errors.

A `UserError` is a mistake by the person running tsflash (bad argument, bad file, missing data).
The CLI prints its message as one line and exits with status 2, without a traceback. Messages
name the rule, the user's key or flag, then the values: "train.lr must be > 0, got -1.0".
A file the system refuses (a full disk, no permission, a read-only folder) is the same kind of
error: `file_error` words it.
"""

from __future__ import annotations

import errno
import os
import sys


class UserError(Exception):
    """A mistake in the user's input; the message names the rule and the offending values."""


class UsageError(UserError):
    """A command-line error as argparse words it, already a whole line:
    "tsflash bench train: error: argument --steps: must be an integer >= 1, got 0"."""


# What the user can do about each file error the system gives; other errors stay tracebacks (bugs).
_FILE_HINTS = {
    errno.ENOSPC: "the disk is full: free some space and run the command again",
    errno.EDQUOT: "the disk quota is used up: free some space and run the command again",
    errno.EACCES: "check the permissions, or choose a path you can use",
    errno.EPERM: "check the permissions, or choose a path you can use",
    errno.EROFS: "the file system is read-only: choose a path on a writable one",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "a file was expected, the path is a folder",
    errno.ENOENT: "the path does not exist",
}


def file_error(exc: OSError) -> UserError | None:
    """The one-line UserError for an OSError the user can fix (full disk, permissions, read-only,
    a missing or wrong path), naming the path and what to do; None for any other error. Files are
    written to a temporary name and renamed (tsflash.atomic), so nothing half-written stays."""
    if exc.errno is None or (hint := _FILE_HINTS.get(exc.errno)) is None:
        return None
    where = (
        f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "") if exc.filename else "a file operation"
    )
    return UserError(f"{where}: {exc.strerror or errno.errorcode[exc.errno]} ({hint}; nothing half-written was kept)")


def reader_left() -> int:
    """After a BrokenPipeError on stdout (`tsflash ... | head`): stop quietly, as Unix tools do.
    stdout goes to /dev/null, since the interpreter's flush at exit would raise again; the exit
    status is 141 (128 + SIGPIPE), a shell's code for a writer whose pipe closed."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141
