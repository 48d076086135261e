"""A wall clock a test can move for one process: libfaketime (Debian package ``faketime``).

``FakeClock(path).env()`` is the environment that preloads libfaketime into a process (a broker's
``env``) with ``FAKETIME_TIMESTAMP_FILE=path``; ``set("+600")`` / ``set("-600")`` / ``set("+0")``
rewrite the file, which the library reads again every second (``FAKETIME_CACHE_DURATION=1``): the
process's wall clock (time(), gettimeofday, CLOCK_REALTIME) jumps by that many seconds relative to
the real time. ``FAKETIME_DONT_FAKE_MONOTONIC=1``: CLOCK_MONOTONIC stays real (by default
libfaketime fakes it too). ``FAKETIME_DONT_RESET=1``: children see the same clock.
"""

from __future__ import annotations

import glob
import time
from pathlib import Path

FAKETIME_PACKAGE = "faketime"
REREAD_S = 1.0  # FAKETIME_CACHE_DURATION


def library() -> str | None:
    """libfaketime's multi-threaded preload library, or None when the package is missing."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


class FakeClock:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = "+0"
        self.path.write_text("+0\n")

    def env(self) -> dict[str, str]:
        lib = library()
        if lib is None:
            raise RuntimeError(f"libfaketime not installed (apt-get install {FAKETIME_PACKAGE})")
        return {"LD_PRELOAD": lib, "FAKETIME_TIMESTAMP_FILE": str(self.path), "FAKETIME_CACHE_DURATION": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_DONT_RESET": "1"}

    def set(self, offset: str) -> None:
        """``+N`` / ``-N`` seconds from the real time (``+0``: real time again)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(offset + "\n")
        tmp.replace(self.path)
        self.offset = offset

    def set_and_wait(self, offset: str) -> None:
        """set(), then long enough for the process to have read it (its cache period, twice)."""
        self.set(offset)
        time.sleep(2 * REREAD_S + 0.2)
