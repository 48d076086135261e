"""A page-cache ballast: benchmark a broker on a machine whose memory is in use, as a host that has
been up for a while is, not on memory the VM has never touched.

This machine is a VM whose host backs guest memory lazily and takes freed memory back within
seconds (virtio-balloon free page reporting: /sys/module/page_reporting). The first write into a
page the guest does not hold costs the writer ~2.5 CPU-ms per MB (the host faults the page in; it
shows as time in the kernel's page-cache copy), against ~0.16 for a page it reuses
(``replication_floor.py`` measures both). A broker host that has run a while has its memory full of
page cache, so new log data takes pages reclaimed from old cache; a benchmark started with 14 GB
free instead pays the first touch for every byte it writes, and pays it per replica: RF=3 writes
each byte three times, so a cold VM inflates the cluster's CPU per MB against one node.

:class:`Ballast` fills memory with the page cache of one file in a scratch directory until only
``keep_free_mb`` is free (``top_up()`` before each measured phase writes back what the last phase
freed), and deletes the file at ``close()``. Page cache is reclaimable, so nothing is taken from a
process that needs memory; the file is written to disk (fdatasync'ed, so its write-back is not
part of the next measurement), and it is never larger than what the file system can spare. Where
the kernel hands no freed memory back (no /sys/module/page_reporting: bare metal, most VMs), memory
once touched stays cheap and the ballast writes nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

CHUNK = 1 << 20
# Left free on the file system after the ballast (the benchmark's own logs need room too).
DISK_RESERVE = 8 << 30
REPORTING = Path("/sys/module/page_reporting/parameters/reported_kib")


def mem_free_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemFree:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemFree in /proc/meminfo")


def reported_mb() -> int | None:
    """Memory the guest has handed back to the host since boot (None: no free page reporting)."""
    try:
        return int(REPORTING.read_text()) // 1024
    except (OSError, ValueError):
        return None


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def exit_cleanly_on_sigterm() -> None:
    """Make SIGTERM (what `timeout` sends) raise SystemExit in the main thread, so that the `with`
    blocks and `finally` clauses of a benchmark run: its ballast file (tens of GB: it grows with each
    round's top-up) and its brokers' log dirs are removed. Python's default for SIGTERM ends the
    process at once, and two runs stopped that way left 61 GB in /tmp, which then failed a test on
    the file system's room. A handler the program set itself is kept."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


class Ballast:
    def __init__(self, directory: str | os.PathLike[str], keep_free_mb: int = 512,
                 only_if_reporting: bool = True) -> None:
        exit_cleanly_on_sigterm()
        self.path = Path(directory) / "page-cache-ballast"
        self.keep_free_mb = keep_free_mb
        # Fill only where freed memory goes back to the host (see the module docstring).
        self.active = reported_mb() is not None or not only_if_reporting
        self.size = 0
        self._zeros = bytes(CHUNK)

    def top_up(self, limit_s: float = 300.0, passes: int = 3) -> dict[str, float]:
        """Write to the ballast until MemFree <= keep_free_mb, bounded by the file system's room,
        ``limit_s`` and ``passes`` (the kernel may reclaim other cache as the ballast grows, so one
        pass can fall short: each pass writes what is still free above the mark, and the passes end
        when one no longer lowers MemFree by a tenth of what it wrote); what was done."""
        free0 = mem_free_mb()
        t0 = time.monotonic()
        written = 0
        for _ in range(passes if self.active else 0):
            free = mem_free_mb()
            st = os.statvfs(self.path.parent)
            room = max(st.f_bavail * st.f_frsize - DISK_RESERVE, 0) // CHUNK
            n = min(max(free - self.keep_free_mb, 0), room)
            if n < 64:
                break
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                k = 0
                while k < n and time.monotonic() - t0 < limit_s:
                    os.write(fd, self._zeros)
                    k += 1
                os.fdatasync(fd)
            finally:
                os.close(fd)
            written += k
            if free - mem_free_mb() < k // 10 or time.monotonic() - t0 >= limit_s:
                break
        self.size += written * CHUNK
        return {"free_before_mb": free0, "written_mb": written, "seconds": round(time.monotonic() - t0, 2),
                "free_after_mb": mem_free_mb(), "ballast_mb": self.size // CHUNK}

    def close(self) -> None:
        self.path.unlink(missing_ok=True)
        self.size = 0

    def __enter__(self) -> Ballast:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
