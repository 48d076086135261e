"""storage.dir_lock: one holder per log dir, named in the refusal; a refusal changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from storage.dir_lock import DirLock, DirLockedError, lock_dirs


def test_second_lock_is_refused_with_the_holder_pid(tmp_path):
    held = DirLock.acquire(tmp_path)
    lock_file = tmp_path / ".lock"
    assert lock_file.read_text() == f"{os.getpid()}\n"
    st = lock_file.stat()
    with pytest.raises(DirLockedError) as e:
        DirLock.acquire(tmp_path)  # another open file description: flock refuses it, as another process
    assert e.value.holder_pid == os.getpid()
    assert str(e.value) == (f"Failed to acquire lock on file .lock in {tmp_path}: it is held by process "
                            f"{os.getpid()}. Another broker is using this log directory.")
    assert lock_file.stat().st_mtime_ns == st.st_mtime_ns and lock_file.read_text() == f"{os.getpid()}\n"
    held.release()
    assert not held.held
    DirLock.acquire(tmp_path).release()


def test_lock_is_released_when_the_holder_exits(tmp_path):
    code = f"from storage.dir_lock import DirLock; DirLock.acquire(__import__('pathlib').Path({str(tmp_path)!r}))"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())
    lk = DirLock.acquire(tmp_path)  # the exited process's stale .lock does not block
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    lk.release()


def test_lock_dirs_is_all_or_nothing(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    other = DirLock.acquire(b)
    with pytest.raises(DirLockedError):
        lock_dirs([a, b])
    DirLock.acquire(a).release()  # a was released again after b was refused
    other.release()
    locks = lock_dirs([a, b])
    assert all(lk.held for lk in locks)
    for lk in locks:
        lk.release()
