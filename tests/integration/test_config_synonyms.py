"""Issue 33 item 3: config synonyms in DescribeConfigs (include_synonyms) as Kafka reports them.

One broker started with a properties file (``--config``) and ``--override``s (both STATIC_BROKER_CONFIG),
then given a cluster-wide dynamic default (resource "", DYNAMIC_DEFAULT_BROKER_CONFIG) and per-broker
dynamic values (resource "1", DYNAMIC_BROKER_CONFIG). Checked with raw DescribeConfigs v4 requests
(the full ordered synonym lists) and with confluent-kafka's describe_configs (the source of each
entry and the names of its synonyms), against Kafka's ConfigHelper / DynamicBrokerConfig:

* a broker config lists its spellings' values layer by layer, per-broker dynamic, cluster default,
  static, default, from its own name on (log.retention.hours leaves out log.retention.ms);
* the cluster-default resource "" lists only DYNAMIC_DEFAULT_BROKER_CONFIG synonyms;
* a listener-prefixed config lists its own values, then its base name's (and is reported read-only,
  as Kafka does);
* a topic config lists its override (DYNAMIC_TOPIC_CONFIG) first, then the synonyms of the broker
  config that supplies its default, from that config's name on: retention.ms inherited from a static
  log.retention.hours alone has none and its source is DEFAULT_CONFIG (segment.ms and flush.ms with
  nothing set likewise); the entry's source is its first synonym's.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from tests.helpers.wire import send_request

TOPIC_CFG, DYN_BROKER, DYN_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
BROKER, TOPIC = 4, 2


def _describe_raw(broker, rtype: int, name: str, keys: list[str]) -> dict[str, tuple]:
    """name -> (value, source, read_only, [(synonym name, value, source), ...])."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(version=4, resources=[R(version=4, resource_type=rtype, resource_name=name,
                                                         configuration_keys=keys)],
                                 include_synonyms=True, include_documentation=False)
    (res,) = send_request(broker.bootstrap, req, 4).results
    assert res.error_code == 0, res.error_message
    return {c.name: (c.value, c.config_source, c.read_only, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in res.configs}


def _alter_raw(broker, name: str, configs: dict[str, str]) -> None:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(version=1, validate_only=False, resources=[R(
        version=1, resource_type=BROKER, resource_name=name, configs=[
            R.AlterableConfig(version=1, name=k, config_operation=0, value=v) for k, v in configs.items()])])
    (r,) = send_request(broker.bootstrap, req, 1).responses
    assert r.error_code == 0, r.error_message


def test_synonyms_in_kafkas_order(broker_factory, tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("message.max.bytes=200000\nssl.enabled.protocols=TLSv1.2,TLSv1.3\n"
                     "listener.name.plaintext.ssl.cipher.suites=TLS_AES_128_GCM_SHA256\n")
    kb = broker_factory({"log.retention.hours": "2"}, config_file=props)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    admin.create_topics([NewTopic("syn", 1, 1), NewTopic("own", 1, 1, config={"max.message.bytes": "5000"})]
                        )["own"].result(30)

    # Only static values yet. retention.ms comes from log.retention.hours alone: Kafka lists the
    # synonyms of log.retention.ms from that name on, so none, and says DEFAULT_CONFIG.
    t = _describe_raw(kb, TOPIC, "syn", ["retention.ms", "segment.ms", "flush.ms", "max.message.bytes"])
    assert t["retention.ms"][:2] == ("7200000", DEFAULT) and t["retention.ms"][3] == []
    assert t["segment.ms"][:2] == ("604800000", DEFAULT) and t["segment.ms"][3] == []
    assert t["flush.ms"][1] == DEFAULT and t["flush.ms"][3] == []
    assert t["max.message.bytes"] == ("200000", STATIC, False, [("message.max.bytes", "200000", STATIC),
                                                                ("message.max.bytes", "1048588", DEFAULT)])
    res = ConfigResource(ResourceType.TOPIC, "syn")
    entries = admin.describe_configs([res])[res].result(30)
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["retention.ms"].synonyms == {}
    assert entries["max.message.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    _alter_raw(kb, "", {"message.max.bytes": "300000", "log.retention.ms": "5400000"})
    _alter_raw(kb, "1", {"message.max.bytes": "400000", "log.retention.ms": "3600000",
                         "listener.name.plaintext.ssl.enabled.protocols": "TLSv1.3"})

    b = _describe_raw(kb, BROKER, "1", ["message.max.bytes", "log.retention.ms", "log.retention.hours",
                                        "listener.name.plaintext.ssl.enabled.protocols",
                                        "listener.name.plaintext.ssl.cipher.suites"])
    assert b["message.max.bytes"] == ("400000", DYN_BROKER, False, [
        ("message.max.bytes", "400000", DYN_BROKER), ("message.max.bytes", "300000", DYN_DEFAULT),
        ("message.max.bytes", "200000", STATIC), ("message.max.bytes", "1048588", DEFAULT)])
    assert b["log.retention.ms"] == ("3600000", DYN_BROKER, False, [
        ("log.retention.ms", "3600000", DYN_BROKER), ("log.retention.ms", "5400000", DYN_DEFAULT),
        ("log.retention.hours", "2", STATIC), ("log.retention.hours", "168", DEFAULT)])
    assert b["log.retention.hours"] == ("2", STATIC, True, [("log.retention.hours", "2", STATIC),
                                                            ("log.retention.hours", "168", DEFAULT)])
    assert b["listener.name.plaintext.ssl.enabled.protocols"] == ("TLSv1.3", DYN_BROKER, True, [
        ("listener.name.plaintext.ssl.enabled.protocols", "TLSv1.3", DYN_BROKER),
        ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", STATIC), ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", DEFAULT)])
    suites = b["listener.name.plaintext.ssl.cipher.suites"]
    assert suites[:2] == ("TLS_AES_128_GCM_SHA256", STATIC)
    assert suites[3][0] == ("listener.name.plaintext.ssl.cipher.suites", "TLS_AES_128_GCM_SHA256", STATIC)

    # The cluster default resource: its own layer only.
    d = _describe_raw(kb, BROKER, "", ["message.max.bytes", "log.retention.ms"])
    assert d == {"message.max.bytes": ("300000", DYN_DEFAULT, False, [("message.max.bytes", "300000", DYN_DEFAULT)]),
                 "log.retention.ms": ("5400000", DYN_DEFAULT, False, [("log.retention.ms", "5400000", DYN_DEFAULT)])}

    # Topics: the override first, then the broker synonyms.
    t = _describe_raw(kb, TOPIC, "own", ["max.message.bytes", "retention.ms"])
    assert t["max.message.bytes"] == ("5000", TOPIC_CFG, False, [
        ("max.message.bytes", "5000", TOPIC_CFG), ("message.max.bytes", "400000", DYN_BROKER),
        ("message.max.bytes", "300000", DYN_DEFAULT), ("message.max.bytes", "200000", STATIC),
        ("message.max.bytes", "1048588", DEFAULT)])
    assert t["retention.ms"] == ("3600000", DYN_BROKER, False, [
        ("log.retention.ms", "3600000", DYN_BROKER), ("log.retention.ms", "5400000", DYN_DEFAULT),
        ("log.retention.hours", "2", STATIC), ("log.retention.hours", "168", DEFAULT)])

    # The same through confluent-kafka (its synonyms are a dict by name, in the answer's order).
    res = ConfigResource(ResourceType.BROKER, "1")
    entries = admin.describe_configs([res])[res].result(30)
    assert entries["message.max.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert list(entries["log.retention.ms"].synonyms) == ["log.retention.ms", "log.retention.hours"]
    assert entries["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    listener = entries["listener.name.plaintext.ssl.enabled.protocols"]
    assert (listener.source, listener.is_read_only) == (ConfigSource.DYNAMIC_BROKER_CONFIG.value, True)
    assert list(listener.synonyms) == ["listener.name.plaintext.ssl.enabled.protocols", "ssl.enabled.protocols"]
    res = ConfigResource(ResourceType.TOPIC, "own")
    entries = admin.describe_configs([res])[res].result(30)
    assert entries["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert list(entries["max.message.bytes"].synonyms) == ["max.message.bytes", "message.max.bytes"]
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
