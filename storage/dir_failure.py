"""Log dir failures: Kafka's LogDirFailureChannel and LogManager.handleLogDirFailure.

A write into a log dir that fails (no space left on the device, an I/O error) may have left part
of what it was writing in a file. Kafka stops using such a dir at once: its partitions go offline
and the controller moves their leadership to other replicas; a broker whose every log dir has
failed halts ("Shutdown broker because all log dirs in ... have failed"), so nothing partial is
ever served, and the restart recovers the dir (a torn tail is truncated, indexes rebuilt).

The storage code reports each failed write here (``failed``) and then raises as before; the broker
installs the handler, which halts the process (broker/broker.py). Without a handler (storage tests,
``kbroker dump-log``) the error is only raised, and the segment append has already taken back what
it had half written (storage/segment.py).

Deviation: kbroker halts at the first failed log dir even when it has others (Kafka keeps serving
from the healthy ones); with a single log dir, the usual case, the two agree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

Handler = Callable[[Path, OSError], None]
F = TypeVar("F", bound=Callable[..., Any])

_handler: Handler | None = None


def set_handler(handler: Handler | None) -> None:
    global _handler
    _handler = handler


def failed(log_dir: Path, error: OSError) -> None:
    """A write into ``log_dir`` failed with ``error``: tell the handler (which may not return)."""
    if _handler is not None:
        _handler(log_dir, error)


def reports_failure(method: F) -> F:
    """Decorate a Log method that writes: an OSError from it is a failure of the log's dir."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            failed(self.dir.parent, e)
            raise

    return wrapper  # type: ignore[return-value]
