"""Issue 15, acceptance 3: a transaction marker from a coordinator that lost its leadership is fenced.

Raw protocol (protocol/client.py ProtocolClient) against three real brokers on a real etcd. A
transactional id whose ``__transaction_state`` partition is led by broker C, one RF=3 data
partition led by broker L != C:

1. transaction 1 is committed through C: its marker on L carries C's coordinator epoch E1
   (DescribeProducers on L shows it);
2. C is stopped (SIGTERM: its controlled shutdown hands the partition to another ISR member at
   leader epoch + 1), so the coordinator moves to C2 at coordinator epoch E2 > E1;
3. transaction 2 is committed through C2 (the partition now knows E2 for this producer) and
   transaction 3 is left open on L;
4. a WriteTxnMarkers v1 (COMMIT, then ABORT) for that producer with the OLD epoch E1, sent straight
   to L, is answered TRANSACTION_COORDINATOR_FENCED, and the partition is unchanged: high
   watermark, last stable offset (ListOffsets read_committed), the open transaction in
   DescribeProducers and every batch of the log (raw read_uncommitted Fetch, control batches
   included) are byte for byte what they were.

Kafka fences a marker by the coordinator epoch the partition last saw for the producer
(ProducerStateEntry.coordinatorEpoch, set by markers), which is why step 3 commits once under E2
first. Finally the open transaction is committed through C2 and read_committed sees it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.protocol.producer import WriteTxnMarkersRequest

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.cluster_state import view, wait_until
from tests.helpers.coord_cluster import (
    KEY_TXN,
    TXN_TOPIC,
    coord_cluster,
    data_topic,
    ensure_internal_topic,
    id_led_by,
    wait_coordinator,
)
from tests.helpers.etcd_proc import EtcdProcess
from tests.integration.test_txn_protocol import (
    add_partitions,
    batches_of,
    describe_producers,
    end_txn,
    fetch,
    init_ok,
    list_offset,
    produce,
)

TOPIC = "fenced-markers"


def _client(b: BrokerProcess) -> ProtocolClient:
    host, port = b.bootstrap.rsplit(":", 1)
    return ProtocolClient(host, int(port))


async def _commit(coord: BrokerProcess, leader: BrokerProcess, tid: str, pid: int, epoch: int, seq: int,
                  values: list[bytes], *, end: bool = True) -> None:
    """AddPartitionsToTxn + a transactional batch on the leader + (``end``) EndTxn commit, waiting for
    the marker: the partition's last stable offset reaches its high watermark."""
    async with _client(coord) as c, _client(leader) as lc:
        for _ in range(500):  # CONCURRENT_TRANSACTIONS until the previous one's Complete state is written
            added = await add_partitions(c, tid, pid, epoch, {TOPIC: [0]})
            if added != {(TOPIC, 0): E.CONCURRENT_TRANSACTIONS}:
                break
            await asyncio.sleep(0.02)
        assert added == {(TOPIC, 0): 0}, added
        err, _ = await produce(lc, TOPIC, 0, values, pid=pid, epoch=epoch, seq=seq, tid=tid)
        assert err == 0, E(err).name
        if not end:
            return
        for _ in range(500):
            code = await end_txn(c, tid, pid, epoch, True)
            if code != E.CONCURRENT_TRANSACTIONS:
                break
            await asyncio.sleep(0.02)
        assert code == 0, E(code).name
        for _ in range(3000):
            if await list_offset(lc, TOPIC, committed=True) == await list_offset(lc, TOPIC):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the commit marker did not reach the partition")


async def _partition_state(leader: BrokerProcess) -> tuple[int, int, list, bytes]:
    async with _client(leader) as lc:
        hw = await list_offset(lc, TOPIC)
        lso = await list_offset(lc, TOPIC, committed=True)
        p = await describe_producers(lc, TOPIC)
        producers = sorted((a.producer_id, a.producer_epoch, a.last_sequence, a.coordinator_epoch,
                            a.current_txn_start_offset) for a in p.active_producers)
        f = await fetch(lc, TOPIC, committed=False)
        return hw, lso, producers, bytes(f.records or b"")


