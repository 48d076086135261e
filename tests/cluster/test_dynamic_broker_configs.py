"""Issue 33 item 1: dynamic broker configs reach every broker they concern (3 real brokers, real etcd).

A cluster-wide default set through broker 1 (``kbroker configs -b <broker 1> alter --entity-type
brokers --entity-default``) is described and enforced by every broker within moments: DescribeConfigs
of each broker shows it as DYNAMIC_DEFAULT_BROKER_CONFIG; min.insync.replicas=2 refuses acks=all on
the RF=1 partitions each broker leads (NOT_ENOUGH_REPLICAS); log.retention.ms reaches the logs of
topics without a retention.ms override on every broker (retention deletes their old segments),
while a topic with an override keeps its data. A per-broker config (resource "2", set through broker
2) applies on broker 2 only, also after another broker restarts; Kafka's per-broker-only configs are
refused on the cluster default (INVALID_REQUEST). Deleting the default brings every broker back.

The slow test: an acks=all produce already waiting on its leader when the cluster default
min.insync.replicas changes through another broker is answered by the new value when its wait ends
(NOT_ENOUGH_REPLICAS_AFTER_APPEND once the ISR shrank below it), as Kafka's DelayedProduce checks
min.insync.replicas when it completes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from protocol.errors import ErrorCode
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import WAIT_S, checked_cluster, list_offset, view, wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fault_cluster import create_topic, produce_request
from tests.helpers.wire import RawConnection, send_request

REPO = Path(__file__).resolve().parents[2]
BROKER, TOPIC = 4, 2
DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT = 2, 3, 5


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    # Retention checked every 0.5 s (read-only in Kafka: set at start), so its effect shows at once.
    with checked_cluster(etcd, tmp_path, 3, **{"log.retention.check.interval.ms": "500"}) as c:
        yield c


def describe(broker: BrokerProcess, rtype: int, name: str, key: str) -> tuple[str | None, int, list[tuple]]:
    """(value, source, synonyms as (name, value, source)) of one config, asked of ``broker``."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(version=4, resources=[R(version=4, resource_type=rtype, resource_name=name,
                                                         configuration_keys=[key])],
                                 include_synonyms=True, include_documentation=False)
    (res,) = send_request(broker.bootstrap, req, 4, timeout=10).results
    assert res.error_code == 0, (res.error_code, res.error_message)
    (c,) = res.configs
    return c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms]


