"""Transaction version 2 (KIP-890 part 2) across brokers, over the raw protocol: the partition
leader of a Produce v12 and the group coordinator of a TxnOffsetCommit v5 add their partitions to
the transaction through the transactional id's coordinator on another broker (AddPartitionsToTxn
v5, not verify-only), and EndTxn v5 commits both. Before, each asked its own broker's coordinator
and got INVALID_TXN_STATE / INVALID_PRODUCER_ID_MAPPING."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.producer import TxnOffsetCommitRequest

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from tests.helpers.coord_cluster import (
    GROUP_TOPIC,
    KEY_GROUP,
    TXN_TOPIC,
    coord_cluster,
    data_topic,
    ensure_internal_topic,
    id_led_by,
    read_all,
    wait_coordinator,
)
from tests.helpers.etcd_proc import EtcdProcess
from tests.integration.test_txn_protocol import init_ok, produce, wait_complete
from tests.integration.test_txn_v2 import end_v5


def _addr(broker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


def test_tv2_implicit_adds_through_a_coordinator_on_another_broker(etcd: EtcdProcess, tmp_path: Path) -> None:
    with coord_cluster(etcd, tmp_path) as cluster:
        ensure_internal_topic(cluster, TXN_TOPIC)
        ensure_internal_topic(cluster, GROUP_TOPIC)
        tid, _ = id_led_by(cluster, TXN_TOPIC, 1, "tv2-tid")
        group, _ = id_led_by(cluster, GROUP_TOPIC, 3, "tv2-group")
        parts = data_topic(cluster, "tv2x", 3)
        p2 = next(p for p, info in parts.items() if info.leader == 2)
        assert wait_coordinator(cluster, group, KEY_GROUP) == 3

        async def run() -> None:
            async with ProtocolClient(*_addr(cluster.brokers[1])) as coord, \
                    ProtocolClient(*_addr(cluster.brokers[2])) as leader, \
                    ProtocolClient(*_addr(cluster.brokers[3])) as group_coord:
                pid, epoch = await init_ok(coord, tid)
                # No AddPartitionsToTxn: broker 2 adds tv2x-p2 through broker 1 (v5).
                code, _ = await produce(leader, "tv2x", p2, [b"a", b"b"], pid=pid, epoch=epoch, seq=0, tid=tid,
                                        version=12)
                assert code == 0, E(code).name
                T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
                req = TxnOffsetCommitRequest(version=5, transactional_id=tid, group_id=group, producer_id=pid,
                                             producer_epoch=epoch, generation_id=-1, member_id="",
                                             group_instance_id=None, topics=[T(version=5, name="tv2x", partitions=[
                                                 T.TxnOffsetCommitRequestPartition(
                                                     version=5, partition_index=p2, committed_offset=7,
                                                     committed_leader_epoch=-1, committed_metadata="")])])
                resp = await group_coord.request(req, 5)
                assert resp.topics[0].partitions[0].error_code == 0, E(resp.topics[0].partitions[0].error_code).name
                assert (await end_v5(coord, tid, pid, epoch, True))[0] == 0
                await wait_complete(coord, tid)
                T2 = OffsetFetchRequest.OffsetFetchRequestTopic
                for _ in range(100):  # the markers reach broker 3's offsets partition asynchronously
                    r = await group_coord.request(OffsetFetchRequest(version=7, group_id=group, require_stable=True,
                                                                     topics=[T2(version=7, name="tv2x",
                                                                                partition_indexes=[p2])]), 7)
                    if r.topics[0].partitions[0].error_code == 0:
                        break
                    await asyncio.sleep(0.1)
                assert r.topics[0].partitions[0].committed_offset == 7

        asyncio.run(run())
        got = read_all(cluster.bootstrap, "tv2x", [p2], 2)
        assert [v for _, v in got[p2]] == [b"a", b"b"]
