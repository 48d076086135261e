"""Reading a partition directory while the broker changes it.

Retention and the cleaner rename ``.log`` files to ``.deleted`` (and ``.swap`` to ``.log``) at any
moment, so a file seen by a directory listing may be gone by the time it is stat'ed.
"""

from __future__ import annotations

from pathlib import Path


def live_segments(part_dir: Path) -> list[tuple[int, int]]:
    """(base offset, size) of the ``.log`` files in ``part_dir``, oldest first, as one consistent
    listing: a file renamed between the listing and its stat makes the listing start again."""
    while True:
        try:
            return sorted((int(p.stem), p.stat().st_size) for p in part_dir.glob("*.log"))
        except FileNotFoundError:
            continue
