"""Two-phase commit (KIP-939) in the one transaction state machine (coordinator/txn_coordinator.py,
txn_metadata.py, txn_records.py), over the in-memory PartitionAccess of test_txn_coordinator.

Expected behaviour follows KIP-939 and Kafka's TransactionCoordinator.handleInitProducerId:
enable2Pc needs ``transaction.two.phase.commit.enable`` (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
and stores the timeout Integer.MAX_VALUE (the 2PC flag), which the timeout sweeper skips;
keepPreparedTxn keeps an Ongoing 2PC transaction, answers its id/epoch and a new epoch for the
caller (persisted as nextProducerEpoch), and that caller completes it; keepPreparedTxn=false is
forceTerminateTransaction (abort with an epoch bump).
"""

from __future__ import annotations

import pytest

from coordinator.txn_coordinator import TransactionCoordinator
from coordinator.txn_metadata import TWO_PC_TIMEOUT_MS, TxnState
from coordinator.txn_records import TxnLogValue, decode_value, encode_value
from protocol.errors import ErrorCode as E
from storage.internal_records import decode_coordinator_record
from tests.unit.test_txn_coordinator import Config, FakeAccess, Ids, _settle

PARTS = [("data", 0), ("data", 1)]


@pytest.fixture
async def access():
    return FakeAccess()


async def _coordinator(access, enable: bool = True) -> TransactionCoordinator:
    c = TransactionCoordinator(access, Config(**{"transaction.two.phase.commit.enable": enable}), Ids())
    await c.start()
    return c


@pytest.fixture
async def coord(access):
    c = await _coordinator(access)
    yield c
    await c.stop()


async def _prepared(coord, tid="tx", txn_version=0) -> tuple[int, int]:
    err, pid, epoch, opid, oepoch = await coord.init_producer_id_2pc(tid, 1000, enable_2pc=True)
    assert (err, opid, oepoch) == (E.NONE, -1, -1)
    assert await coord.add_partitions(tid, pid, epoch, PARTS, txn_version=txn_version) == E.NONE
    return pid, epoch


async def test_enable_2pc_needs_the_broker_config(access):
    c = await _coordinator(access, enable=False)
    try:
        assert (await c.init_producer_id_2pc("tx", 1000, enable_2pc=True))[0] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert (await c.init_producer_id_2pc("tx", 1000, enable_2pc=False, keep_prepared_txn=True))[0] \
            == E.INVALID_REQUEST
        assert (await c.init_producer_id_2pc("tx", 1000))[0] == E.NONE  # plain transactions unaffected
    finally:
        await c.stop()


async def test_2pc_timeout_is_the_flag_and_never_times_out(coord):
    # the request's timeout is ignored, even one above transaction.max.timeout.ms
    assert (await coord.init_producer_id_2pc("big", 10**9, enable_2pc=True))[0] == E.NONE
    pid, epoch = await _prepared(coord)
    md = coord.txns["tx"]
    assert md.timeout_ms == TWO_PC_TIMEOUT_MS and md.two_phase_commit
    plain_err, plain_pid, plain_epoch = await coord.init_producer_id("plain", 1000)
    assert await coord.add_partitions("plain", plain_pid, plain_epoch, [("data", 2)]) == E.NONE
    far_future = md.start_ms + 10 * 24 * 3600 * 1000
    await coord.abort_timed_out(now_ms=far_future)
    await _settle()
    assert coord.txns["plain"].state == TxnState.COMPLETE_ABORT
    assert (md.state, md.producer_epoch) == (TxnState.ONGOING, epoch)