async def _stale_marker(leader: BrokerProcess, pid: int, epoch: int, coordinator_epoch: int, commit: bool) -> int:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    req = WriteTxnMarkersRequest(version=1, markers=[M(
        version=1, producer_id=pid, producer_epoch=epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch,
        topics=[M.WritableTxnMarkerTopic(version=1, name=TOPIC, partition_indexes=[0])])])
    async with _client(leader) as lc:
        resp = await lc.request(req, 1)
    return resp.markers[0].topics[0].partitions[0].error_code


async def test_marker_with_old_coordinator_epoch_is_fenced(etcd: EtcdProcess, tmp_path: Path) -> None:
    with coord_cluster(etcd, tmp_path) as cluster:
        ensure_internal_topic(cluster, TXN_TOPIC)
        leader_node = data_topic(cluster, TOPIC, 1, min_isr=1)[0].leader
        coord_node = next(n for n in cluster.brokers if n != leader_node)
        tid, txn_partition = id_led_by(cluster, TXN_TOPIC, coord_node, "fence-tid")
        assert wait_coordinator(cluster, tid, KEY_TXN) == coord_node
        leader, coord = cluster.brokers[leader_node], cluster.brokers[coord_node]
        first_epoch = view(cluster, TXN_TOPIC)[txn_partition].epoch

        async with _client(coord) as c:
            pid, epoch = await init_ok(c, tid)
        await _commit(coord, leader, tid, pid, epoch, 0, [b"t1-a", b"t1-b"])
        _, _, producers, _ = await _partition_state(leader)
        assert [(p[0], p[3]) for p in producers] == [(pid, first_epoch)], producers

        # The coordinator moves: C's controlled shutdown hands its leaderships over (epoch + 1).
        assert coord.stop() == 0
        new_node = wait_coordinator(cluster, tid, KEY_TXN, not_node=coord_node)
        info = wait_until(lambda: (i := view(cluster, TXN_TOPIC)[txn_partition]).leader == new_node and i,
                          f"{TXN_TOPIC}-{txn_partition} led by node {new_node}")
        new_epoch = info.epoch
        assert new_epoch > first_epoch
        new_coord = cluster.brokers[new_node]

        await _commit(new_coord, leader, tid, pid, epoch, 2, [b"t2-a"])
        await _commit(new_coord, leader, tid, pid, epoch, 3, [b"t3-open-a", b"t3-open-b"], end=False)
        before = await _partition_state(leader)
        hw, lso, producers, _ = before
        assert [(p[0], p[3]) for p in producers] == [(pid, new_epoch)], producers
        assert lso < hw, (lso, hw)  # transaction 3 is open

        for commit in (True, False):
            code = await _stale_marker(leader, pid, epoch, first_epoch, commit)
            assert code == E.TRANSACTION_COORDINATOR_FENCED, E(code).name
        after = await _partition_state(leader)
        assert after[:3] == before[:3]
        assert after[3] == before[3]
        assert sum(h.is_control for h, _ in batches_of(after[3])) == 2  # transactions 1 and 2 only

        # The current coordinator still ends the transaction normally.
        async with _client(new_coord) as c:
            assert await end_txn(c, tid, pid, epoch, True) == 0
        async with _client(leader) as lc:
            for _ in range(3000):
                if await list_offset(lc, TOPIC, committed=True) == await list_offset(lc, TOPIC):
                    break
                await asyncio.sleep(0.02)
            f = await fetch(lc, TOPIC, committed=True)
        values = [r.value for h, recs in batches_of(f.records) if not h.is_control for r in recs]
        assert values == [b"t1-a", b"t1-b", b"t2-a", b"t3-open-a", b"t3-open-b"]
        print(f"\ncoordinator of {tid} moved from node {coord_node} (epoch {first_epoch}) to node {new_node} "
              f"(epoch {new_epoch}); stale markers to node {leader_node} fenced, partition unchanged")
