"""Transactions at the protocol level (issue 5, acceptance 7): kafka-python wire structs against a real broker.

Invalid requests must get Kafka's error codes and change nothing; the admin views (ListTransactions,
DescribeTransactions, DescribeProducers), FindCoordinator(TRANSACTION), read_committed Fetch with its
aborted-transaction list and ListOffsets at the LSO are checked against what Apache Kafka answers
(TransactionCoordinator / TransactionMetadata / KafkaApis). Also tests ``kbroker transactions``
(cli/transactions.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import sys

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)

from cli import transactions as transactions_cli
from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from storage.batch import build_batch, decode_records, iter_headers

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _addr(broker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


# --- request helpers -------------------------------------------------------------------------------


async def create_topic(c: ProtocolClient, name: str, partitions: int = 1) -> None:
    T = CreateTopicsRequest.CreatableTopic
    resp = await c.request(CreateTopicsRequest(version=7, topics=[
        T(version=7, name=name, num_partitions=partitions, replication_factor=-1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False), 7)
    assert resp.topics[0].error_code == 0, resp


async def init_pid(c: ProtocolClient, tid: str | None, *, timeout_ms: int = 60000, version: int = 4,
                   pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    kw = {"producer_id": pid, "producer_epoch": epoch} if version >= 3 else {}
    resp = await c.request(InitProducerIdRequest(version=version, transactional_id=tid,
                                                 transaction_timeout_ms=timeout_ms, **kw), version)
    return resp.error_code, resp.producer_id, resp.producer_epoch


async def init_ok(c: ProtocolClient, tid: str, **kw) -> tuple[int, int]:
    """InitProducerId, retrying CONCURRENT_TRANSACTIONS (an earlier transaction still completing)."""
    for _ in range(200):
        err, pid, epoch = await init_pid(c, tid, **kw)
        if err != E.CONCURRENT_TRANSACTIONS:
            assert err == 0, E(err).name
            return pid, epoch
        await asyncio.sleep(0.02)
    raise AssertionError("InitProducerId kept answering CONCURRENT_TRANSACTIONS")


async def add_partitions(c: ProtocolClient, tid: str, pid: int, epoch: int, parts: dict[str, list[int]],
                         version: int = 3) -> dict[tuple[str, int], int]:
    R = AddPartitionsToTxnRequest
    if version <= 3:
        req = R(version=version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[R.AddPartitionsToTxnTopic(version=version, name=t, partitions=ps)
                                     for t, ps in parts.items()])
        resp = await c.request(req, version)
        results = resp.results_by_topic_v3_and_below
    else:
        raise ValueError("use add_partitions_batched for v4+")
    return {(t.name, p.partition_index): p.partition_error_code for t in results for p in t.results_by_partition}


async def add_partitions_batched(c: ProtocolClient, txns: list[tuple[str, int, int, dict[str, list[int]], bool]],
                                 version: int = 4):
    R = AddPartitionsToTxnRequest
    T = R.AddPartitionsToTxnTransaction
    req = R(version=version, transactions=[
        T(version=version, transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify,
          topics=[T.AddPartitionsToTxnTopic(version=version, name=t, partitions=ps) for t, ps in parts.items()])
        for tid, pid, epoch, parts, verify in txns])
    return await c.request(req, version)


async def end_txn(c: ProtocolClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    resp = await c.request(EndTxnRequest(version=version, transactional_id=tid, producer_id=pid,
                                         producer_epoch=epoch, committed=commit), version)
    return resp.error_code


async def end_txn_ok(c: ProtocolClient, tid: str, pid: int, epoch: int, commit: bool) -> None:
    assert await end_txn(c, tid, pid, epoch, commit) == 0


async def wait_complete(c: ProtocolClient, tid: str) -> dict:
    """DescribeTransactions until the transaction has left PrepareCommit/PrepareAbort."""
    for _ in range(300):
        d = await describe(c, tid)
        if d["state"] not in ("PrepareCommit", "PrepareAbort"):
            return d
        await asyncio.sleep(0.02)
    raise AssertionError(f"transaction {tid} stuck in {d['state']}")


async def produce(c: ProtocolClient, topic: str, partition: int, values: list[bytes], *, pid: int = -1,
                  epoch: int = -1, seq: int = -1, tid: str | None = None, transactional: bool = True,
                  version: int = 9) -> tuple[int, int]:
    batch = build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=transactional and pid >= 0)
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=version, transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        P(version=version, name=topic, partition_data=[P.PartitionProduceData(version=version, index=partition,
                                                                             records=batch)])])
    part = (await c.request(req, version)).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


async def list_offset(c: ProtocolClient, topic: str, partition: int = 0, *, committed: bool = False,
                      timestamp: int = -1) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    resp = await c.request(ListOffsetsRequest(version=7, replica_id=-1, isolation_level=1 if committed else 0, topics=[
        T(version=7, name=topic, partitions=[T.ListOffsetsPartition(version=7, partition_index=partition,
                                                                     current_leader_epoch=-1, timestamp=timestamp)])]),
        7)
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0, E(p.error_code).name
    return p.offset


async def fetch(c: ProtocolClient, topic: str, partition: int = 0, offset: int = 0, *, committed: bool = True,
                version: int = 11):
    T = FetchRequest.FetchTopic
    req = FetchRequest(version=version, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                       isolation_level=1 if committed else 0, session_id=0, session_epoch=-1, topics=[
                           T(version=version, topic=topic, partitions=[T.FetchPartition(
                               version=version, partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    resp = await c.request(req, version)
    return resp.responses[0].partitions[0]


def batches_of(records: bytes | None) -> list[tuple[object, list]]:
    """(header, records) for every batch of a fetched record set."""
    buf = bytes(records or b"")
    out = []
    for h in iter_headers(buf, check=False):
        out.append((h, decode_records(buf[h.position: h.position + h.size])))
    return out


async def describe(c: ProtocolClient, tid: str) -> dict:
    resp = await c.request(DescribeTransactionsRequest(version=0, transactional_ids=[tid]), 0)
    s = resp.transaction_states[0]
    return {"error": s.error_code, "state": s.transaction_state, "pid": s.producer_id, "epoch": s.producer_epoch,
            "timeout": s.transaction_timeout_ms, "start": s.transaction_start_time_ms,
            "partitions": {(t.topic, p) for t in s.topics for p in t.partitions}}


async def list_txns(c: ProtocolClient, states: list[str] | None = None, pids: list[int] | None = None,
                    version: int = 0, duration: int = -1):
    kw = {"duration_filter": duration} if version >= 1 else {}
    return await c.request(ListTransactionsRequest(version=version, state_filters=states or [],
                                                   producer_id_filters=pids or [], **kw), version)


async def describe_producers(c: ProtocolClient, topic: str, partition: int = 0):
    R = DescribeProducersRequest
    resp = await c.request(R(version=0, topics=[R.TopicRequest(version=0, name=topic, partition_indexes=[partition])]),
                           0)
    return resp.topics[0].partitions[0]


async def open_txn(c: ProtocolClient, tid: str, topic: str, values: list[bytes], partition: int = 0,
                   seq: int = 0) -> tuple[int, int, int]:
    """InitProducerId + AddPartitionsToTxn + one transactional batch; returns (pid, epoch, base offset)."""
    pid, epoch = await init_ok(c, tid)
    assert await add_partitions(c, tid, pid, epoch, {topic: [partition]}) == {(topic, partition): 0}
    err, base = await produce(c, topic, partition, values, pid=pid, epoch=epoch, seq=seq, tid=tid)
    assert err == 0, E(err).name
    return pid, epoch, base


# --- FindCoordinator ----------------------------------------------------------------------------------


async def test_find_coordinator_transaction_v3_and_v4_batched(broker):
    host, port = _addr(broker)
    async with ProtocolClient(host, port) as c:
        resp = await c.request(FindCoordinatorRequest(version=3, key="tx-a", key_type=1), 3)
        for _ in range(100):  # the first lookup creates __transaction_state and loads it
            if resp.error_code != E.COORDINATOR_NOT_AVAILABLE:
                break
            await asyncio.sleep(0.05)
            resp = await c.request(FindCoordinatorRequest(version=3, key="tx-a", key_type=1), 3)
        assert (resp.error_code, resp.host, resp.port) == (0, host, port)
        node = resp.node_id
        resp = await c.request(FindCoordinatorRequest(version=4, key_type=1, coordinator_keys=["tx-a", "tx-b"]), 4)
        assert [(x.key, x.error_code, x.node_id, x.host, x.port) for x in resp.coordinators] == [
            ("tx-a", 0, node, host, port), ("tx-b", 0, node, host, port)]
        # Unknown key type: INVALID_REQUEST, as Kafka's CoordinatorType.forId fails.
        resp = await c.request(FindCoordinatorRequest(version=3, key="tx-a", key_type=7), 3)
        assert resp.error_code == E.INVALID_REQUEST


# --- InitProducerId ---------------------------------------------------------------------------------


async def test_init_producer_id_bumps_epoch_and_rejects_bad_timeout(broker_factory):
    broker = broker_factory({"transaction.max.timeout.ms": "60000"})
    async with ProtocolClient(*_addr(broker)) as c:
        assert (await init_pid(c, "t-timeout", timeout_ms=60001))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await init_pid(c, "t-timeout", timeout_ms=0))[0] == E.INVALID_TRANSACTION_TIMEOUT
        # ...and nothing was created for it.
        assert (await describe(c, "t-timeout"))["error"] == E.TRANSACTIONAL_ID_NOT_FOUND
        pid, epoch = await init_ok(c, "t-timeout", timeout_ms=60000)
        assert epoch == 0
        assert await init_ok(c, "t-timeout", timeout_ms=1000) == (pid, 1)
        d = await describe(c, "t-timeout")
        assert (d["error"], d["state"], d["pid"], d["epoch"], d["timeout"]) == (0, "Empty", pid, 1, 1000)
        # A bad timeout on an existing id changes nothing either.
        assert (await init_pid(c, "t-timeout", timeout_ms=60001))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await describe(c, "t-timeout"))["epoch"] == 1


@pytest.mark.parametrize(("version", "code"), [(3, E.INVALID_PRODUCER_EPOCH), (4, E.PRODUCER_FENCED)])
async def test_init_producer_id_with_stale_epoch_is_fenced(broker, version, code):
    """KIP-360 InitProducerId carrying an epoch that is neither current nor the last one."""
    async with ProtocolClient(*_addr(broker)) as c:
        pid, _ = await init_ok(c, "t-stale")
        await init_ok(c, "t-stale")
        assert await init_ok(c, "t-stale") == (pid, 2)
        assert await init_pid(c, "t-stale", version=version, pid=pid, epoch=0) == (code, -1, -1)
        assert (await describe(c, "t-stale"))["epoch"] == 2
        # With the current epoch the bump is allowed (a producer recovering after an abortable error).
        assert await init_pid(c, "t-stale", version=version, pid=pid, epoch=2) == (0, pid, 3)
        # A retry of that same call (the previous epoch) gets the same answer, not another bump.
        assert await init_pid(c, "t-stale", version=version, pid=pid, epoch=2) == (0, pid, 3)
        assert (await describe(c, "t-stale"))["epoch"] == 3


async def test_init_producer_id_zombie_with_previous_epoch_is_fenced(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        pid, epoch = await init_ok(c, "t-zombie")  # instance A: epoch 0
        assert await init_ok(c, "t-zombie") == (pid, epoch + 1)  # instance B fences A
        # A recovers with KIP-360, passing its (now stale) epoch.
        assert await init_pid(c, "t-zombie", pid=pid, epoch=epoch) == (E.PRODUCER_FENCED, -1, -1)


async def test_init_producer_id_empty_transactional_id(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        assert (await init_pid(c, ""))[0] == E.INVALID_REQUEST


# --- AddPartitionsToTxn / EndTxn --------------------------------------------------------------------


async def test_end_txn_without_transaction_is_invalid_txn_state(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        pid, epoch = await init_ok(c, "t-empty")
        for commit in (True, False):
            assert await end_txn(c, "t-empty", pid, epoch, commit) == E.INVALID_TXN_STATE
        d = await describe(c, "t-empty")
        assert (d["state"], d["epoch"], d["partitions"]) == ("Empty", epoch, set())


@pytest.mark.parametrize(("version", "code"), [(1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)])
async def test_add_partitions_with_stale_epoch(broker, version, code):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "ap")
        pid, old = await init_ok(c, "t-ap")
        _, new = await init_ok(c, "t-ap")
        assert await add_partitions(c, "t-ap", pid, old, {"ap": [0]}, version=version) == {("ap", 0): code}
        d = await describe(c, "t-ap")
        assert (d["state"], d["epoch"], d["partitions"]) == ("Empty", new, set())


async def test_add_partitions_unknown_partition_and_wrong_producer_id(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "ap2")
        pid, epoch = await init_ok(c, "t-ap2")
        # One unknown partition: it gets UNKNOWN_TOPIC_OR_PARTITION, the rest OPERATION_NOT_ATTEMPTED.
        assert await add_partitions(c, "t-ap2", pid, epoch, {"ap2": [0, 5]}) == {
            ("ap2", 0): E.OPERATION_NOT_ATTEMPTED, ("ap2", 5): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert await add_partitions(c, "t-ap2", pid + 1, epoch, {"ap2": [0]}) == {
            ("ap2", 0): E.INVALID_PRODUCER_ID_MAPPING}
        assert await add_partitions(c, "t-unknown-id", pid, epoch, {"ap2": [0]}) == {
            ("ap2", 0): E.INVALID_PRODUCER_ID_MAPPING}
        assert await end_txn(c, "t-ap2", pid + 1, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
        assert await end_txn(c, "t-unknown-id", pid, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
        d = await describe(c, "t-ap2")
        assert (d["state"], d["partitions"]) == ("Empty", set())
        assert (await describe(c, "t-unknown-id"))["error"] == E.TRANSACTIONAL_ID_NOT_FOUND


async def test_add_partitions_batched_v4_and_verify_only(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "apv", 2)
        pid, epoch = await init_ok(c, "t-apv")
        assert await add_partitions(c, "t-apv", pid, epoch, {"apv": [0]}) == {("apv", 0): 0}
        resp = await add_partitions_batched(c, [("t-apv", pid, epoch, {"apv": [0, 1]}, True)])
        assert resp.error_code == 0
        got = {(t.name, p.partition_index): p.partition_error_code
               for r in resp.results_by_transaction for t in r.topic_results for p in t.results_by_partition}
        assert got[("apv", 0)] == 0
        assert got[("apv", 1)] != 0  # not part of the transaction: verification fails
        # verify_only added nothing.
        assert (await describe(c, "t-apv"))["partitions"] == {("apv", 0)}


@pytest.mark.parametrize(("version", "code"), [(1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)])
async def test_end_txn_with_stale_epoch(broker, version, code):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "et")
        pid, old = await init_ok(c, "t-et")
        _, new = await init_ok(c, "t-et")
        assert await add_partitions(c, "t-et", pid, new, {"et": [0]}) == {("et", 0): 0}
        for commit in (True, False):
            assert await end_txn(c, "t-et", pid, old, commit, version=version) == code
        d = await describe(c, "t-et")
        assert (d["state"], d["epoch"], d["partitions"]) == ("Ongoing", new, {("et", 0)})
        await end_txn_ok(c, "t-et", pid, new, False)


async def test_end_txn_with_future_epoch_is_fenced(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "etf")
        pid, epoch, _ = await open_txn(c, "t-etf", "etf", [b"x"])
        assert await end_txn(c, "t-etf", pid, epoch + 1, True, version=3) == E.PRODUCER_FENCED


async def test_end_txn_retry_after_completion(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "retry")
        pid, epoch, _ = await open_txn(c, "t-retry", "retry", [b"a", b"b"])
        await end_txn_ok(c, "t-retry", pid, epoch, True)
        # A retry while the markers are being written: CONCURRENT_TRANSACTIONS; once complete: NONE.
        for _ in range(200):
            code = await end_txn(c, "t-retry", pid, epoch, True)
            if code != E.CONCURRENT_TRANSACTIONS:
                break
            await asyncio.sleep(0.02)
        assert code == 0
        assert (await describe(c, "t-retry"))["state"] == "CompleteCommit"
        # The opposite outcome is an invalid transition and changes nothing.
        assert await end_txn(c, "t-retry", pid, epoch, False) == E.INVALID_TXN_STATE
        end = await list_offset(c, "retry")
        assert end == 3  # two records + one COMMIT marker, no second marker
        assert await list_offset(c, "retry", committed=True) == end
        d = await describe(c, "t-retry")
        assert (d["state"], d["epoch"]) == ("CompleteCommit", epoch)


async def test_abort_retry_after_completion(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "retry-abort")
        pid, epoch, _ = await open_txn(c, "t-retry-abort", "retry-abort", [b"a"])
        await end_txn_ok(c, "t-retry-abort", pid, epoch, False)
        await wait_complete(c, "t-retry-abort")
        assert await end_txn(c, "t-retry-abort", pid, epoch, False) == 0
        assert await end_txn(c, "t-retry-abort", pid, epoch, True) == E.INVALID_TXN_STATE
        assert (await describe(c, "t-retry-abort"))["state"] == "CompleteAbort"


# --- KIP-890 part 1: produce to a partition that is not in the transaction -------------------------------


async def test_transactional_produce_to_partition_not_in_transaction(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "v890", 2)
        pid, epoch = await init_ok(c, "t-890")
        # Before any AddPartitionsToTxn: rejected.
        err, _ = await produce(c, "v890", 0, [b"early"], pid=pid, epoch=epoch, seq=0, tid="t-890")
        assert err == E.INVALID_TXN_STATE
        assert await add_partitions(c, "t-890", pid, epoch, {"v890": [0]}) == {("v890", 0): 0}
        assert (await produce(c, "v890", 0, [b"ok"], pid=pid, epoch=epoch, seq=0, tid="t-890"))[0] == 0
        # Partition 1 is not in the transaction: rejected, nothing written, LSO/HW unaffected.
        err, _ = await produce(c, "v890", 1, [b"stray"], pid=pid, epoch=epoch, seq=0, tid="t-890")
        assert err == E.INVALID_TXN_STATE
        assert await list_offset(c, "v890", 1) == 0
        assert await list_offset(c, "v890", 1, committed=True) == 0
        p1 = await describe_producers(c, "v890", 1)
        assert (p1.error_code, p1.active_producers) == (0, [])
        f = await fetch(c, "v890", 1, committed=False)
        assert (f.high_watermark, f.last_stable_offset, batches_of(f.records)) == (0, 0, [])
        # A stale epoch cannot sneak in either.
        pid2, epoch2 = await init_ok(c, "t-890")  # aborts the open transaction, bumps the epoch twice
        assert pid2 == pid and epoch2 > epoch
        err, _ = await produce(c, "v890", 0, [b"zombie"], pid=pid, epoch=epoch, seq=1, tid="t-890")
        assert err in (E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED)
        assert await list_offset(c, "v890", 0, committed=True) == await list_offset(c, "v890", 0)
        # The open transaction on partition 0 was aborted by the fencing InitProducerId.
        f = await fetch(c, "v890", 0)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)]


# --- CONCURRENT_TRANSACTIONS while a commit completes -------------------------------------------------

# How long the coordinator holds a prepared transaction before its markers (KBROKERTEST_DELAY_POINT): far
# longer than handling one pipelined request, even on a loaded machine.
MARKER_DELAY_MS = 3000


async def test_init_producer_id_while_commit_completes(broker_factory):
    """InitProducerId while a commit completes (PrepareCommit): CONCURRENT_TRANSACTIONS, then, once the
    markers are written, the epoch bump; the commit is not turned into an abort.

    Deterministic: the broker runs with ``KBROKERTEST_DELAY_POINT=txn.before_markers:<ms>``
    (coordinator/txn_coordinator.py), which holds the prepared transaction before its markers, so the
    InitProducerId pipelined right behind EndTxn on the same connection lands in PrepareCommit. Kafka answers it with CONCURRENT_TRANSACTIONS (TransactionCoordinator
    handleInitProducerId: a PrepareCommit/PrepareAbort state is retriable)."""
    broker = broker_factory(start=False)
    broker.env = {"KBROKERTEST_DELAY_POINT": f"txn.before_markers:{MARKER_DELAY_MS}"}
    broker.start()
    host, port = _addr(broker)
    async with ProtocolClient(host, port) as c:
        await create_topic(c, "race", 4)
        pid, epoch = await init_ok(c, "t-race")
        assert await add_partitions(c, "t-race", pid, epoch, {"race": [0, 1, 2, 3]}) == {
            ("race", p): 0 for p in range(4)}
        for p in range(4):
            assert (await produce(c, "race", p, [b"r%d" % p], pid=pid, epoch=epoch, seq=0, tid="t-race"))[0] == 0
        # Pipelined on one connection: the broker applies and answers them in this order, all while the
        # commit is held in PrepareCommit.
        end_code, first, d, lso = await asyncio.gather(
            end_txn(c, "t-race", pid, epoch, True), init_pid(c, "t-race"), describe(c, "t-race"),
            list_offset(c, "race", 0, committed=True))
        assert end_code == 0
        assert first == (E.CONCURRENT_TRANSACTIONS, -1, -1)
        assert (d["state"], d["epoch"]) == ("PrepareCommit", epoch)
        assert lso == 0  # no marker yet: the record is still above the LSO
        answers = [first]
        while answers[-1][0] == E.CONCURRENT_TRANSACTIONS:
            assert len(answers) < 1000, "InitProducerId kept answering CONCURRENT_TRANSACTIONS"
            await asyncio.sleep(0.02)
            answers.append(await init_pid(c, "t-race"))
        assert len(answers) > 1
        assert answers[-1] == (0, pid, epoch + 1)
        assert all(a == (E.CONCURRENT_TRANSACTIONS, -1, -1) for a in answers[:-1])
        d = await describe(c, "t-race")
        assert (d["state"], d["pid"], d["epoch"], d["partitions"]) == ("Empty", pid, epoch + 1, set())
        for p in range(4):  # committed, not aborted by the new instance
            f = await fetch(c, "race", p)
            assert f.aborted_transactions == []
            assert [r.value for h, recs in batches_of(f.records) if not h.is_control for r in recs] == [b"r%d" % p]
            assert [h.is_control for h, _ in batches_of(f.records)] == [False, True]
            assert await list_offset(c, "race", p, committed=True) == 2
    assert f"fault injection: delaying txn.before_markers by {MARKER_DELAY_MS} ms" in broker.log_text()


@pytest.mark.parametrize(("marker_delay_ms", "expect"), [(30, E.NONE), (MARKER_DELAY_MS, E.CONCURRENT_TRANSACTIONS)])
async def test_add_partitions_while_commit_completes_is_held_briefly(broker_factory, marker_delay_ms, expect):
    """The next transaction's AddPartitionsToTxn, pipelined right behind EndTxn, arrives while the commit
    is still completing. kbroker holds it for up to CONCURRENT_WAIT_S (100 ms) for the Complete state
    instead of answering CONCURRENT_TRANSACTIONS at once (the client would retry after its backoff and
    get the same answer): with markers delayed 30 ms it is answered NONE once the commit is complete,
    and the new transaction holds only the new partition; with markers delayed 3 s it is answered
    CONCURRENT_TRANSACTIONS, as before."""
    broker = broker_factory(start=False)
    broker.env = {"KBROKERTEST_DELAY_POINT": f"txn.before_markers:{marker_delay_ms}"}
    broker.start()
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "held", 2)
        pid, epoch = await init_ok(c, "t-held")
        assert await add_partitions(c, "t-held", pid, epoch, {"held": [0]}) == {("held", 0): 0}
        assert (await produce(c, "held", 0, [b"a"], pid=pid, epoch=epoch, seq=0, tid="t-held"))[0] == 0
        end_code, added = await asyncio.gather(end_txn(c, "t-held", pid, epoch, True),
                                               add_partitions(c, "t-held", pid, epoch, {"held": [1]}))
        assert end_code == 0
        assert added == {("held", 1): expect}
        d = await describe(c, "t-held")
        if expect == E.NONE:
            assert (d["state"], d["partitions"]) == ("Ongoing", {("held", 1)})
            assert await list_offset(c, "held", 0, committed=True) == 2  # record + commit marker
        else:
            assert d["state"] == "PrepareCommit"
            await wait_complete(c, "t-held")


# --- TxnOffsetCommit ----------------------------------------------------------------------------------


async def _await_group_coordinator(c: ProtocolClient, group: str) -> None:
    """FindCoordinator(GROUP) until it answers: the first lookup creates and loads __consumer_offsets, so
    COORDINATOR_NOT_AVAILABLE is retried (bounded); any other outcome fails the test. The group
    coordinator is part of kbroker, so it missing is a regression, never a reason to skip."""
    for _ in range(300):
        resp = await c.request(FindCoordinatorRequest(version=3, key=group, key_type=0), 3)
        if resp.error_code != E.COORDINATOR_NOT_AVAILABLE:
            break
        await asyncio.sleep(0.05)
    assert resp.error_code == 0, f"FindCoordinator(GROUP) answered {E(resp.error_code).name}: {resp.error_message}"


@pytest.mark.parametrize(("version", "code"), [(2, E.INVALID_PRODUCER_EPOCH), (3, E.PRODUCER_FENCED)])
async def test_txn_offset_commit_with_stale_epoch(broker, version, code):
    async with ProtocolClient(*_addr(broker)) as c:
        await _await_group_coordinator(c, "g-toc")
        await create_topic(c, "toc")
        pid, old = await init_ok(c, "t-toc")
        _, new = await init_ok(c, "t-toc")
        resp = await c.request(AddOffsetsToTxnRequest(version=2, transactional_id="t-toc", producer_id=pid,
                                                      producer_epoch=new, group_id="g-toc"), 2)
        assert resp.error_code == 0
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        kw = {"generation_id": -1, "member_id": "", "group_instance_id": None} if version >= 3 else {}
        req = TxnOffsetCommitRequest(version=version, transactional_id="t-toc", group_id="g-toc", producer_id=pid,
                                     producer_epoch=old, topics=[T(version=version, name="toc", partitions=[
                                         T.TxnOffsetCommitRequestPartition(version=version, partition_index=0,
                                                                           committed_offset=5,
                                                                           committed_leader_epoch=-1,
                                                                           committed_metadata="")])], **kw)
        resp = await c.request(req, version)
        assert [p.error_code for t in resp.topics for p in t.partitions] == [code]
        # AddOffsetsToTxn with the stale epoch as well.
        resp = await c.request(AddOffsetsToTxnRequest(version=version - 1, transactional_id="t-toc", producer_id=pid,
                                                      producer_epoch=old, group_id="g-toc"), version - 1)
        assert resp.error_code == code


async def _join(c: ProtocolClient, group: str) -> tuple[str, int]:
    """One member joins ``group`` (JoinGroup v5 twice: MEMBER_ID_REQUIRED first) and syncs; (member, generation)."""
    P = JoinGroupRequest.JoinGroupRequestProtocol
    member = ""
    for _ in range(2):
        resp = await c.request(JoinGroupRequest(version=5, group_id=group, session_timeout_ms=30000,
                                                rebalance_timeout_ms=30000, member_id=member, group_instance_id=None,
                                                protocol_type="consumer",
                                                protocols=[P(version=5, name="range", metadata=b"")]), 5)
        member = resp.member_id
        if resp.error_code != E.MEMBER_ID_REQUIRED:
            break
    assert resp.error_code == 0, E(resp.error_code).name
    A = SyncGroupRequest.SyncGroupRequestAssignment
    sync = await c.request(SyncGroupRequest(version=3, group_id=group, generation_id=resp.generation_id,
                                            member_id=member, group_instance_id=None,
                                            assignments=[A(version=3, member_id=member, assignment=b"")]), 3)
    assert sync.error_code == 0
    return member, resp.generation_id


async def _offset_fetch(c: ProtocolClient, group: str, topic: str, stable: bool = True) -> tuple[int, int]:
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    resp = await c.request(OffsetFetchRequest(version=7, group_id=group, topics=[
        T(version=7, name=topic, partition_indexes=[0])], require_stable=stable), 7)
    p = resp.topics[0].partitions[0]
    return (resp.error_code or p.error_code), p.committed_offset


async def test_txn_offset_commit_member_checks_and_pending_offsets(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await _await_group_coordinator(c, "g-tog")
        await create_topic(c, "tog")
        member, generation = await _join(c, "g-tog")
        pid, epoch = await init_ok(c, "t-tog")
        resp = await c.request(AddOffsetsToTxnRequest(version=3, transactional_id="t-tog", producer_id=pid,
                                                      producer_epoch=epoch, group_id="g-tog"), 3)
        assert resp.error_code == 0
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

        async def commit(offset: int, member_id: str, gen: int) -> int:
            req = TxnOffsetCommitRequest(
                version=3, transactional_id="t-tog", group_id="g-tog", producer_id=pid, producer_epoch=epoch,
                generation_id=gen, member_id=member_id, group_instance_id=None,
                topics=[T(version=3, name="tog", partitions=[T.TxnOffsetCommitRequestPartition(
                    version=3, partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata="")])])
            r = await c.request(req, 3)
            return r.topics[0].partitions[0].error_code

        assert await commit(3, member, generation + 1) == E.ILLEGAL_GENERATION
        assert await commit(3, "not-a-member", generation) == E.UNKNOWN_MEMBER_ID
        assert await _offset_fetch(c, "g-tog", "tog") == (0, -1)  # nothing pending, nothing committed
        assert await commit(7, member, generation) == 0
        # Pending until the marker: require_stable answers UNSTABLE_OFFSET_COMMIT, others see nothing yet.
        assert (await _offset_fetch(c, "g-tog", "tog"))[0] == E.UNSTABLE_OFFSET_COMMIT
        assert await _offset_fetch(c, "g-tog", "tog", stable=False) == (0, -1)
        await end_txn_ok(c, "t-tog", pid, epoch, True)
        await wait_complete(c, "t-tog")
        assert await _offset_fetch(c, "g-tog", "tog") == (0, 7)
        # An aborted transaction's offsets vanish.
        resp = await c.request(AddOffsetsToTxnRequest(version=3, transactional_id="t-tog", producer_id=pid,
                                                      producer_epoch=epoch, group_id="g-tog"), 3)
        assert resp.error_code == 0
        assert await commit(9, member, generation) == 0
        await end_txn_ok(c, "t-tog", pid, epoch, False)
        await wait_complete(c, "t-tog")
        assert await _offset_fetch(c, "g-tog", "tog") == (0, 7)


# --- admin views ----------------------------------------------------------------------------------------


async def test_list_describe_transactions_and_describe_producers(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "adm", 2)
        pid_a, epoch_a, _ = await open_txn(c, "t-adm-a", "adm", [b"a1", b"a2"], partition=1)
        pid_b, epoch_b = await init_ok(c, "t-adm-b")
        assert pid_a != pid_b

        resp = await list_txns(c)
        assert resp.error_code == 0 and resp.unknown_state_filters == []
        got = {(s.transactional_id, s.producer_id, s.transaction_state) for s in resp.transaction_states}
        assert {("t-adm-a", pid_a, "Ongoing"), ("t-adm-b", pid_b, "Empty")} <= got
        resp = await list_txns(c, states=["Ongoing", "Bogus"])
        assert resp.unknown_state_filters == ["Bogus"]
        assert [s.transactional_id for s in resp.transaction_states] == ["t-adm-a"]
        resp = await list_txns(c, pids=[pid_b])
        assert [s.transactional_id for s in resp.transaction_states] == ["t-adm-b"]
        resp = await list_txns(c, version=1, duration=10 ** 9)  # nothing has been running for 11 days
        assert resp.transaction_states == []

        d = await describe(c, "t-adm-a")
        assert (d["error"], d["state"], d["pid"], d["epoch"], d["partitions"], d["timeout"]) == (
            0, "Ongoing", pid_a, epoch_a, {("adm", 1)}, 60000)
        assert d["start"] > 0
        d = await describe(c, "t-adm-b")
        assert (d["state"], d["partitions"], d["start"]) == ("Empty", set(), -1)
        assert (await describe(c, "t-nope"))["error"] == E.TRANSACTIONAL_ID_NOT_FOUND

        p = await describe_producers(c, "adm", 1)
        assert p.error_code == 0
        assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.current_txn_start_offset)
                for s in p.active_producers] == [(pid_a, epoch_a, 1, 0)]
        assert (await describe_producers(c, "adm", 0)).active_producers == []
        assert (await describe_producers(c, "adm", 9)).error_code == E.UNKNOWN_TOPIC_OR_PARTITION

        await end_txn_ok(c, "t-adm-a", pid_a, epoch_a, True)
        await wait_complete(c, "t-adm-a")
        p = await describe_producers(c, "adm", 1)
        assert [(s.producer_id, s.current_txn_start_offset) for s in p.active_producers] == [(pid_a, -1)]


# --- read_committed: aborted transactions and the LSO ---------------------------------------------------


async def test_read_committed_fetch_lists_aborted_transactions(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "rc")
        pid, epoch, base = await open_txn(c, "t-rc", "rc", [b"x1", b"x2", b"x3"])
        assert base == 0
        await end_txn_ok(c, "t-rc", pid, epoch, False)
        await wait_complete(c, "t-rc")
        assert await add_partitions(c, "t-rc", pid, epoch, {"rc": [0]}) == {("rc", 0): 0}
        err, base2 = await produce(c, "rc", 0, [b"y1", b"y2"], pid=pid, epoch=epoch, seq=3, tid="t-rc")
        assert (err, base2) == (0, 4)  # after 3 records and the ABORT marker
        await end_txn_ok(c, "t-rc", pid, epoch, True)
        await wait_complete(c, "t-rc")

        f = await fetch(c, "rc", committed=True)
        assert (f.error_code, f.high_watermark, f.last_stable_offset) == (0, 7, 7)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)]
        got = batches_of(f.records)
        assert [(h.base_offset, h.is_control, h.is_transactional) for h, _ in got] == [
            (0, False, True), (3, True, True), (4, False, True), (6, True, True)]
        # Fetching past the aborted range: it is no longer listed.
        f = await fetch(c, "rc", offset=4, committed=True)
        assert f.aborted_transactions == []
        # read_uncommitted gets no aborted list (null) and the same records.
        f = await fetch(c, "rc", committed=False)
        assert not f.aborted_transactions


async def test_list_offsets_and_fetch_stop_at_lso_while_transaction_open(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "lso")
        assert (await produce(c, "lso", 0, [b"plain1", b"plain2"], transactional=False))[0] == 0
        pid, epoch, base = await open_txn(c, "t-lso", "lso", [b"t1", b"t2", b"t3"])
        assert base == 2
        assert await list_offset(c, "lso") == 5
        assert await list_offset(c, "lso", committed=True) == 2
        # A later non-transactional write does not move the LSO past the open transaction.
        assert (await produce(c, "lso", 0, [b"plain3"], transactional=False))[0] == 0
        assert await list_offset(c, "lso") == 6
        assert await list_offset(c, "lso", committed=True) == 2
        f = await fetch(c, "lso", committed=True)
        assert (f.high_watermark, f.last_stable_offset) == (6, 2)
        assert [h.base_offset for h, _ in batches_of(f.records)] == [0]
        await end_txn_ok(c, "t-lso", pid, epoch, True)
        await wait_complete(c, "t-lso")
        assert await list_offset(c, "lso") == 7
        assert await list_offset(c, "lso", committed=True) == 7
        f = await fetch(c, "lso", committed=True)
        assert (f.high_watermark, f.last_stable_offset) == (7, 7)
        assert [h.base_offset for h, _ in batches_of(f.records)] == [0, 2, 5, 6]


# --- kbroker transactions (cli/transactions.py) ---------------------------------------------------


def _cli(broker, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = transactions_cli.main(["--bootstrap-server", broker.bootstrap, *args])
    return code, out.getvalue()


async def test_cli_list_describe_and_abort_hanging_transaction(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "hang")
        pid, epoch, base = await open_txn(c, "t-hang", "hang", [b"h1", b"h2"])
        assert await list_offset(c, "hang", committed=True) == 0

        code, out = await asyncio.to_thread(_cli, broker, "list")
        assert code == 0
        rows = [line.split() for line in out.splitlines()]
        assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert ["t-hang", str(pid), "Ongoing"] in [[r[0], r[2], r[3]] for r in rows[1:]], out

        code, out = await asyncio.to_thread(_cli, broker, "describe", "t-hang")
        assert code == 0 and "Ongoing" in out and "hang-0" in out and str(pid) in out, out

        code, out = await asyncio.to_thread(_cli, broker, "describe-producers", "--topic", "hang", "--partition", "0")
        assert code == 0, out
        assert any(line.split()[:2] == [str(pid), str(epoch)] and line.split()[-1] == str(base)
                   for line in out.splitlines()), out

        # A start offset nobody's transaction begins at: an error, nothing written.
        code, out = await asyncio.to_thread(_cli, broker, "abort", "--topic", "hang", "--partition", "0",
                                            "--start-offset", "1")
        assert code != 0
        assert await list_offset(c, "hang") == 2

        code, out = await asyncio.to_thread(_cli, broker, "abort", "--topic", "hang", "--partition", "0",
                                            "--start-offset", str(base))
        assert code == 0, out
        assert await list_offset(c, "hang") == 3  # the ABORT marker
        assert await list_offset(c, "hang", committed=True) == 3
        f = await fetch(c, "hang")
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, base)]

        code, out = await asyncio.to_thread(_cli, broker, "describe", "t-missing")
        assert code != 0


async def test_cli_abort_with_explicit_producer(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "hang2")
        pid, epoch, _ = await open_txn(c, "t-hang2", "hang2", [b"h"])
        p = await describe_producers(c, "hang2")
        coord_epoch = p.active_producers[0].coordinator_epoch
        code, out = await asyncio.to_thread(
            _cli, broker, "abort", "--topic", "hang2", "--partition", "0", "--producer-id", str(pid),
            "--producer-epoch", str(epoch), "--coordinator-epoch", str(max(coord_epoch, 0)))
        assert code == 0, out
        assert await list_offset(c, "hang2", committed=True) == 2


def test_cli_subprocess_json_and_errors(broker):
    """`python -m cli.transactions` runs standalone; --json gives machine-readable output; the
    options may also follow the subcommand (as `kbroker transactions list --bootstrap-server H:P`)."""
    cmd = [sys.executable, "-m", "cli.transactions", "--bootstrap-server", broker.bootstrap]
    r = subprocess.run([*cmd, "list", "--json"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    r = subprocess.run([sys.executable, "-m", "cli.transactions", "describe", "nope", "--bootstrap-server",
                        broker.bootstrap], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr
    r = subprocess.run([*cmd, "abort", "--topic", "x", "--partition", "0"], cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2  # usage: needs --start-offset or the producer triple
