"""The leader's high watermark and the requests waiting on it (Kafka's Partition.maybeIncrementLeaderHW,
checkEnoughReplicasReachOffset and DelayedProduce).

HW = the minimum log end offset over the (maximal) ISR (broker.replication.leader), never while this
broker is fenced (another leader may be elected already) and never backwards. acks=all produces,
coordinator writes and markers wait until it covers their last offset; ``min_isr_error`` is
Kafka's min.insync.replicas rule, before the append (NOT_ENOUGH_REPLICAS) and after it
(NOT_ENOUGH_REPLICAS_AFTER_APPEND). A single node commits at once and never refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.config import BrokerConfig, topic_min_insync_replicas
from broker.partition import Partition
from cluster.metadata_store import MetadataStore
from protocol.errors import ErrorCode


class HighWatermarks:
    def __init__(self, node_id: int, config: BrokerConfig, metadata: MetadataStore, *, replicated: bool,
                 stopping: Callable[[], bool]) -> None:
        self.node_id = node_id
        self.config = config
        self.metadata = metadata
        self.replicated = replicated
        self._stopping = stopping

    def maybe_advance(self, part: Partition) -> None:
        """Leader: move the high watermark to the ISR's minimum log end offset if that is higher;
        answers the acks=all waits it covers and wakes the fetches reading up to it."""
        ls = part.leader_state
        md = self.metadata
        if ls is None or md.fenced():
            return
        new = ls.high_watermark_candidate(md.isr(part.topic, part.index), self.node_id, part.log.log_end_offset)
        if new is None or new <= part.hw:
            return
        part.hw = new
        ls.complete_waiters(part.high_watermark, lambda: self.min_isr_error(part, after_append=True))
        part.wake_waiters(hw_only=True)

    async def wait_replicated(self, part: Partition, required_offset: int, timeout_s: float) -> ErrorCode:
        """acks=all: wait until the high watermark reaches ``required_offset`` (the offset after the
        batch). NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (ISR below min.insync.replicas by then),
        NOT_LEADER_OR_FOLLOWER (leadership lost) or REQUEST_TIMED_OUT."""
        ls = part.leader_state
        if not part.replicated:
            return ErrorCode.NONE
        if ls is None or self._stopping():
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.high_watermark >= required_offset:
            return self.min_isr_error(part, after_append=True)
        fut = ls.add_waiter(required_offset)
        # A loop timer ends the wait, rather than asyncio.wait_for(shield(...)): every acks=all
        # produce, coordinator write and marker in a cluster waits here, and the timer costs about
        # half as much. The future is this wait's own, so the timer may answer it.
        timer = asyncio.get_running_loop().call_later(max(timeout_s, 0), _time_out, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            ls.remove_waiter(fut)

    def min_isr_error(self, part: Partition, *, after_append: bool = False) -> ErrorCode:
        """Cluster mode, acks=all: NOT_ENOUGH_REPLICAS (before the append) or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND while the ISR is smaller than the topic's
        min.insync.replicas (Kafka's Partition.appendRecordsToLeader / checkEnoughReplicasReachOffset).
        A single node keeps accepting, as before cluster mode existed."""
        if not self.replicated:
            return ErrorCode.NONE
        md = self.metadata
        info = md.get_topic(part.topic)
        min_isr = topic_min_insync_replicas(info.configs if info else {}, self.config)
        if len(md.isr(part.topic, part.index)) >= min_isr:
            return ErrorCode.NONE
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if after_append else ErrorCode.NOT_ENOUGH_REPLICAS


def _time_out(fut: asyncio.Future[ErrorCode]) -> None:
    if not fut.done():
        fut.set_result(ErrorCode.REQUEST_TIMED_OUT)
