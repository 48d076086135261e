"""Where logs diverge, by leader epochs (Kafka's Partition.fetchRecords on the leader and
AbstractFetcherThread.getOffsetTruncationState on the follower). Pure functions over
``end_offset_for_epoch`` answers, which follow Kafka's LeaderEpochFileCache.endOffsetFor.
"""

from __future__ import annotations

from collections.abc import Callable

UNDEFINED = -1

EndOffsetFor = Callable[[int], tuple[int, int]]  # epoch -> (epoch, end offset)


def diverging_epoch(end_offset_for: EndOffsetFor, last_fetched_epoch: int, fetch_offset: int,
                    ) -> tuple[int, int] | None | str:
    """Leader side of a Fetch carrying ``last_fetched_epoch`` (v12+): the (epoch, end offset) to
    answer as ``diverging_epoch`` when the fetcher's log cannot continue at ``fetch_offset``,
    None when it can, or ``"out_of_range"`` when the leader knows nothing of that epoch (Kafka
    throws OffsetOutOfRange there)."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = end_offset_for(last_fetched_epoch)
    if epoch == UNDEFINED or end == UNDEFINED:
        return "out_of_range"
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None


def truncation_offset(end_offset_for: EndOffsetFor, log_end_offset: int, high_watermark: int,
                      leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
    """Follower side: given the leader's diverging (epoch, end offset), the offset to truncate the
    local log to, and whether truncation is complete (False: the next fetch may find more)."""
    if leader_end_offset == UNDEFINED:
        return min(high_watermark, log_end_offset), True
    if leader_epoch == UNDEFINED:
        return min(leader_end_offset, log_end_offset), True
    epoch, end = end_offset_for(leader_epoch)
    if epoch == UNDEFINED or end == UNDEFINED:
        # This replica has no epoch at or below the leader's: take the leader's offset.
        return min(leader_end_offset, log_end_offset), True
    if epoch != leader_epoch:
        # The follower does not know the leader's epoch: cut at the end of its own largest epoch
        # below it, then compare again on the next fetch.
        return min(end, log_end_offset), False
    return min(leader_end_offset, end, log_end_offset), True
