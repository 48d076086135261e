"""What a replicated test cluster looks like from outside: partition leaders, ISRs, high watermarks.

Used by the replication tests (tests/cluster/test_replicated_clients.py, test_isr.py,
test_restarts.py) and benchmarks/cluster_bench.py. Everything here asks the brokers over the wire
(Metadata v12, ListOffsets v7 with kafka-python's structs) and tolerates a broker that is down or
still starting: waits retry until their condition holds or a generous deadline passes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.replica_compare import assert_replicas_identical, partition_dir
from tests.helpers.wire import send_request

T = TypeVar("T")
WAIT_S = 90.0  # generous: 2 shared cores; every wait returns as soon as its condition holds


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    error_code: int
    leader: int
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


def wait_until(cond: Callable[[], T], what: str, timeout: float = WAIT_S, interval: float = 0.1) -> T:
    """The first truthy value of ``cond()``; exceptions (a broker down or starting) count as "not yet"."""
    deadline = time.monotonic() + timeout
    last_error = "none"
    while True:
        try:
            value = cond()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - any failure to ask is "not yet"
            # repr only: a kept traceback would pin the callers' frames (and their clients).
            last_error = repr(e)
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last error: {last_error})")
        time.sleep(interval)


def topic_partitions(broker: BrokerProcess, topic: str) -> dict[int, PartitionInfo]:
    """The broker's view of the topic's partitions (empty if it does not know the topic yet)."""
    T_ = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(version=12, topics=[T_(version=12, topic_id=None, name=topic)],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    (t,) = send_request(broker.bootstrap, req, 12, timeout=10).topics
    if t.error_code != 0:
        return {}
    return {p.partition_index: PartitionInfo(p.partition_index, p.error_code, p.leader_id, p.leader_epoch,
                                             tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.offline_replicas))
            for p in t.partitions}


def live(cluster: BrokerCluster) -> list[BrokerProcess]:
    return [b for b in cluster.brokers.values() if b.running]


def view(cluster: BrokerCluster, topic: str, via: BrokerProcess | None = None) -> dict[int, PartitionInfo]:
    """The partitions as the first live broker that answers sees them (``via`` first if given)."""
    order = ([via] if via is not None else []) + live(cluster)
    last = "none"
    for b in order:
        try:
            return topic_partitions(b, topic)
        except Exception as e:  # noqa: BLE001 - try the next broker
            # repr only: a kept traceback would pin the callers' frames (and their clients).
            last = repr(e)
    raise AssertionError(f"no live broker answered Metadata for {topic} (last error: {last})")


def wait_full_isr(cluster: BrokerCluster, topic: str, partitions: int, rf: int,
                  timeout: float = WAIT_S) -> dict[int, PartitionInfo]:
    """Every partition has a leader and all ``rf`` replicas in its ISR, as every live broker sees it."""
    def ok() -> dict[int, PartitionInfo] | None:
        views = [topic_partitions(b, topic) for b in live(cluster)]
        first = views[0]
        if len(first) != partitions:
            return None
        for v in views:
            for p, info in v.items():
                if info.leader < 0 or len(info.isr) != rf or sorted(info.isr) != sorted(first[p].isr):
                    return None
                if (info.leader, info.epoch) != (first[p].leader, first[p].epoch):
                    return None
        return first
    return wait_until(ok, f"{topic}: {partitions} partitions with a leader and a full ISR of {rf}", timeout)


def list_offset(broker: BrokerProcess, topic: str, partition: int, timestamp: int = -1) -> tuple[int, int]:
    """(error code, offset) of ListOffsets v7 (replica -1, read_uncommitted): LATEST = the high watermark."""
    T_ = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(version=7, replica_id=-1, isolation_level=0, topics=[
        T_(version=7, name=topic, partitions=[T_.ListOffsetsPartition(
            version=7, partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
    p = send_request(broker.bootstrap, req, 7, timeout=10).topics[0].partitions[0]
    return p.error_code, p.offset


def high_watermarks(cluster: BrokerCluster, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Each partition's high watermark, asked of its current leader."""
    parts = view(cluster, topic)
    out = {}
    for p in partitions:
        err, hw = list_offset(cluster.brokers[parts[p].leader], topic, p)
        assert err == 0, f"ListOffsets {topic}-{p} on leader {parts[p].leader}: error {err}"
        out[p] = hw
    return out


