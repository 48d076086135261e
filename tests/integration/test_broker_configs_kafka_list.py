"""Issue 21 item 3: broker resources accept every Kafka 3.9 broker config, as Kafka does.

Through a real broker and confluent-kafka's AdminClient: dynamic Kafka configs that kbroker does not
act on (``sasl.kerberos.min.time.before.relogin`` and others of several types) are accepted by
IncrementalAlterConfigs and AlterConfigs on broker "1", reported by DescribeConfigs with the dynamic
source, and survive a restart; a read-only one is refused with Kafka's INVALID_REQUEST and message
(ConfigAdminManager / DynamicBrokerConfig.validateConfigs); a value of the wrong type is refused
(INVALID_REQUEST, Kafka's code for every broker validation failure, KAFKA-13609); an unknown name
answers INVALID_CONFIG; a per-broker config on the cluster default resource is refused as in Kafka;
and a Kafka config given in the config file is described with the static source.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from tests.helpers.wire import send_request

TIMEOUT = 30


@pytest.fixture
def kb(broker_factory):
    return broker_factory({"broker.rack": "rack-a"})


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _incremental(admin: AdminClient, name: str, entries: dict[str, str]) -> None:
    res = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)


def _describe(admin: AdminClient, name: str = "1") -> dict:
    res = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([res])[res].result(TIMEOUT)


def _error(fn) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        fn()
    return info.value.args[0]


def test_incremental_alter_configs_accepts_kafka_dynamic_configs(kb):
    admin = _admin(kb)
    values = {
        "sasl.kerberos.min.time.before.relogin": "58000",  # long, per-broker
        "num.replica.fetchers": "2",  # int, cluster-wide
        "log.cleaner.io.buffer.load.factor": "0.8",  # double, cluster-wide
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",  # list, per-broker
        "transaction.partition.verification.enable": "false",  # boolean, cluster-wide
    }
    _incremental(admin, "1", values)
    described = _describe(admin)
    for name, value in values.items():
        entry = described[name]
        assert entry.value == value, name
        assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, name
        assert not entry.is_read_only, name
    # Persisted like every dynamic broker config: back after a restart.
    kb.restart()
    admin = _admin(kb)
    entry = _describe(admin)["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # DELETE brings Kafka's default back.
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    entry = _describe(admin)["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source) == ("60000", ConfigSource.DEFAULT_CONFIG.value)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_accepts_kafka_dynamic_configs(kb):
    admin = _admin(kb)
    res = ConfigResource(ResourceType.BROKER, "1", set_config={
        "sasl.kerberos.min.time.before.relogin": "59000", "sasl.kerberos.ticket.renew.jitter": "0.1"})
    admin.alter_configs([res])[res].result(TIMEOUT)
    described = _describe(admin)
    assert described["sasl.kerberos.min.time.before.relogin"].value == "59000"
    assert described["sasl.kerberos.ticket.renew.jitter"].value == "0.1"
    assert described["sasl.kerberos.ticket.renew.jitter"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_static_kafka_config_is_described_and_read_only_refused(kb):
    admin = _admin(kb)
    rack = _describe(admin)["broker.rack"]
    assert (rack.value, rack.source, rack.is_read_only) == ("rack-a", ConfigSource.STATIC_BROKER_CONFIG.value, True)
    err = _error(lambda: _incremental(admin, "1", {"broker.rack": "rack-b"}))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(broker.rack)" in err.str()
    assert _describe(admin)["broker.rack"].value == "rack-a"


def test_wrong_type_and_unknown_name_are_refused(kb):
    admin = _admin(kb)
    err = _error(lambda: _incremental(admin, "1", {"sasl.kerberos.min.time.before.relogin": "abc"}))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "sasl.kerberos.min.time.before.relogin" in err.str()
    err = _error(lambda: _incremental(admin, "1", {"no.such.broker.config": "1"}))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "no.such.broker.config" in err.str()
    # Nothing was applied by the refused requests.
    entry = _describe(admin)["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source) == ("60000", ConfigSource.DEFAULT_CONFIG.value)


def _incremental_raw(broker, name: str, entries: dict[str, str]):
    # librdkafka refuses a broker resource with an empty name, so the cluster default goes raw.
    res_cls = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(version=1, validate_only=False, resources=[res_cls(
        version=1, resource_type=4, resource_name=name, configs=[
            res_cls.AlterableConfig(version=1, name=k, config_operation=0, value=v) for k, v in entries.items()])])
    (result,) = send_request(broker.bootstrap, req, 1).responses
    return result.error_code, result.error_message


def test_cluster_default_takes_cluster_wide_configs_only(kb):
    admin = _admin(kb)
    assert _incremental_raw(kb, "", {"num.replica.fetchers": "2"}) == (0, None)
    entry = _describe(admin)["num.replica.fetchers"]
    assert (entry.value, entry.source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert _incremental_raw(kb, "", {"sasl.kerberos.min.time.before.relogin": "58000"}) == (
        KafkaError.INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id must be "
                                    "specified: Set(sasl.kerberos.min.time.before.relogin)")


def test_describe_cluster_default_lists_only_the_dynamic_defaults(kb):
    """DescribeConfigs of the cluster-default resource "" answers, as Kafka's ConfigHelper, only the
    dynamic cluster defaults that are set, with their value (not this broker's effective one)."""
    admin = _admin(kb)
    _incremental(admin, "1", {"log.retention.ms": "3600000"})  # this broker's own value
    assert _incremental_raw(kb, "", {"log.retention.ms": "7200000"}) == (0, None)
    req = DescribeConfigsRequest(version=4, resources=[DescribeConfigsRequest.DescribeConfigsResource(
        version=4, resource_type=4, resource_name="", configuration_keys=None)],
        include_synonyms=True, include_documentation=False)
    res = send_request(kb.bootstrap, req, 4).results[0]
    assert res.error_code == 0
    assert [(c.name, c.value, c.config_source) for c in res.configs] == [
        ("log.retention.ms", "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
    assert ConfigSource.DYNAMIC_BROKER_CONFIG.value not in {s.source for s in res.configs[0].synonyms}
    assert _describe(admin)["log.retention.ms"].value == "3600000"  # broker "1" still sees its own


def test_thread_counts_are_dynamic_within_kafkas_bounds(kb):
    """Issue 33 item 1: Kafka's thread counts are cluster-wide dynamic configs (DynamicThreadPool,
    SocketServer, LogCleaner) that may move to between half and double their current value; past
    that, Kafka answers INVALID_REQUEST "Invalid dynamic configuration". kbroker has no such pools:
    accepted, stored and described, without effect."""
    admin = _admin(kb)
    assert _incremental_raw(kb, "", {"num.io.threads": "16", "log.cleaner.threads": "2"}) == (0, None)
    entries = _describe(admin)
    assert (entries["num.io.threads"].value, entries["num.io.threads"].source) == (
        "16", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert _incremental_raw(kb, "1", {"num.io.threads": "33"}) == (
        KafkaError.INVALID_REQUEST, "Invalid dynamic configuration")
    assert _incremental_raw(kb, "", {"log.cleaner.threads": "5"}) == (
        KafkaError.INVALID_REQUEST, "Invalid dynamic configuration")
    assert _incremental_raw(kb, "1", {"num.network.threads": "0"})[0] == KafkaError.INVALID_REQUEST
    assert _describe(admin)["num.io.threads"].value == "16"
