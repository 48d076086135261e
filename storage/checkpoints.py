"""Kafka's small text checkpoint files and the clean-shutdown marker.

* ``recovery-point-offset-checkpoint`` / ``log-start-offset-checkpoint`` (one per log dir):
  a version line ``0``, a count line, then ``topic partition offset`` lines.
* ``leader-epoch-checkpoint`` (one per partition dir): ``0``, count, ``epoch startOffset`` lines.
* ``.kafka_cleanshutdown`` (one per log dir): JSON ``{"version":0,"brokerEpoch":N}``.

Every write is atomic like Kafka's CheckpointFile: write ``<name>.tmp``, fsync, rename over the
target, fsync the directory, so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import platform
import threading
from collections.abc import Callable
from pathlib import Path

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file is malformed (Kafka: 'Malformed line in checkpoint file')."""


def fsync_file(path: Path) -> None:
    """fsync a file by name. A log file is only renamed (``.deleted``) or deleted when it leaves
    the log, so a missing one belongs to a retired segment: nothing to keep."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename/create inside ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs(2) when it reports writeback errors (Linux 5.8+), else None. Older kernels
    answer 0 even when a page failed to reach the disk, which would make a clean shutdown claim
    data that is not there: those keep the per-file fsyncs."""
    if platform.system() != "Linux":
        return None
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < (5, 8):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    fn = getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _libc_syncfs()


class FilesystemSync:
    """One syncfs(2) of the filesystem holding ``path``, in place of an fsync per file.

    Open it before the writes it must cover: the kernel reports a writeback error to syncfs only
    if it happened after the descriptor was opened. ``sync`` raises OSError when the filesystem
    could not write everything back (or the descriptor is gone). ``available()`` is False where
    syncfs does not report errors; callers then fsync each file as before."""

    @staticmethod
    def available() -> bool:
        return _syncfs is not None

    def __init__(self, path: Path) -> None:
        if _syncfs is None:
            raise OSError("syncfs with error reporting is not available here")
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)

    def sync(self) -> None:
        assert _syncfs is not None
        if _syncfs(self.fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {self.path}: {os.strerror(err)}")

    def close(self) -> None:
        os.close(self.fd)


def atomic_write_bytes(path: Path, data: bytes, *, sync: bool = True,
                       before_rename: Callable[[], None] | None = None) -> None:
    """Write ``path`` so that a crash leaves the old or the new contents, never a torn file:
    ``<name>.tmp``, fsync, rename over the target, fsync the directory.

    The temporary name is fixed, so callers must never run two writes of one ``path`` at once
    (a second one would truncate the first's ``.tmp`` and one rename would find it gone).

    ``sync=False`` skips both fsyncs (no blocking on the loop); the caller then fsyncs the
    file and its directory later, and until that a crash may leave the file torn or empty, so
    only files that are checked on read and may be dropped (producer snapshots) use it.

    ``before_rename`` runs once the temporary file is complete, just before the rename (a
    fault-injection point for tests)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if before_rename is not None:
        before_rename()
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, *, sync: bool = True) -> None:
    atomic_write_bytes(path, text.encode(), sync=sync)


def _read_lines(path: Path, fields: int) -> list[list[str]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError as e:
        raise CheckpointError(f"{path}: malformed header: {e}") from e
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: unrecognised version {version}")
    body = [ln for ln in lines[2:] if ln.strip()]
    if len(body) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(body)}")
    out = []
    for ln in body:
        parts = ln.split()
        if len(parts) != fields:
            raise CheckpointError(f"{path}: malformed line {ln!r}")
        out.append(parts)
    return out


# One lock per offset checkpoint file, as Kafka's CheckpointFile holds one: a periodic write may still
# run on an executor thread when shutdown writes the file again (cancelling the task that awaits it
# does not stop the thread), and two writers of one fixed ``.tmp`` name make a rename fail, which
# fails the log dir. A handful of such files per log dir, so the map stays small.
_WRITE_LOCKS: dict[Path, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: Path) -> threading.Lock:
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(path, threading.Lock())


class OffsetCheckpointFile:
    """``topic partition offset`` checkpoints (recovery points, log start offsets, high watermarks).
    Writes of one file from several threads follow one another."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        with _write_lock(self.path):
            atomic_write_text(self.path, "\n".join(lines) + "\n")

    def read(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for topic, part, off in _read_lines(self.path, 3):
            try:
                out[(topic, int(part))] = int(off)
            except ValueError as e:
                raise CheckpointError(f"{self.path}: malformed line {topic} {part} {off}") from e
        return out


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` lines of one partition's leader epoch cache."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: list[tuple[int, int]], *, sync: bool = True) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
        atomic_write_text(self.path, "\n".join(lines) + "\n", sync=sync)

    def read(self) -> list[tuple[int, int]]:
        try:
            return [(int(e), int(o)) for e, o in _read_lines(self.path, 2)]
        except ValueError as e:
            raise CheckpointError(f"{self.path}: malformed entry") from e


def write_clean_shutdown(log_dir: Path, broker_epoch: int = -1) -> None:
    """Kafka 3.7+ writes the broker epoch as JSON (KIP-966); older brokers left it empty."""
    path = log_dir / CLEAN_SHUTDOWN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(log_dir)


def has_clean_shutdown(log_dir: Path) -> bool:
    return (log_dir / CLEAN_SHUTDOWN_FILE).exists()


def read_clean_shutdown_epoch(log_dir: Path) -> int | None:
    try:
        content = json.loads((log_dir / CLEAN_SHUTDOWN_FILE).read_text())
        return int(content["brokerEpoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def delete_clean_shutdown(log_dir: Path) -> None:
    try:
        (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    except FileNotFoundError:
        return
    fsync_dir(log_dir)
