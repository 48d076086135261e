"""What the nemeses need to know about the cluster, and the admin requests they send, over the wire.

Every question goes to the live brokers in turn (a broker that is down, paused or cut off is
skipped): partition leaders and replicas (Metadata v12), the controller (Metadata's controller
id), the coordinator of a transactional id or a group (FindCoordinator v3), reassignments
(AlterPartitionReassignments / ListPartitionReassignments v0) and preferred-leader elections
(ElectLeaders v1). ``wait_healthy`` waits until every partition of the given topics has a leader
and a full ISR as every running broker sees it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from tests.helpers.cluster_state import PartitionInfo
from tests.helpers.wire import send_request

from .cluster import CampaignCluster

T = TypeVar("T")
KEY_GROUP, KEY_TXN = 0, 1
ASK_TIMEOUT_S = 5.0


class NoAnswer(RuntimeError):
    """No running broker answered."""


def ask(cluster: CampaignCluster, fn: Callable[[str], T], *, shuffle: bool = True) -> T:
    brokers = [b for b in cluster.brokers.values() if b.running]
    if shuffle:
        random.shuffle(brokers)
    last: Exception | None = None
    for b in brokers:
        try:
            return fn(b.bootstrap)
        except Exception as e:  # noqa: BLE001 - paused, cut off, starting: the next one
            last = e
    raise NoAnswer(f"no broker answered ({last!r})")


def _metadata(bootstrap: str, topics: list[str] | None) -> Any:
    Tp = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(version=12, topics=None if topics is None else [Tp(version=12, topic_id=None, name=t)
                                                                          for t in topics],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return send_request(bootstrap, req, 12, timeout=ASK_TIMEOUT_S)


def partitions(cluster: CampaignCluster, topics: list[str], via: str | None = None) -> dict[tuple[str, int], PartitionInfo]:
    def one(bootstrap: str) -> dict[tuple[str, int], PartitionInfo]:
        out = {}
        for t in _metadata(bootstrap, topics).topics:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = PartitionInfo(
                    p.partition_index, p.error_code, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                    tuple(p.isr_nodes), tuple(p.offline_replicas))
        return out
    return one(via) if via else ask(cluster, one)


def controller(cluster: CampaignCluster) -> int:
    return ask(cluster, lambda b: _metadata(b, []).controller_id)


def coordinator(cluster: CampaignCluster, key: str, key_type: int) -> int:
    def one(bootstrap: str) -> int:
        resp = send_request(bootstrap, FindCoordinatorRequest(version=3, key=key, key_type=key_type), 3,
                            timeout=ASK_TIMEOUT_S)
        if resp.error_code != 0:
            raise RuntimeError(f"FindCoordinator {key}: error {resp.error_code}")
        return resp.node_id
    return ask(cluster, one)


def reassign(cluster: CampaignCluster, topic: str, partition: int, replicas: list[int] | None,
             timeout_ms: int = 30000) -> int:
    """Start (or with None cancel) a reassignment; the partition's error code."""
    R = AlterPartitionReassignmentsRequest.ReassignableTopic
    req = AlterPartitionReassignmentsRequest(version=0, timeout_ms=timeout_ms, topics=[R(
        version=0, name=topic, partitions=[R.ReassignablePartition(version=0, partition_index=partition,
                                                                   replicas=replicas)])])

    def one(bootstrap: str) -> int:
        resp = send_request(bootstrap, req, 0, timeout=timeout_ms / 1000 + 5)
        if resp.error_code:
            return resp.error_code
        return resp.responses[0].partitions[0].error_code
    return ask(cluster, one)


def reassignment_done(cluster: CampaignCluster, topic: str, partition: int) -> bool:
    Tp = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
    req = ListPartitionReassignmentsRequest(version=0, timeout_ms=10000, topics=[
        Tp(version=0, name=topic, partition_indexes=[partition])])

    def one(bootstrap: str) -> bool:
        resp = send_request(bootstrap, req, 0, timeout=15)
        if resp.error_code:
            raise RuntimeError(f"ListPartitionReassignments: error {resp.error_code}")
        return not any(t.partitions for t in resp.topics)
    return ask(cluster, one)


def elect_preferred(cluster: CampaignCluster, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Preferred-leader election; error code per partition (0 elected, 84 not needed)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    Tp = ElectLeadersRequest.TopicPartitions
    req = ElectLeadersRequest(version=1, election_type=0, timeout_ms=30000, topic_partitions=[
        Tp(version=1, topic=t, partitions=ps) for t, ps in by_topic.items()])

    def one(bootstrap: str) -> dict[tuple[str, int], int]:
        resp = send_request(bootstrap, req, 1, timeout=40)
        return {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
                for p in r.partition_result}
    return ask(cluster, one)


def healthy(cluster: CampaignCluster, topics: list[str]) -> bool:
    """Every partition of ``topics`` led, with its whole replica set in the ISR, the same as every
    running broker sees it (and no broker down)."""
    if not all(b.running for b in cluster.brokers.values()):
        return False
    views = [partitions(cluster, topics, via=b.bootstrap) for b in cluster.brokers.values()]
    first = views[0]
    if len({t for t, _ in first}) != len(topics):
        return False
    for v in views:
        if v.keys() != first.keys():
            return False
        for key, info in v.items():
            ref = first[key]
            if info.leader < 0 or set(info.isr) != set(info.replicas) or (info.leader, info.epoch) != (
                    ref.leader, ref.epoch) or set(info.isr) != set(ref.isr):
                return False
    return True


def wait_healthy(cluster: CampaignCluster, topics: list[str], timeout: float) -> float | None:
    """Seconds it took, or None if the cluster was not healthy within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if healthy(cluster, topics):
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - a broker not answering yet
            pass
        time.sleep(0.5)
    return None
