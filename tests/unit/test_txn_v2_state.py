"""Transaction version 2 (KIP-890 part 2) in the one transaction state machine
(coordinator/txn_coordinator.py, txn_metadata.py, txn_records.py), over the in-memory
PartitionAccess of test_txn_coordinator. Expected answers follow Kafka's TV2 endTransaction
(TransactionCoordinator.scala) and TransactionMetadata.prepareAbortOrCommit / prepareComplete.
"""

from __future__ import annotations

import pytest

from coordinator.txn_coordinator import TOPIC, TransactionCoordinator
from coordinator.txn_metadata import MAX_EPOCH, TxnState, tv2_end_epochs
from coordinator.txn_records import TxnLogValue, decode_value, encode_value
from protocol.errors import ErrorCode as E
from storage.internal_records import TRANSACTION_LOG_VALUE, decode
from tests.unit.test_txn_coordinator import Config, FakeAccess, Ids, _settle

PARTS = [("data", 0), ("data", 1)]


@pytest.fixture
async def access():
    return FakeAccess()


@pytest.fixture
async def coord(access):
    c = TransactionCoordinator(access, Config(), Ids())
    await c.start()
    yield c
    await c.stop()


async def _tv2_ongoing(coord, tid="tx", parts=PARTS) -> tuple[int, int]:
    err, pid, epoch = await coord.init_producer_id(tid, 60000)
    assert err == E.NONE
    assert await coord.add_partitions(tid, pid, epoch, parts, txn_version=2) == E.NONE
    return pid, epoch


def test_tv2_end_epochs():
    assert tv2_end_epochs(0, fence=False) == (1, False)
    assert tv2_end_epochs(5, fence=True) == (7, False)
    assert tv2_end_epochs(MAX_EPOCH - 2, fence=False) == (MAX_EPOCH - 1, False)
    assert tv2_end_epochs(MAX_EPOCH - 1, fence=False) == (MAX_EPOCH, True)
    assert tv2_end_epochs(MAX_EPOCH - 2, fence=True) == (MAX_EPOCH, True)
    assert tv2_end_epochs(MAX_EPOCH - 1, fence=True) == (MAX_EPOCH, True)


async def test_every_end_bumps_the_epoch_and_markers_carry_it(coord, access):
    pid, epoch = await _tv2_ongoing(coord)
    assert await coord.end_transaction("tx", pid, epoch, True, txn_version=2) == (E.NONE, pid, epoch + 1)
    await _settle()
    md = coord.txns["tx"]
    assert (md.state, md.producer_epoch, md.client_txn_version) == (TxnState.COMPLETE_COMMIT, epoch + 1, 2)
    m = access.markers[-1]
    assert (m.producer_id, m.producer_epoch, m.committed, m.transaction_version) == (pid, epoch + 1, True, 2)
    # the next transaction, under the new epoch, aborted: one more bump
    assert await coord.add_partitions("tx", pid, epoch + 1, [("data", 2)], txn_version=2) == E.NONE
    assert await coord.end_transaction("tx", pid, epoch + 1, False, txn_version=2) == (E.NONE, pid, epoch + 2)
    await _settle()
    assert coord.txns["tx"].state == TxnState.COMPLETE_ABORT
    assert (access.markers[-1].producer_epoch, access.markers[-1].committed) == (epoch + 2, False)


async def test_tv1_end_keeps_the_epoch(coord, access):
    err, pid, epoch = await coord.init_producer_id("tx", 60000)
    assert await coord.add_partitions("tx", pid, epoch, PARTS) == E.NONE
    assert await coord.end_transaction("tx", pid, epoch, True, txn_version=0) == (E.NONE, pid, epoch)
    await _settle()
    assert (coord.txns["tx"].producer_epoch, access.markers[-1].transaction_version) == (epoch, 0)
    # TV1 retry of the same commit: NONE with the same epoch
    assert await coord.end_transaction("tx", pid, epoch, True) == (E.NONE, pid, epoch)


async def test_delayed_end_txn_cannot_end_the_next_transaction(coord):
    """KAFKA-17754: EndTxn(commit) of transaction 1 is answered, the client starts transaction 2,
    then a delayed duplicate EndTxn of transaction 1 (old epoch) arrives: it is fenced."""
    pid, epoch = await _tv2_ongoing(coord)
    assert (await coord.end_transaction("tx", pid, epoch, True, txn_version=2))[0] == E.NONE
    await _settle()
    assert await coord.add_partitions("tx", pid, epoch + 1, [("data", 3)], txn_version=2) == E.NONE
    for commit in (True, False):
        assert await coord.end_transaction("tx", pid, epoch, commit, txn_version=2) == (E.PRODUCER_FENCED, -1, -1)
    md = coord.txns["tx"]
    assert (md.state, md.producer_epoch, md.partitions) == (TxnState.ONGOING, epoch + 1, {("data", 3)})