@pytest.mark.parametrize("txn_version", [0, 2])
async def test_keep_prepared_then_complete_from_the_new_instance(coord, access, txn_version):
    pid, epoch = await _prepared(coord, txn_version=txn_version)
    err, new_pid, new_epoch, opid, oepoch = await coord.init_producer_id_2pc("tx", 1000, enable_2pc=True,
                                                                             keep_prepared_txn=True)
    assert (err, new_pid, new_epoch, opid, oepoch) == (E.NONE, pid, epoch + 1, pid, epoch)
    md = coord.txns["tx"]
    assert (md.state, md.producer_epoch, md.next_producer_epoch, md.partitions) == (
        TxnState.ONGOING, epoch, epoch + 1, set(PARTS))
    # the old instance is fenced; the new one may only complete the transaction
    assert await coord.add_partitions("tx", pid, epoch, [("data", 3)]) == E.PRODUCER_FENCED
    assert coord.verify_partition("tx", pid, epoch, "data", 0) == E.PRODUCER_FENCED
    assert await coord.add_partitions("tx", pid, epoch + 1, [("data", 3)]) == E.INVALID_TXN_STATE
    assert (await coord.end_transaction("tx", pid, epoch, True, txn_version=txn_version))[0] == E.PRODUCER_FENCED
    err, cpid, cepoch = await coord.end_transaction("tx", pid, epoch + 1, True, txn_version=txn_version)
    final = epoch + 1 + (1 if txn_version >= 2 else 0)  # TV2 bumps once more at the end
    assert (err, cpid, cepoch) == (E.NONE, pid, final)
    await _settle()
    assert (md.state, md.producer_epoch, md.next_producer_epoch) == (TxnState.COMPLETE_COMMIT, final, -1)
    m = access.markers[-1]
    assert (m.producer_id, m.producer_epoch, m.committed) == (pid, final, True)
    assert {(t, p) for t, ps in m.partitions.items() for p in ps} == set(PARTS)
    # a retry of the same EndTxn is answered as done
    assert (await coord.end_transaction("tx", pid, epoch + 1, True, txn_version=txn_version))[0] == E.NONE


async def test_keep_prepared_twice_fences_the_first_recoverer(coord):
    pid, epoch = await _prepared(coord)
    assert (await coord.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=True))[1:] == (
        pid, epoch + 1, pid, epoch)
    assert (await coord.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=True))[1:] == (
        pid, epoch + 2, pid, epoch)
    assert (await coord.end_transaction("tx", pid, epoch + 1, False))[0] == E.PRODUCER_FENCED
    assert (await coord.end_transaction("tx", pid, epoch + 2, False))[0] == E.NONE


async def test_keep_prepared_without_open_transaction_is_a_plain_init(coord):
    err, pid, epoch, _, _ = await coord.init_producer_id_2pc("tx", 1, enable_2pc=True)
    assert await coord.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=True) == (
        E.NONE, pid, epoch + 1, -1, -1)


async def test_keep_prepared_refuses_a_non_2pc_transaction(coord):
    err, pid, epoch = await coord.init_producer_id("tx", 1000)
    assert await coord.add_partitions("tx", pid, epoch, PARTS) == E.NONE
    assert (await coord.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=True))[0] \
        == E.INVALID_TXN_STATE


async def test_force_terminate_aborts_with_an_epoch_bump(coord, access):
    pid, epoch = await _prepared(coord)
    await coord.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=True)  # recovered at epoch+1
    err = (await coord.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=False))[0]
    assert err == E.CONCURRENT_TRANSACTIONS
    await _settle()
    md = coord.txns["tx"]
    assert md.state == TxnState.COMPLETE_ABORT
    m = access.markers[-1]
    assert (m.committed, m.producer_epoch) == (False, epoch + 2)  # newer than both identities
    assert (await coord.init_producer_id_2pc("tx", 1, enable_2pc=True))[:3] == (E.NONE, pid, epoch + 3)


async def test_recovered_state_survives_a_reload(access):
    c = await _coordinator(access)
    pid, epoch = await _prepared(c)
    await c.init_producer_id_2pc("tx", 1, enable_2pc=True, keep_prepared_txn=True)
    await c.stop()
    c2 = await _coordinator(access)
    try:
        md = c2.txns["tx"]
        assert (md.state, md.timeout_ms, md.producer_epoch, md.next_producer_epoch) == (
            TxnState.ONGOING, TWO_PC_TIMEOUT_MS, epoch, epoch + 1)
        assert (await c2.end_transaction("tx", pid, epoch + 1, True))[0] == E.NONE
    finally:
        await c2.stop()


def test_next_producer_epoch_is_tagged_field_3_and_dumped():
    v = TxnLogValue(5, 3, TWO_PC_TIMEOUT_MS, 1, {"a": [0]}, 10, 9, next_producer_epoch=4)
    raw = encode_value(v)
    assert raw[:2] == b"\x00\x01"  # a tagged field forces v1 even for a TV1 client
    assert decode_value(raw) == v
    from coordinator.txn_records import encode_key
    _, payload = decode_coordinator_record("__transaction_state", 0, encode_key("t"), raw)
    assert '"nextProducerEpoch":4' in payload and '"twoPhaseCommit":true' in payload
    assert '"previousProducerId":-1' in payload and '"clientTransactionVersion":0' in payload
    plain = encode_value(TxnLogValue(5, 3, 1000, 1, {"a": [0]}, 10, 9))
    assert raw[:2] != plain[:2] and "twoPhaseCommit" not in decode_coordinator_record(
        "__transaction_state", 0, encode_key("t"), plain)[1]
