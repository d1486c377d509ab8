"""Writing results files so that a reader never sees half of one: each file through a temporary file
beside it, synced, then renamed over the old one (``write_atomic``), and a command's several files all
or none (``write_files``: every temporary file written before the first rename). A write that fails
on the disk (full, no permission, read-only) is one line naming the file (``ResultsUnwritable``)."""

from __future__ import annotations

import errno
import functools
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO, Callable, TypeGuard

# A write failing with one of these is the disk's or the folder's, not the run's: named in one line.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)


class ResultsUnwritable(OSError, ValueError):
    """A results file could not be written: a full disk, no permission, a read-only filesystem. The
    message names the file and the cause. A ValueError too, so the command line reports it as one
    ``error:`` line rather than a bug; a sweep stops on it (every later write would fail alike)."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def is_disk_error(error: BaseException) -> TypeGuard[OSError]:
    return isinstance(error, OSError) and not isinstance(error, ResultsUnwritable) and error.errno in DISK_ERRORS


def unwritable(path: str | Path, error: OSError) -> ResultsUnwritable:
    """A disk error (``is_disk_error``) raised writing ``path``, as one line naming both."""
    number = error.errno if error.errno is not None else errno.EIO  # a disk error always has one
    name = errno.errorcode.get(number, str(number))
    return ResultsUnwritable(number, f"cannot write {path}: {os.strerror(number)} ({name}); nothing "
                                          f"half-written is left: free space or fix the permissions, then rerun "
                                          f"the same command to resume")


def write_atomic(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Fill ``path`` atomically: ``write(f)`` writes a temporary file (binary) in the same folder,
    which then replaces ``path``, so a reader (or a resumed sweep) sees the old file or the new one,
    never half of one, even if this process dies mid-write. Creates the parent folders. A disk error
    (DISK_ERRORS) raises ResultsUnwritable, with the temporary file removed."""
    _replace([(_staged(Path(path), write), Path(path))])


def write_files(files: Mapping[Path, str | bytes]) -> None:
    """Write each of ``files`` (path -> its text or bytes) as ``write_atomic`` does, and all of them
    or none: every temporary file is written before the first replaces its file, so a command whose
    last file fails (a full disk) leaves every earlier one as it was, not half of its outputs new."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            content = data.encode("utf-8") if isinstance(data, str) else data
            staged.append((_staged(Path(path), functools.partial(_write_bytes, content)), Path(path)))
    except BaseException:
        _remove([tmp for tmp, _ in staged])
        raise
    _replace(staged)


def _write_bytes(content: bytes, file: BinaryIO) -> None:
    file.write(content)


def _staged(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """``write(f)`` into a new temporary file beside ``path`` (its folders made), synced to disk; its
    path. A failure removes it (a disk error raised as ResultsUnwritable naming ``path``)."""
    # Same folder: os.replace is atomic only within one filesystem. A random name: concurrent writers
    # of one path never share a temporary file. Mode "x" creates it with the usual permissions.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as error:
        _remove([tmp])
        if is_disk_error(error):
            raise unwritable(path, error) from error
        raise
    return tmp


def _replace(staged: list[tuple[Path, Path]]) -> None:
    """Each staged temporary file renamed over its path; on a failure, those not renamed are removed."""
    for i, (tmp, path) in enumerate(staged):
        try:
            os.replace(tmp, path)
        except BaseException as error:
            _remove([t for t, _ in staged[i:]])
            if is_disk_error(error):
                raise unwritable(path, error) from error
            raise


def _remove(temporaries: list[Path]) -> None:
    for tmp in temporaries:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only filesystem refuses the unlink too: the first error is the one to report
            pass