async def test_retry_of_a_completed_end_and_stale_adds(coord):
    pid, epoch = await _tv2_ongoing(coord)
    assert (await coord.end_transaction("tx", pid, epoch, True, txn_version=2))[0] == E.NONE
    # while PrepareCommit: a retry (old epoch) is CONCURRENT_TRANSACTIONS, the new epoch is fenced
    assert (await coord.end_transaction("tx", pid, epoch, True, txn_version=2))[0] in (
        E.CONCURRENT_TRANSACTIONS, E.NONE)
    await _settle()
    assert await coord.end_transaction("tx", pid, epoch, True, txn_version=2) == (E.NONE, pid, epoch + 1)
    assert await coord.end_transaction("tx", pid, epoch, False, txn_version=2) == (E.INVALID_TXN_STATE, -1, -1)
    # a commit at the new epoch with nothing in the transaction is invalid; an abort bumps again
    assert (await coord.end_transaction("tx", pid, epoch + 1, True, txn_version=2))[0] == E.INVALID_TXN_STATE
    # an implicit add from a produce of the previous transaction (old epoch) is fenced
    assert await coord.add_partitions("tx", pid, epoch, [("data", 0)], txn_version=2) == E.PRODUCER_FENCED
    assert await coord.end_transaction("tx", pid, epoch + 1, False, txn_version=2) == (E.NONE, pid, epoch + 2)
    await _settle()
    assert coord.txns["tx"].state == TxnState.COMPLETE_ABORT


async def test_abort_of_an_empty_transaction_bumps_without_markers(coord, access):
    err, pid, epoch = await coord.init_producer_id("tx", 60000)
    assert await coord.end_transaction("tx", pid, epoch, True, txn_version=2) == (E.INVALID_TXN_STATE, -1, -1)
    assert await coord.end_transaction("tx", pid, epoch, False, txn_version=2) == (E.NONE, pid, epoch + 1)
    await _settle()
    assert coord.txns["tx"].state == TxnState.COMPLETE_ABORT
    assert access.markers == []


async def test_epoch_overflow_rotates_the_producer_id_and_survives_reload(access):
    coord = TransactionCoordinator(access, Config(), Ids())
    await coord.start()
    pid, _ = await _tv2_ongoing(coord)
    md = coord.txns["tx"]
    md.producer_epoch = MAX_EPOCH - 1  # as if 32766 transactions had ended (in memory; the log follows)
    err, new_pid, new_epoch = await coord.end_transaction("tx", pid, MAX_EPOCH - 1, True, txn_version=2)
    assert (err, new_epoch) == (E.NONE, 0) and new_pid != pid
    await _settle()
    # markers go out under the old id at Short.MAX_VALUE, the client continues with (new id, 0)
    m = access.markers[-1]
    assert (m.producer_id, m.producer_epoch) == (pid, MAX_EPOCH)
    assert (md.producer_id, md.producer_epoch, md.prev_producer_id, md.next_producer_id, md.state) == (
        new_pid, 0, pid, -1, TxnState.COMPLETE_COMMIT)
    # a retry of that EndTxn (old id, MAX - 1) is recognised through prev_producer_id
    assert await coord.end_transaction("tx", pid, MAX_EPOCH - 1, True, txn_version=2) == (E.NONE, new_pid, 0)
    await coord.stop()

    again = TransactionCoordinator(access, Config(), Ids(5000))
    await again.start()
    md2 = again.txns["tx"]
    assert (md2.producer_id, md2.producer_epoch, md2.prev_producer_id, md2.client_txn_version) == (new_pid, 0, pid, 2)
    assert await again.end_transaction("tx", pid, MAX_EPOCH - 1, True, txn_version=2) == (E.NONE, new_pid, 0)
    await again.stop()


async def test_prepare_with_rotation_is_finished_after_reload(access):
    coord = TransactionCoordinator(access, Config(), Ids())
    await coord.start()
    pid, _ = await _tv2_ongoing(coord)
    coord.txns["tx"].producer_epoch = MAX_EPOCH - 1
    import asyncio

    access.gate = asyncio.Event()  # markers never get out: the "crash" after PrepareCommit
    _, new_pid, _ = await coord.end_transaction("tx", pid, MAX_EPOCH - 1, True, txn_version=2)
    await _settle()
    await coord.stop()
    access.gate = None
    again = TransactionCoordinator(access, Config(), Ids(5000))
    await again.start()
    await _settle()
    md = again.txns["tx"]
    assert (md.state, md.producer_id, md.producer_epoch, md.prev_producer_id) == (
        TxnState.COMPLETE_COMMIT, new_pid, 0, pid)
    await again.stop()


async def test_timed_out_tv2_transaction_is_fenced_with_two_bumps(coord, access):
    pid, epoch = await _tv2_ongoing(coord)
    await coord.abort_timed_out(now_ms=2**62)
    await _settle()
    md = coord.txns["tx"]
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 2)
    assert (access.markers[-1].producer_epoch, access.markers[-1].transaction_version) == (epoch + 2, 2)
    assert await coord.end_transaction("tx", pid, epoch, False, txn_version=2) == (E.PRODUCER_FENCED, -1, -1)


def test_log_value_tagged_fields_round_trip():
    v = TxnLogValue(7, 3, 60000, 4, {}, 11, 10, prev_producer_id=5, next_producer_id=-1, client_txn_version=2)
    data = encode_value(v)
    assert data[:2] == b"\x00\x01"  # TransactionLogValue v1 (flexible), as Kafka writes for TV2
    version, fields = decode(TRANSACTION_LOG_VALUE, data)
    assert (version, fields["previousProducerId"], fields["clientTransactionVersion"]) == (1, 5, 2)
    assert "nextProducerId" not in fields  # at its default: not written, as Kafka's tagged fields
    assert decode_value(data) == v
    tv1 = TxnLogValue(7, 3, 60000, 0, {}, 11, -1)
    assert encode_value(tv1)[:2] == b"\x00\x00" and decode_value(encode_value(tv1)) == tv1


def test_transaction_topic_name():
    assert TOPIC == "__transaction_state"
