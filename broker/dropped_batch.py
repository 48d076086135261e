"""Test-only fault: an acknowledged batch that consumers never see, as if lost after its acknowledgement.

``KBROKERTEST_DROP_ACKED_BATCH=<topic>:<n>`` makes this broker, as leader, remember the n-th batch
it appends to ``<topic>`` (1-based, over all its partitions) and leave it out of every consumer
Fetch it answers from then on: the batch is appended, replicated and acknowledged as usual, and
followers still copy it, but a consumer reading that partition from this broker goes from the batch
before it to the batch after it. The fault campaign's checker must report it as a ``lost-write``
(tests/cluster/test_campaign_lost_write.py). Unset (always, outside that test) nothing here runs:
the handlers test ``ACTIVE`` first.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("broker.dropped_batch")

_topic, _, _n = os.environ.get("KBROKERTEST_DROP_ACKED_BATCH", "").rpartition(":")
ACTIVE = bool(_topic and _n.isdigit())
_target = int(_n) if ACTIVE else 0
_seen = 0
_hidden: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) -> (base offset, last offset)


def on_appended(topic: str, partition: int, base_offset: int, last_offset: int) -> None:
    """Produce: a batch of ``topic`` was appended (and will be acknowledged)."""
    global _seen
    if topic != _topic or _hidden:
        return
    _seen += 1
    if _seen == _target:
        _hidden[(topic, partition)] = (base_offset, last_offset)
        log.warning("KBROKERTEST_DROP_ACKED_BATCH: hiding %s-%d offsets %d-%d from consumers", topic, partition,
                    base_offset, last_offset)


def clip(topic: str, partition: int, fetch_offset: int, upper: int | None) -> tuple[int, int | None]:
    """A consumer fetch's start and upper bound, moved so that the hidden batch is not returned."""
    hidden = _hidden.get((topic, partition))
    if hidden is None:
        return fetch_offset, upper
    base, last = hidden
    if base <= fetch_offset <= last:
        return last + 1, upper
    if fetch_offset < base and (upper is None or upper > base):
        return fetch_offset, base
    return fetch_offset, upper
