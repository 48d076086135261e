"""storage.partition_log: one append path for client, coordinator and replication appends.

The same transaction written by a leader (client batches + a coordinator marker) and replayed by a
follower (origin REPLICATION) leaves byte-identical logs and the same producer state, LSO and
``.txnindex``; client appends keep Kafka's duplicate and sequence rules; a transactional batch
opening a transaction needs the coordinator's verification guard, which a marker voids.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import batch as B
from storage.log import Log
from storage.log_config import LogConfig
from storage.partition_log import AppendOrigin, PartitionLog, TxnVerificationError
from storage.producer_state import InvalidProducerEpochError, OutOfOrderSequenceError, ProducerStateManager

PID = 7


def _plog(path: Path) -> PartitionLog:
    path.mkdir(parents=True)
    ps = ProducerStateManager(path)
    return PartitionLog(Log.open(path, LogConfig(), producer_state=ps))


def _client(plog: PartitionLog, seq: int, *, epoch: int = 0, txn: bool = False, guard: object | None = None):
    buf = bytearray(B.build_batch([(b"k", b"v%d" % seq)], producer_id=PID, producer_epoch=epoch, base_sequence=seq,
                                  transactional=txn))
    return plog.append(buf, list(B.iter_headers(buf)), AppendOrigin.CLIENT, leader_epoch=0, now_ms=1,
                       verification_guard=guard)


def _marker(plog: PartitionLog, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0):
    batch = bytearray(B.one_record_batch(
        (b"\0\0\0\1" if commit else b"\0\0\0\0"), b"\0\0" + coordinator_epoch.to_bytes(4, "big"), 1,
        attributes=0x30, producer_id=PID, producer_epoch=epoch))
    return plog.append_marker(batch, B.parse_header(batch), producer_id=PID, producer_epoch=epoch,
                              coordinator_epoch=coordinator_epoch, transaction_version=0, leader_epoch=0, now_ms=1)


def test_client_duplicates_are_answered_with_their_offsets_and_not_written(tmp_path: Path) -> None:
    plog = _plog(tmp_path / "t-0")
    first = _client(plog, 0)
    again = _client(plog, 0)
    assert (again.first_offset, again.last_offset, again.duplicate) == (first.first_offset, first.last_offset, True)
    assert plog.log.log_end_offset == 1
    with pytest.raises(OutOfOrderSequenceError):
        _client(plog, 5)
    _client(plog, 0, epoch=1)  # a bumped epoch restarts the sequence at 0
    with pytest.raises(InvalidProducerEpochError):
        _client(plog, 2, epoch=0)


def test_a_transaction_opens_only_with_a_current_verification_guard(tmp_path: Path) -> None:
    plog = _plog(tmp_path / "t-0")
    with pytest.raises(TxnVerificationError):
        _client(plog, 0, txn=True)  # never verified
    guard = plog.start_verification(PID, 0)
    _marker(plog, commit=False)  # the transaction ended while the coordinator was asked
    with pytest.raises(TxnVerificationError):
        _client(plog, 0, txn=True, guard=guard)
    guard = plog.start_verification(PID, 0)
    assert plog.start_verification(PID, 0) is guard  # concurrent requests share one verification
    _client(plog, 0, txn=True, guard=guard)
    assert plog.has_ongoing_txn(PID, 0)
    _client(plog, 1, txn=True)  # the transaction is open here: nothing more to verify


def test_leader_and_follower_end_with_the_same_log_and_transaction_state(tmp_path: Path) -> None:
    leader = _plog(tmp_path / "leader" / "t-0")
    guard = leader.start_verification(PID, 0)
    _client(leader, 0, txn=True, guard=guard)
    _client(leader, 1, txn=True)
    _marker(leader, commit=False)
    coordinator = bytearray(B.build_batch([(b"group", b"offsets")]))
    leader.append(coordinator, list(B.iter_headers(coordinator)), AppendOrigin.COORDINATOR, leader_epoch=0, now_ms=1)
    guard = leader.start_verification(PID, 0)
    _client(leader, 2, txn=True, guard=guard)  # a second transaction, still open

    follower = _plog(tmp_path / "follower" / "t-0")
    data = bytearray(b"".join(d for _, d in leader.log.iter_batches(0)))
    follower.append(data, list(B.iter_headers(data, check=True)), AppendOrigin.REPLICATION, now_ms=1)

    for plog in (leader, follower):
        ps = plog.producer_state
        assert ps is not None
        assert ps.ongoing_txns() == {PID: 4}
        assert ps.first_unstable_offset() == 4
        assert plog.log.collect_aborted_txns(0, 5) == leader.log.collect_aborted_txns(0, 5) != []
    assert [d for _, d in follower.log.iter_batches(0)] == [d for _, d in leader.log.iter_batches(0)]
