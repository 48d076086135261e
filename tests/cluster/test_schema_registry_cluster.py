"""Issue 30 acceptance 1 and 3 in a cluster: three real brokers on a real etcd, each serving the
registry on its own port. The primary is the leader of ``_schemas``-0; the others forward writes
to it and answer reads from their own replica.

Avro, JSON Schema and Protobuf serializers register through one broker's URL, a consumer reads
through another's; every broker answers the same versions. The primary is killed with SIGKILL:
a new leader of ``_schemas`` takes over, registrations go on through the survivors with ids
that keep growing (never one given before), and the killed broker, restarted, catches up.
With ``_schemas`` on one broker only, the others read it from its leader and serve as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from confluent_kafka import KafkaError
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

from tests.helpers.broker_proc import free_port
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import stop_and_check
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fault_cluster import create_topic, try_views, wait_views
from tests.helpers.schema_registry import (
    consume_deserialized,
    http,
    produce_serialized,
    protobuf_classes,
    wait_http,
)

OVERRIDES = {"replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200",
             "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


def _record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [
        {"name": f, "type": "string", "default": ""} for f in fields]})


@contextmanager
def registry_cluster(etcd: EtcdProcess, base: Path, **extra: str) -> Iterator[tuple[BrokerCluster, dict[int, str]]]:
    cluster = BrokerCluster(etcd, base, 3, **{**OVERRIDES, **extra})
    urls = {}
    for node, b in cluster.brokers.items():
        urls[node] = f"http://127.0.0.1:{free_port()}"
        b.overrides["kbroker.schema.registry.listener"] = urls[node]
    try:
        cluster.start()
        yield cluster, urls
    finally:
        problems = stop_and_check(cluster)
    assert not problems, "\n\n".join(problems)


def _primary(cluster: BrokerCluster, exclude: int | None = None) -> int:
    for node, b in cluster.brokers.items():
        if b.running and node != exclude:
            views = wait_views(b.bootstrap, "_schemas", lambda vs: vs.get(0) is not None and vs[0].leader > 0
                               and vs[0].leader != exclude, "a leader of _schemas-0")
            return views[0].leader
    raise AssertionError("no broker running")


def test_registry_across_brokers_and_primary_failover(etcd: EtcdProcess, tmp_path: Path):
    with registry_cluster(etcd, tmp_path) as (cluster, urls):
        create_topic(cluster.bootstrap, "people", 3, 3)
        first = SchemaRegistryClient({"url": urls[2]})
        ser = AvroSerializer(first, _record("Person", "name"))
        values = [{"name": f"p{i}"} for i in range(6)]
        assert produce_serialized(cluster.bootstrap, "people", ser, values) == [None] * 6
        # JSON Schema and Protobuf through a third broker's URL.
        third = SchemaRegistryClient({"url": urls[3]})
        jser = JSONSerializer(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}), third)
        assert produce_serialized(cluster.bootstrap, "nums", jser, [{"n": 1}, {"n": 2}]) == [None, None]
        User = protobuf_classes()["User"]
        pser = ProtobufSerializer(User, third)
        assert produce_serialized(cluster.bootstrap, "pb", pser, [User(name="x")]) == [None]
        # Every broker answers the same registrations (read-your-writes on the forwarding broker,
        # replication to the others).
        expected = http(urls[2], "GET", "/subjects/people-value/versions/latest")[1]
        for url in urls.values():
            wait_http(url, "/subjects/people-value/versions/latest", lambda s, b: s == 200 and b == expected)
            wait_http(url, "/subjects", lambda s, b: s == 200 and sorted(b) == [
                "kbtest/address.proto", "nums-value", "pb-value", "people-value"])
        reader = SchemaRegistryClient({"url": urls[1]})
        got = consume_deserialized(cluster.bootstrap, "people", AvroDeserializer(reader), 6)
        assert sorted(got, key=lambda v: v["name"]) == values  # three partitions: any order
        got = consume_deserialized(cluster.bootstrap, "nums", JSONDeserializer(None, schema_registry_client=reader), 2)
        assert sorted(got, key=lambda v: v["n"]) == [{"n": 1}, {"n": 2}]
        assert consume_deserialized(cluster.bootstrap, "pb", ProtobufDeserializer(User, {}), 1) == [User(name="x")]
        ids_before = {http(urls[1], "GET", f"/subjects/{quote(s, safe='')}/versions/latest")[1]["id"]
                      for s in ("people-value", "nums-value", "pb-value", "kbtest/address.proto")}

        # Kill the primary: another broker becomes leader of _schemas and the registry goes on.
        primary = _primary(cluster)
        cluster.brokers[primary].kill()
        survivors = [n for n in urls if n != primary]
        new_primary = _primary(cluster, exclude=primary)
        assert new_primary in survivors
        for n in survivors:
            status, doc = http(urls[n], "POST", "/subjects/people-value/versions",
                               {"schema": _record("Person", "name", f"f{n}")}, timeout=60)
            assert status == 200, doc
            assert doc["id"] > max(ids_before), (doc, ids_before)
            ids_before.add(doc["id"])
        for n in survivors:
            wait_http(urls[n], "/subjects/people-value/versions", lambda s, b: s == 200 and b == [1, 2, 3])
        # The killed broker comes back and replays what it missed.
        cluster.brokers[primary].start(timeout=60)
        wait_http(urls[primary], "/subjects/people-value/versions", lambda s, b: s == 200 and b == [1, 2, 3])
        status, doc = http(urls[primary], "POST", "/subjects/late-value/versions", {"schema": _record("Late")},
                           timeout=60)
        assert status == 200 and doc["id"] > max(ids_before), doc
        assert try_views(cluster.brokers[primary].bootstrap, "_schemas")[0].isr


def test_brokers_without_a_schemas_replica(etcd: EtcdProcess, tmp_path: Path):
    """_schemas with one replica: the two other brokers have none and read it from its leader as a
    consumer; they answer reads, forward writes and validate produced records all the same."""
    with registry_cluster(etcd, tmp_path, **{"kbroker.schema.registry.topic.replication.factor": "1"}) as (
            cluster, urls):
        status, doc = http(urls[1], "POST", "/subjects/t-value/versions", {"schema": _record("T", "a")}, timeout=60)
        assert status == 200, doc
        holder = _primary(cluster)
        others = [n for n in urls if n != holder]
        for n in others:  # no replica here, yet the registration is served
            wait_http(urls[n], "/subjects/t-value/versions", lambda s, b: s == 200 and b == [1])
            status, doc = http(urls[n], "POST", f"/subjects/t{n}-value/versions", {"schema": _record(f"T{n}")},
                               timeout=60)
            assert status == 200 and doc["version"] == 1, doc
            wait_http(urls[n], f"/subjects/t{n}-value/versions", lambda s, b: s == 200 and b == [1])
        # Validation on a broker without a replica: a topic led by one of the others.
        create_topic(cluster.bootstrap, "t", 3, 1, {"confluent.value.schema.validation": "true"})
        ser = AvroSerializer(SchemaRegistryClient({"url": urls[others[0]]}), _record("T", "a"))
        assert produce_serialized(cluster.bootstrap, "t", ser, [{"a": str(i)} for i in range(6)]) == [None] * 6
        errors = produce_serialized(cluster.bootstrap, "t", None, [b"raw"] * 3)
        assert all(e is not None and e.code() == KafkaError.INVALID_RECORD for e in errors), errors
