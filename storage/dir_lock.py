"""Exclusive lock on a log dir, held for the life of the broker process.

Like Kafka's LogManager (a ``FileLock`` on ``<log.dir>/.lock``), each log dir is locked with
``flock(LOCK_EX | LOCK_NB)`` before anything in it is read or written, so a second broker on the
same dir stops at once instead of "recovering" the live broker's partitions. Deviation from Kafka:
the holder writes its pid into ``.lock`` once it holds the lock, and the refusal names it.

A refused attempt changes nothing in the dir: ``.lock`` is opened without truncation and only
written by the process that holds the lock. The OS releases the lock when the process exits,
however it exits (kill -9 included), so a stale ``.lock`` file never blocks a restart.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DirLockedError(OSError):
    """Another process holds the lock on a log dir (an OSError: the dir cannot be used)."""

    def __init__(self, log_dir: Path, holder_pid: int | None) -> None:
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(errno.EWOULDBLOCK,
                         f"Failed to acquire lock on file {LOCK_FILE} in {log_dir}: it is held by {holder}. "
                         "Another broker is using this log directory.")
        self.log_dir = log_dir
        self.holder_pid = holder_pid

    def __str__(self) -> str:
        return str(self.strerror)


class DirLock:
    """The lock on one log dir; ``release`` (or process exit) gives it up."""

    def __init__(self, log_dir: Path, fd: int) -> None:
        self.log_dir = log_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, log_dir: Path) -> DirLock:
        """Lock ``log_dir`` (which must exist) or raise DirLockedError naming the holder's pid."""
        path = log_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DirLockedError(log_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            # Ours now: record who holds it, for the message a second broker prints.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(log_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the flock


def lock_dirs(log_dirs: list[Path]) -> list[DirLock]:
    """Lock every dir, or none: on a refusal the locks taken so far are released again."""
    locks: list[DirLock] = []
    try:
        for d in log_dirs:
            locks.append(DirLock.acquire(d))
    except BaseException:
        for lk in locks:
            lk.release()
        raise
    return locks


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
