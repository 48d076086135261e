"""What a follower does with its leader's fetch answers: append the batches exactly as the leader
wrote them (through the partition's one append path, origin REPLICATION, which replays them into
producer state and the ``.txnindex`` so idempotence and transactions survive a failover), truncate
on divergence, and follow the leader's high watermark and log start offset.

Kafka's followers check each batch's CRC and skip LogValidator and offset assignment; so does this.
"""

from __future__ import annotations

import logging
import time

from broker import log_flusher
from broker.partition import Partition
from protocol.errors import ErrorCode, KafkaError
from storage import batch as B
from storage.partition_log import AppendOrigin

log = logging.getLogger("broker.replication.follower")


async def append_as_follower(part: Partition, records: bytes | bytearray | memoryview) -> None:
    """``records``: a fetch answer's record set (a view into the response frame: kept as is, the
    batches are written from it without a copy)."""
    buf = memoryview(records)
    try:
        headers = list(B.iter_headers(buf, check=True))
    except B.InvalidBatchError as e:
        # A fetch answer cut inside a batch, or damaged on the way: keep the whole batches.
        headers = []
        for h in B.iter_headers(buf, check=False):
            if h.position + h.size > len(buf):
                break
            headers.append(h)
        if not headers:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{part.topic}-{part.index}: {e}") from None
    lg = part.log
    # A fetch answer starts at the batch holding the fetch offset: batches this replica has
    # already are skipped. One that straddles the log end means the two logs cut batches
    # differently there; the leader's log wins (the tail from that batch on is dropped).
    headers = [h for h in headers if h.last_offset >= lg.log_end_offset]
    if not headers:
        return
    if headers[0].base_offset < lg.log_end_offset:
        log.warning("%s-%d: fetched batch %d-%d straddles the log end %d; truncating to %d", part.topic,
                    part.index, headers[0].base_offset, headers[0].last_offset, lg.log_end_offset,
                    headers[0].base_offset)
        truncate(part, headers[0].base_offset)
        if lg.log_end_offset != headers[0].base_offset:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{part.topic}-{part.index}: cannot continue the log at "
                                                        f"{headers[0].base_offset} (log end {lg.log_end_offset})")
    info = part.plog.append(buf, headers, AppendOrigin.REPLICATION, now_ms=int(time.time() * 1000))
    part.wake_waiters()
    if info.flush_due:
        await log_flusher.flush(part)


def truncate(part: Partition, offset: int, *, fully: bool = False) -> None:
    if fully:
        part.log.truncate_fully_and_start_at(offset)
        part.hw = offset
    else:
        part.log.truncate_to(offset)
    # What was committed can only be what the log still holds (a checkpointed or fetched
    # high watermark from before a divergence must not point past it).
    part.hw = min(part.hw, part.log.log_end_offset)
    part.wake_waiters()


def update_high_watermark(part: Partition, leader_hw: int, leader_log_start: int) -> None:
    """HW = min(leader's, own log end offset); the log start follows the leader's (DeleteRecords,
    retention) as Kafka's maybeIncrementLogStartOffset."""
    lg = part.log
    new = min(leader_hw, lg.log_end_offset)
    if new > part.hw:
        part.hw = new
        part.wake_waiters()
    if leader_log_start > lg.log_start_offset:
        lg.delete_records_before(min(leader_log_start, part.high_watermark, lg.log_end_offset))