def assert_partition_replicas_identical(cluster: BrokerCluster, topic: str, partition: int,
                                        nodes: Iterable[int] | None = None) -> tuple[int, int]:
    """replica_compare of one partition on ``nodes`` (default: its replicas) below the leader's high
    watermark; returns (high watermark, batches compared)."""
    info = view(cluster, topic)[partition]
    err, hw = list_offset(cluster.brokers[info.leader], topic, partition)
    assert err == 0, f"ListOffsets {topic}-{partition}: error {err}"
    reps = {f"broker {n}": partition_dir(cluster.brokers[n].data_dir, topic, partition)
            for n in (info.replicas if nodes is None else nodes)}
    return hw, assert_replicas_identical(reps, hw)


def registered_brokers(broker: BrokerProcess) -> list[int]:
    """Node ids the broker reports in DescribeCluster: the brokers whose etcd registration it sees."""
    from kafka.protocol.admin import DescribeClusterRequest

    req = DescribeClusterRequest(version=0, include_cluster_authorized_operations=False)
    return sorted(b.broker_id for b in send_request(broker.bootstrap, req, 0, timeout=10).brokers)


def produce_raw(broker: BrokerProcess, topic: str, partition: int, batch: bytes, *, acks: int,
                timeout_ms: int = 10_000) -> tuple[int, int]:
    """One batch in a Produce v9 request: (error code, base offset) of the answer."""
    from kafka.protocol.producer import ProduceRequest

    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=9, transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        P(version=9, name=topic, partition_data=[P.PartitionProduceData(version=9, index=partition, records=batch)])])
    part = send_request(broker.bootstrap, req, 9, timeout=timeout_ms / 1000 + 10).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def init_producer_id(broker: BrokerProcess) -> tuple[int, int, int]:
    """InitProducerId v4 for an idempotent (non-transactional) producer: (error code, producer id, epoch)."""
    from kafka.protocol.producer import InitProducerIdRequest

    req = InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=60_000,
                                producer_id=-1, producer_epoch=-1)
    resp = send_request(broker.bootstrap, req, 4, timeout=30)
    return resp.error_code, resp.producer_id, resp.producer_epoch


def start_when_lease_gone(broker: BrokerProcess, timeout: float = WAIT_S) -> None:
    """Start a broker that was killed: until etcd expires its old lease, a restart with the same
    node.id is refused (the process exits), so try again until it stays up."""
    from tests.helpers.broker_proc import BrokerError

    def attempt() -> bool:
        try:
            broker.start(timeout=60)
            return True
        except BrokerError:
            return False
    wait_until(attempt, f"broker {broker.bootstrap} to start again (old lease gone)", timeout, interval=0.5)


TRACEBACK = "Traceback (most recent call last)"


def stop_and_check(cluster: BrokerCluster) -> list[str]:
    """Stop every broker (SIGTERM, SIGKILL if it hangs) and say what went wrong, as tests/conftest.py
    does for single brokers: a non-zero exit on SIGTERM, or a Python traceback in a broker's log."""
    problems = []
    for node, b in cluster.brokers.items():
        was_running = b.running
        try:
            code = b.stop()
        except Exception as e:  # noqa: BLE001 - hung on SIGTERM: killed, reported
            code = f"{e}"
        finally:
            b.kill()
        if was_running and code != 0:
            problems.append(f"broker {node} exited with {code} on SIGTERM\n{b.log_tail()}")
        text = b.log_text()
        if TRACEBACK in text:
            lines = text.splitlines()
            start = next(i for i, line in enumerate(lines) if TRACEBACK in line)
            problems.append(f"broker {node} logged a traceback ({b.log_path}):\n"
                            + "\n".join(lines[max(0, start - 3): start + 30]))
    return problems


@contextlib.contextmanager
def checked_cluster(etcd: EtcdProcess, path: Path, brokers: int = 3, env: dict[int, dict[str, str]] | None = None,
                    **overrides: str) -> Iterator[BrokerCluster]:
    """A started cluster for a test; ``env`` adds environment variables per node id (fault injection).
    Afterwards every broker is stopped, and when the test itself passed, stop_and_check must find
    nothing wrong (a non-zero exit on SIGTERM, a traceback in a log)."""
    c = BrokerCluster(etcd, path, brokers, **overrides)
    for node, extra in (env or {}).items():
        c.brokers[node].env.update(extra)
    try:
        c.start()
        yield c
    finally:
        problems = stop_and_check(c)
    assert not problems, "\n\n".join(problems)
