"""Progress bars for long client-side work (perf runs): on stderr, and only when it is a terminal,
so pipes, files and tests get the plain output and the summary lines alone."""

from __future__ import annotations

import sys
from typing import Any


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int, desc: str, unit: str = "rec") -> Any:
    """A tqdm bar of ``total`` steps on a terminal's stderr, else an object that ignores updates."""
    if not sys.stderr.isatty():
        return _Silent()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr, leave=False)
