"""The produce, fetch, transaction and group handlers driven in process: a real broker in the test's
event loop (real logs, replica manager, coordinators, metadata store on a temp dir; no listener
traffic), each request encoded and decoded as on the wire (tests/helpers/inproc.py). What handlers
reach is only the ``BrokerServices`` they are handed, so this is the same code a client reaches.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.protocol.consumer import (
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from protocol.errors import ErrorCode as E
from tests.helpers.inproc import InProcessClient, in_process_broker
from tests.integration.test_txn_protocol import (
    add_partitions,
    batches_of,
    create_topic,
    end_txn_ok,
    fetch,
    init_ok,
    list_offset,
    open_txn,
    produce,
    wait_complete,
)


@pytest.fixture
async def client(tmp_path: Path):  # noqa: ANN201
    async with in_process_broker(tmp_path / "data") as broker:
        yield InProcessClient(broker)


async def test_produce_then_fetch_reads_the_records_back(client) -> None:
    await create_topic(client, "plain", 2)
    err, base = await produce(client, "plain", 1, [b"a", b"b", b"c"], transactional=False)
    assert (err, base) == (0, 0)
    err, base = await produce(client, "plain", 1, [b"d"], transactional=False)
    assert (err, base) == (0, 3)
    part = await fetch(client, "plain", 1, committed=False)
    assert part.error_code == 0 and part.high_watermark == 4
    assert [r.value for _, recs in batches_of(part.records) for r in recs] == [b"a", b"b", b"c", b"d"]
    assert await list_offset(client, "plain", 1) == 4
    err, _ = await produce(client, "plain", 7, [b"x"], transactional=False)
    assert err == E.UNKNOWN_TOPIC_OR_PARTITION


async def test_committed_and_aborted_transactions_and_the_kip890_check(client) -> None:
    await create_topic(client, "txn", 1)
    pid, epoch, base = await open_txn(client, "tx-1", "txn", [b"one", b"two"])
    assert base == 0
    assert await list_offset(client, "txn", committed=True) == 0  # open: the LSO holds at its start
    await end_txn_ok(client, "tx-1", pid, epoch, commit=True)
    await wait_complete(client, "tx-1")
    assert await list_offset(client, "txn", committed=True) == 3
    # The next transaction is aborted: read_committed answers list it, its records stay in the log.
    assert await add_partitions(client, "tx-1", pid, epoch, {"txn": [0]}) == {("txn", 0): 0}
    err, base = await produce(client, "txn", 0, [b"gone"], pid=pid, epoch=epoch, seq=2, tid="tx-1")
    assert (err, base) == (0, 3)
    await end_txn_ok(client, "tx-1", pid, epoch, commit=False)
    await wait_complete(client, "tx-1")
    part = await fetch(client, "txn", committed=True)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 3)]
    # KIP-890: a transactional batch for a partition not added to the transaction is refused.
    pid2, epoch2 = await init_ok(client, "tx-2")
    err, _ = await produce(client, "txn", 0, [b"stray"], pid=pid2, epoch=epoch2, seq=0, tid="tx-2")
    assert err == E.INVALID_TXN_STATE
    assert await list_offset(client, "txn") == 5  # nothing of it was appended


async def test_a_group_joins_syncs_and_commits_offsets(client) -> None:
    await create_topic(client, "g-topic", 1)
    found = await client.request(FindCoordinatorRequest(version=3, key="g1", key_type=0), 3)
    assert found.error_code == 0 and found.node_id == 1
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    join = await client.request(JoinGroupRequest(
        version=4, group_id="g1", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=[proto(version=4, name="range", metadata=b"m")]), 4)
    if join.error_code == E.MEMBER_ID_REQUIRED:  # v4: join again with the id the coordinator chose
        join = await client.request(JoinGroupRequest(
            version=4, group_id="g1", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=join.member_id,
            protocol_type="consumer", protocols=[proto(version=4, name="range", metadata=b"m")]), 4)
    assert join.error_code == 0 and join.leader == join.member_id
    A = SyncGroupRequest.SyncGroupRequestAssignment
    sync = await client.request(SyncGroupRequest(
        version=3, group_id="g1", generation_id=join.generation_id, member_id=join.member_id,
        assignments=[A(version=3, member_id=join.member_id, assignment=b"assigned")]), 3)
    assert sync.error_code == 0 and sync.assignment == b"assigned"
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = await client.request(OffsetCommitRequest(
        version=7, group_id="g1", generation_id_or_member_epoch=join.generation_id, member_id=join.member_id,
        group_instance_id=None, topics=[T(version=7, name="g-topic", partitions=[T.OffsetCommitRequestPartition(
            version=7, partition_index=0, committed_offset=42, committed_leader_epoch=-1,
            committed_metadata="m")])]), 7)
    assert commit.topics[0].partitions[0].error_code == 0
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    got = await client.request(OffsetFetchRequest(version=7, group_id="g1", topics=[
        F(version=7, name="g-topic", partition_indexes=[0])], require_stable=True), 7)
    assert got.topics[0].partitions[0].committed_offset == 42
