"""A small filesystem a test can fill: a tmpfs of a few MB mounted on a directory (root only).

A broker's ``log.dirs`` goes in ``<mount>/data``; ``fill()`` takes the space that is left with a
file ``<mount>/filler`` (fallocate, then writes until ENOSPC), so the broker's next write fails
with "No space left on device"; ``free()`` deletes the filler. tmpfs pages are memory, so sizes stay
small. ``unmount()`` (lazy, so a process still holding a file does not block it) ends it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path


def available_reason() -> str | None:
    return None if os.geteuid() == 0 else "mounting a tmpfs needs root"


class SmallDisk:
    def __init__(self, mount: Path, size_mb: int) -> None:
        self.mount = Path(mount)
        self.size_mb = size_mb
        self.mounted = False

    @property
    def data_dir(self) -> Path:
        return self.mount / "data"

    @property
    def filler(self) -> Path:
        return self.mount / "filler"

    def mount_fs(self) -> SmallDisk:
        self.mount.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "tmpfs", str(self.mount)],
                       check=True, capture_output=True, timeout=30)
        self.mounted = True
        self.data_dir.mkdir(exist_ok=True)
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take every free byte; returns how many were taken."""
        taken = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            free = self.free_bytes()
            if free > 0:
                with contextlib.suppress(OSError):
                    os.posix_fallocate(fd, os.fstat(fd).st_size, free)
                    taken += free
            chunk = b"\0" * 4096
            while True:  # what fallocate left (or all of it, where fallocate is refused)
                try:
                    taken += os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        finally:
            os.close(fd)
        return taken

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True, timeout=30)
            self.mounted = False

    def __enter__(self) -> SmallDisk:
        return self.mount_fs()

    def __exit__(self, *exc: object) -> None:
        self.unmount()
