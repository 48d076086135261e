"""storage.log.Log.append_as_follower: a follower's copy of the leader's batches is byte-identical,
keeps the leader's offsets and epochs (the epoch cache follows the batches), and refuses a gap."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import batch as rb
from storage.log import Log
from storage.log_config import LogConfig


def _leader_batches(lg: Log, epochs: list[int]) -> bytes:
    for epoch in epochs:
        buf = bytearray(rb.build_batch([(b"k", b"v")] * 3))
        lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=epoch, now_ms=1)
    return b"".join(data for _, data in lg.iter_batches(0))


def test_follower_copy_is_byte_identical_with_epochs(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig(segment_bytes=300))
    data = _leader_batches(leader, [0, 0, 2, 5])
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig(segment_bytes=300))
    buf = bytearray(data)
    headers = list(rb.iter_headers(buf, check=True))
    follower.append_as_follower(buf[: headers[2].position], headers[:2], now_ms=1)
    rest = bytearray(buf[headers[2].position:])
    follower.append_as_follower(rest, list(rb.iter_headers(rest, check=True)), now_ms=1)
    assert follower.log_end_offset == leader.log_end_offset == 12
    assert follower.leader_epoch_entries == leader.leader_epoch_entries == [(0, 0), (2, 6), (5, 9)]
    assert [d for _, d in follower.iter_batches(0)] == [d for _, d in leader.iter_batches(0)]
    with pytest.raises(ValueError):  # a gap: batches must continue the log
        follower.append_as_follower(bytearray(buf), headers[:1], now_ms=1)
    follower.truncate_to(6)
    assert follower.leader_epoch_entries == [(0, 0)] and follower.log_end_offset == 6
    follower.truncate_fully_and_start_at(9)
    assert follower.log_start_offset == follower.log_end_offset == 9 and follower.leader_epoch_entries == []
    leader.close()
    follower.close()


def test_follower_append_skips_held_batches_and_heals_a_straddling_one(tmp_path: Path) -> None:
    """A fetch answer starts at the batch holding the fetch offset. Batches the follower already
    has are skipped; a batch straddling the follower's log end (the logs cut batches differently
    there) makes the follower truncate to that batch and take the leader's."""
    import asyncio

    from broker.partition import Partition
    from broker.replication.follower import append_as_follower

    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    for n in (3, 3):  # batches [0-2], [3-5]
        buf = bytearray(rb.build_batch([(b"k", b"v")] * n))
        leader.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=1)
    batches = [d for _, d in leader.iter_batches(0)]
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    buf = bytearray(batches[0])
    follower.append_as_follower(buf, list(rb.iter_headers(buf)), now_ms=1)
    odd = bytearray(rb.build_batch([(b"k", b"x")]))  # a one-record batch at 3: not the leader's cut
    follower.append(odd, list(rb.iter_headers(odd)), leader_epoch=0, now_ms=1)
    assert follower.log_end_offset == 4

    part = Partition("t", 0, follower, 0, 1 << 20, replicated=True)
    asyncio.run(append_as_follower(part, batches[0] + batches[1]))
    assert follower.log_end_offset == 6
    assert [d for _, d in follower.iter_batches(0)] == batches
    asyncio.run(append_as_follower(part, batches[1]))  # all held already: nothing happens
    assert follower.log_end_offset == 6
    leader.close()
    follower.close()


def test_an_empty_epoch_at_the_log_end_is_dropped_so_the_fetch_stops_diverging(tmp_path: Path) -> None:
    """A replica that led epoch 1 briefly without appending has (1, 6) at its log end; the new
    leader went from epoch 0 straight to 2. Before the fix, truncating to the log end kept that
    entry and the follower re-fetched with last_fetched_epoch 1 forever (a tight loop at shutdown)."""
    from broker.replication.truncation import diverging_epoch, truncation_offset

    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    _leader_batches(leader, [0, 0])  # 6 records in epoch 0
    leader.assign_leader_epoch(2, leader.log_end_offset)
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    buf = bytearray(b"".join(d for _, d in leader.iter_batches(0)))
    follower.append_as_follower(buf, list(rb.iter_headers(buf)), now_ms=1)
    follower.assign_leader_epoch(1, follower.log_end_offset)  # led epoch 1, appended nothing
    div = diverging_epoch(leader.end_offset_for_epoch, follower.latest_epoch, follower.log_end_offset)
    assert div == (0, 6)
    offset, _ = truncation_offset(follower.end_offset_for_epoch, follower.log_end_offset, 6, *div)
    assert offset == 6
    follower.truncate_to(offset)
    assert follower.leader_epoch_entries == [(0, 0)] and follower.log_end_offset == 6
    assert diverging_epoch(leader.end_offset_for_epoch, follower.latest_epoch, follower.log_end_offset) is None
    leader.close()
    follower.close()
