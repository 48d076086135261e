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