def alter_raw(broker: BrokerProcess, name: str, configs: dict[str, str | None]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs (SET, or DELETE for None) of BROKER resource ``name``, asked of ``broker``."""
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(version=1, validate_only=False, resources=[R(
        version=1, resource_type=BROKER, resource_name=name, configs=[
            R.AlterableConfig(version=1, name=k, config_operation=0 if v is not None else 1, value=v)
            for k, v in configs.items()])])
    (r,) = send_request(broker.bootstrap, req, 1, timeout=60).responses
    return r.error_code, r.error_message


def kbroker(*args: str) -> str:
    env = {**os.environ, "KBROKERTEST_TOOL_TIMEOUT_S": "60"}
    out = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=120,
                         env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout


def leaders(cluster: BrokerCluster, topic: str, partitions: int) -> dict[int, int]:
    """Node id -> the partition of the RF=1 ``topic`` it leads (placement puts one on each broker)."""
    parts = wait_full_isr(cluster, topic, partitions, 1)
    by_node = {info.leader: p for p, info in parts.items()}
    assert sorted(by_node) == [1, 2, 3], parts
    return by_node


def produce(broker: BrokerProcess, topic: str, partition: int, acks: int, values: list[bytes] | None = None, *,
            timeout_ms: int = 10_000) -> int:
    with RawConnection(broker.bootstrap, timeout=timeout_ms / 1000 + 30) as conn:
        req = produce_request(topic, partition, values or [b"v"], acks, timeout_ms)
        return conn.request(req, 9).responses[0].partition_responses[0].error_code


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def test_cluster_default_and_per_broker_configs_reach_the_brokers_they_concern(cluster: BrokerCluster) -> None:
    b = cluster.brokers
    create_topic(cluster.bootstrap, "mi", 3, 1)
    mi = leaders(cluster, "mi", 3)
    for node in (1, 2, 3):
        assert produce(b[node], "mi", mi[node], acks=-1) == ErrorCode.NONE

    # The command, sent to broker 1 only.
    out = kbroker("configs", "-b", b[1].bootstrap, "alter", "--entity-type", "brokers", "--entity-default",
                  "--add-config", "min.insync.replicas=2")
    assert out == "Completed updating default config for brokers in the cluster.\n", out
    for node in (1, 2, 3):
        wait_until(lambda node=node: describe(b[node], BROKER, str(node), "min.insync.replicas") == (
            "2", DYNAMIC_DEFAULT, [("min.insync.replicas", "2", DYNAMIC_DEFAULT), ("min.insync.replicas", "1", DEFAULT)]),
            f"broker {node} describing the cluster default min.insync.replicas=2", timeout=30)
        assert describe(b[node], TOPIC, "mi", "min.insync.replicas")[:2] == ("2", DYNAMIC_DEFAULT)
        # ... and enforcing it: an RF=1 partition cannot satisfy acks=all any more (acks=1 still can).
        assert produce(b[node], "mi", mi[node], acks=-1) == ErrorCode.NOT_ENOUGH_REPLICAS
        assert produce(b[node], "mi", mi[node], acks=1) == ErrorCode.NONE

    # A per-broker config set through broker 2 for broker 2 (librdkafka sends it there): broker 2 only.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(60)
    assert describe(b[2], BROKER, "2", "min.insync.replicas") == ("1", DYNAMIC_BROKER, [
        ("min.insync.replicas", "1", DYNAMIC_BROKER), ("min.insync.replicas", "2", DYNAMIC_DEFAULT),
        ("min.insync.replicas", "1", DEFAULT)])
    assert produce(b[2], "mi", mi[2], acks=-1) == ErrorCode.NONE
    # Broker 3 restarted reads the stored configs: the default, not broker 2's own.
    b[3].restart(timeout=60)
    for node in (1, 3):
        wait_until(lambda node=node: describe(b[node], BROKER, str(node), "min.insync.replicas")[:2] == ("2", DYNAMIC_DEFAULT),
                   f"broker {node} keeping the cluster default", timeout=30)
        assert wait_until(lambda node=node: produce(b[node], "mi", mi[node], acks=-1) == ErrorCode.NOT_ENOUGH_REPLICAS,
                          f"broker {node} refusing acks=all", timeout=30)

    # Per-broker-only configs (Kafka's update mode per-broker) are refused on the cluster default.
    code, msg = alter_raw(b[1], "", {"listener.name.plaintext.ssl.enabled.protocols": "TLSv1.3"})
    assert code == ErrorCode.INVALID_REQUEST and msg == ("Cannot update these configs at default cluster level, "
                                                         "broker id must be specified: "
                                                         "Set(listener.name.plaintext.ssl.enabled.protocols)")

    # log.retention.ms, a broker default of a topic config: the logs of topics without an override
    # on every broker take it (their closed segments are deleted), those with one keep their data.
    create_topic(cluster.bootstrap, "ret", 3, 1, {"segment.bytes": "1024"})
    create_topic(cluster.bootstrap, "keep", 3, 1, {"segment.bytes": "1024", "retention.ms": "86400000"})
    topics = {"ret": leaders(cluster, "ret", 3), "keep": leaders(cluster, "keep", 3)}
    for topic, led in topics.items():
        for node, p in led.items():
            for _ in range(4):  # 4 batches of ~1.2 KB: 4 segments
                assert produce(b[node], topic, p, acks=1, values=[b"x" * 1200]) == ErrorCode.NONE
    assert alter_raw(b[3], "", {"log.retention.ms": "1000"}) == (ErrorCode.NONE, None)
    for node, p in topics["ret"].items():
        wait_until(lambda node=node, p=p: list_offset(b[node], "ret", p, -2) == (0, 3),
                   f"retention on broker {node} deleting the old segments of ret-{p}", timeout=60)
    for node, p in topics["keep"].items():
        assert list_offset(b[node], "keep", p, -2) == (0, 0)
        assert describe(b[node], TOPIC, "keep", "retention.ms")[:2] == ("86400000", 1)
        assert describe(b[node], TOPIC, "ret", "retention.ms")[:2] == ("1000", DYNAMIC_DEFAULT)

    # Deleting the default: every broker back to its own value (broker 2 keeps its per-broker one).
    assert alter_raw(b[2], "", {"min.insync.replicas": None}) == (ErrorCode.NONE, None)
    for node in (1, 3):
        wait_until(lambda node=node: describe(b[node], BROKER, str(node), "min.insync.replicas")[:2] == ("1", DEFAULT),
                   f"broker {node} back to the default", timeout=30)
        assert produce(b[node], "mi", mi[node], acks=-1) == ErrorCode.NONE
    assert describe(b[2], BROKER, "2", "min.insync.replicas")[:2] == ("1", DYNAMIC_BROKER)


@pytest.mark.slow
def test_min_insync_change_reaches_acks_all_waits_in_flight(etcd: EtcdProcess, tmp_path: Path) -> None:
    """An acks=all produce waits on broker 2 (leader of an RF=3 partition) while a follower is paused;
    meanwhile the cluster default min.insync.replicas=3 is set through broker 1. When the paused
    follower leaves the ISR the wait ends: NOT_ENOUGH_REPLICAS_AFTER_APPEND (ISR 2 < 3)."""
    # The paused follower leaves the ISR only after 12 s (its lag and its lease), a wide window
    # for the config change to reach broker 2 first; the test checks that it did.
    with checked_cluster(etcd, tmp_path, 3, **{"replica.lag.time.max.ms": "12000",
                                               "broker.session.timeout.ms": "12000",
                                               "broker.heartbeat.interval.ms": "1000"}) as cluster:
        b = cluster.brokers
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("w", 1, replica_assignment=[[2, 3, 1]])])["w"].result(60)
        wait_full_isr(cluster, "w", 1, 3)
        assert view(cluster, "w")[0].leader == 2
        assert produce(b[2], "w", 0, acks=-1) == ErrorCode.NONE
        result: list[int] = []
        size = log_bytes(b[2], "w", 0)
        os.kill(b[3].proc.pid, signal.SIGSTOP)
        try:
            t = threading.Thread(target=lambda: result.append(produce(b[2], "w", 0, acks=-1, timeout_ms=90_000)),
                                 daemon=True)
            t.start()
            # Appended by the leader, waiting for broker 3 (paused): the change comes while it waits.
            wait_until(lambda: log_bytes(b[2], "w", 0) > size, "the produce appended on broker 2", timeout=30)
            assert alter_raw(b[1], "", {"min.insync.replicas": "3"}) == (ErrorCode.NONE, None)
            wait_until(lambda: describe(b[2], BROKER, "2", "min.insync.replicas")[:2] == ("3", DYNAMIC_DEFAULT),
                       "broker 2 applying min.insync.replicas=3", timeout=10)
            assert not result, "the produce ended before the change reached its leader: the test proves nothing"
            t.join(WAIT_S)
        finally:
            os.kill(b[3].proc.pid, signal.SIGCONT)
        assert result == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
