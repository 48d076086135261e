"""Unit tests for broker/config.py: properties parsing, precedence, validation, DescribeConfigs."""

from __future__ import annotations

import logging
import os

import pytest

from broker.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    config_reference_markdown,
    describe_topic_config,
    log_config_properties,
    parse_properties,
    parse_topic_configs,
    serve_help_epilog,
    validate_topic_configs,
)


def write(tmp_path, text: str) -> str:
    p = tmp_path / "server.properties"
    p.write_text(text)
    return str(p)


# ------------------------------------------------------------------ properties syntax
def test_parse_properties_comments_separators_continuation():
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   num.partitions = 3   \n"
        "log.dirs: /a,\\\n"
        "          /b\n"
        "listeners PLAINTEXT://:9093\n"
        "key\\=with\\:escapes=v\\u0041lue\n"
        "empty=\n"
        "# comment ending in backslash does not continue \\\n"
        "after=1\n"
        "tabbed\t=\tx\n"
    )
    props = parse_properties(text)
    assert props == {
        "num.partitions": "3",
        "log.dirs": "/a,/b",
        "listeners": "PLAINTEXT://:9093",
        "key=with:escapes": "vAlue",
        "empty": "",
        "after": "1",
        "tabbed": "x",
    }


def test_parse_properties_even_backslashes_do_not_continue_and_last_wins():
    props = parse_properties("a=x\\\\\nb=2\nb=3\n")
    assert props == {"a": "x\\", "b": "3"}


def test_load_file_overrides_win(tmp_path):
    path = write(tmp_path, "num.partitions=3\nlog.retention.hours=1\n")
    cfg = BrokerConfig.load(path, {"num.partitions": "7"})
    assert cfg.num_partitions == 7
    assert cfg.get("log.retention.hours") == 1
    assert cfg.originals["num.partitions"] == "7"


def test_load_missing_file_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerConfig.load(str(tmp_path / "nope.properties"))


def test_unknown_key_is_kept_and_warned(tmp_path, caplog):
    # (zookeeper.connect used to be the example; it is a Kafka 3.9 broker config, now accepted silently.)
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        cfg = BrokerConfig.load(write(tmp_path, "my.plugin.setting=x\n"))
    assert cfg.originals["my.plugin.setting"] == "x"
    assert cfg.get("my.plugin.setting") == "x"
    assert any("my.plugin.setting" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError):
        cfg.get("never.heard.of")


def test_invalid_value_names_config_and_reason():
    with pytest.raises(ConfigError, match="num.partitions.*at least 1"):
        BrokerConfig({"num.partitions": "0"})
    with pytest.raises(ConfigError, match="num.partitions.*32-bit integer"):
        BrokerConfig({"num.partitions": "many"})
    with pytest.raises(ConfigError, match="auto.create.topics.enable.*true or false"):
        BrokerConfig({"auto.create.topics.enable": "yes"})
    with pytest.raises(ConfigError, match="log.message.timestamp.type"):
        BrokerConfig({"log.message.timestamp.type": "Now"})


# ------------------------------------------------------------------ defaults and typed getters
def test_defaults():
    cfg = BrokerConfig.load(None)
    assert cfg.node_id == 1
    assert cfg.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert cfg.log_dirs == ["./data"]
    assert cfg.num_partitions == 1
    assert cfg.default_replication_factor == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.message_max_bytes == 1048588
    assert cfg.offsets_topic_num_partitions == 50
    assert cfg.transaction_state_log_num_partitions == 50
    assert cfg.get("transaction.max.timeout.ms") == 900000
    assert cfg.get("log.cleaner.min.cleanable.ratio") == 0.5
    assert cfg.get("log.cleanup.policy") == ["delete"]
    assert cfg.get("log.retention.ms") is None
    assert cfg.log_retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.cluster_id is None
    assert cfg.log_level == logging.INFO


def test_attribute_access_maps_underscores_to_dots():
    cfg = BrokerConfig({"group.initial.rebalance.delay.ms": "0"})
    assert cfg.group_initial_rebalance_delay_ms == 0
    assert cfg.transactional_id_expiration_ms == 604800000
    with pytest.raises(AttributeError):
        _ = cfg.no_such_config


def test_typed_values_are_trimmed_and_parsed():
    cfg = BrokerConfig({"log.dirs": " /x , /y ", "num.partitions": " 4 ", "log.cleanup.policy": "compact,delete"})
    assert cfg.log_dirs == ["/x", "/y"]
    assert cfg.num_partitions == 4
    assert cfg.get("log.cleanup.policy") == ["compact", "delete"]


def test_node_id_precedence():
    assert BrokerConfig({"broker.id": "5"}).node_id == 5
    assert BrokerConfig({"broker.id": "5", "node.id": "2"}).node_id == 2
    assert BrokerConfig({"broker.id": "-1"}).node_id == 1


def test_log_dirs_precedence():
    assert BrokerConfig({"log.dir": "/one"}).log_dirs == ["/one"]
    assert BrokerConfig({"log.dir": "/one", "log.dirs": "/a,/b"}).log_dirs == ["/a", "/b"]


@pytest.mark.parametrize(
    "props, expected",
    [
        ({}, 168 * 3600_000),
        ({"log.retention.hours": "1"}, 3600_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "5"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-5"}, -1),
    ],
)
def test_retention_precedence(props, expected):
    cfg = BrokerConfig(props)
    assert cfg.log_retention_ms == expected
    assert cfg.topic_defaults()["retention.ms"] == str(expected)


def test_roll_and_flush_precedence():
    cfg = BrokerConfig({"log.roll.hours": "2"})
    assert cfg.log_roll_ms == 7200_000
    assert BrokerConfig({"log.roll.hours": "2", "log.roll.ms": "1000"}).log_roll_ms == 1000
    assert BrokerConfig({"log.flush.scheduler.interval.ms": "3000"}).log_flush_interval_ms == 3000
    cfg = BrokerConfig({"log.flush.scheduler.interval.ms": "3000", "log.flush.interval.ms": "10"})
    assert cfg.log_flush_interval_ms == 10


# ------------------------------------------------------------------ listeners
def test_listeners_wildcard_and_advertised():
    cfg = BrokerConfig({"listeners": "PLAINTEXT://:9093,INTERNAL://0.0.0.0:9094",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"})
    assert cfg.listeners == [Listener("PLAINTEXT", "", 9093), Listener("INTERNAL", "0.0.0.0", 9094)]
    assert [li.bind_host for li in cfg.listeners] == ["", ""]
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9093),
                                        Listener("INTERNAL", "127.0.0.1", 9094)]
    cfg = BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:9092",
                        "advertised.listeners": "PLAINTEXT://broker1.example:19092"})
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "broker1.example", 19092)]


def test_listener_ipv6_and_str():
    cfg = BrokerConfig({"listeners": "PLAINTEXT://[::1]:9092"})
    assert cfg.listeners[0].host == "::1"
    assert str(cfg.listeners[0]) == "PLAINTEXT://[::1]:9092"


@pytest.mark.parametrize(
    "props, match",
    [
        ({"listeners": "localhost:9092"}, "NAME://host:port"),
        ({"listeners": "PLAINTEXT://:99999"}, "port out of range"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "duplicate"),
        ({"listeners": "FOO://:9092"}, "listener.security.protocol.map"),
        ({"advertised.listeners": "OTHER://h:1", "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:SSL"},
         "not among the listeners"),
        ({"listener.security.protocol.map": "PLAINTEXT:CARRIER_PIGEON"}, "PROTOCOL"),
    ],
)
def test_listener_errors(props, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig(props)


# ------------------------------------------------------------------ dynamic configs
def test_set_dynamic_and_delete():
    cfg = BrokerConfig({"log.retention.ms": "1000"})
    seen = []
    cfg.add_change_listener(lambda n, v: seen.append((n, v)))
    cfg.set_dynamic("log.retention.ms", "2000")
    assert cfg.get("log.retention.ms") == 2000
    assert cfg.topic_defaults()["retention.ms"] == "2000"
    cfg.set_dynamic("log.retention.ms", None)
    assert cfg.get("log.retention.ms") == 1000
    assert seen == [("log.retention.ms", "2000"), ("log.retention.ms", None)]


def test_set_dynamic_cluster_default_precedence():
    cfg = BrokerConfig({"message.max.bytes": "100"})
    cfg.set_dynamic("message.max.bytes", "200", cluster_default=True)
    assert cfg.message_max_bytes == 200
    cfg.set_dynamic("message.max.bytes", "300")
    assert cfg.message_max_bytes == 300
    (entry,) = cfg.describe(["message.max.bytes"])
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [(s.value, s.source) for s in entry.synonyms] == [("300", 2), ("200", 3), ("100", 4), ("1048588", 5)]


def test_set_dynamic_errors():
    cfg = BrokerConfig()
    with pytest.raises(ConfigError, match="read-only"):
        cfg.set_dynamic("num.partitions", "3")
    with pytest.raises(ConfigError, match="read-only"):
        cfg.set_dynamic("listeners", "PLAINTEXT://:1")
    with pytest.raises(ConfigError, match="Unknown"):
        cfg.set_dynamic("no.such", "1")
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        cfg.set_dynamic("log.segment.bytes", "1")
    assert cfg.dynamic == {}


# ------------------------------------------------------------------ describe (BROKER)
def test_describe_broker_sources_and_flags():
    cfg = BrokerConfig({"num.partitions": "3"})
    cfg.set_dynamic("log.retention.ms", "5000")
    entries = {e.name: e for e in cfg.describe()}
    assert set(entries) == set(BROKER_CONFIGS)
    np_ = entries["num.partitions"]
    assert (np_.value, np_.source, np_.is_default, np_.read_only) == ("3", ConfigSource.STATIC_BROKER_CONFIG, False, True)
    assert np_.config_type == ConfigType.INT
    rt = entries["log.retention.ms"]
    assert (rt.value, rt.source, rt.is_default, rt.read_only) == ("5000", ConfigSource.DYNAMIC_BROKER_CONFIG, False,
                                                                   False)
    assert rt.config_type == ConfigType.LONG
    mb = entries["message.max.bytes"]
    assert (mb.value, mb.source, mb.is_default) == ("1048588", ConfigSource.DEFAULT_CONFIG, True)
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["auto.create.topics.enable"].config_type == ConfigType.BOOLEAN
    assert entries["log.cleanup.policy"].config_type == ConfigType.LIST
    assert entries["log.cleaner.min.cleanable.ratio"].value == "0.5"
    assert entries["log.cleaner.min.cleanable.ratio"].config_type == ConfigType.DOUBLE
    assert entries["log.roll.ms"].value is None and entries["log.roll.ms"].is_default
    assert all(e.documentation for e in entries.values())
    # Sensitive = Kafka's password type (ssl.key.password, sasl.jaas.config, ...), never with a value.
    sensitive = {n for n, e in entries.items() if e.sensitive}
    assert sensitive == {n for n, d in BROKER_CONFIGS.items() if d.type == "password"}
    assert "ssl.key.password" in sensitive and all(entries[n].value is None for n in sensitive)


def test_source_and_type_codes_match_kafka():
    # DescribeConfigsResponse.ConfigSource / ConfigType ids in apache/kafka.
    assert (ConfigSource.TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG) == (1, 2, 3, 4, 5)
    assert (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
            ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD) == tuple(range(1, 10))


# ------------------------------------------------------------------ topic configs
def test_topic_defaults_follow_broker_log_settings():
    cfg = BrokerConfig({
        "log.segment.bytes": "1048576",
        "log.retention.minutes": "10",
        "log.cleanup.policy": "compact",
        "message.max.bytes": "2000000",
        "log.message.timestamp.type": "LogAppendTime",
        "log.roll.hours": "1",
        "log.preallocate": "true",
    })
    d = cfg.topic_defaults()
    assert set(d) == set(TOPIC_CONFIGS)
    assert d["segment.bytes"] == "1048576"
    assert d["retention.ms"] == "600000"
    assert d["cleanup.policy"] == "compact"
    assert d["max.message.bytes"] == "2000000"
    assert d["message.timestamp.type"] == "LogAppendTime"
    assert d["segment.ms"] == "3600000"
    assert d["preallocate"] == "true"
    # Untouched ones equal Kafka's topic defaults.
    assert d["segment.index.bytes"] == TOPIC_CONFIGS["segment.index.bytes"].default
    assert d["delete.retention.ms"] == "86400000"


def test_default_broker_gives_kafka_topic_defaults():
    d = BrokerConfig().topic_defaults()
    for name, tdef in TOPIC_CONFIGS.items():
        assert d[name] == tdef.default, name


def test_log_config_properties_overrides_win():
    cfg = BrokerConfig({"log.retention.hours": "1"})
    props = log_config_properties({"retention.ms": " 42 ", "cleanup.policy": "compact, delete"}, cfg)
    assert props["retention.ms"] == "42"
    assert props["cleanup.policy"] == "compact,delete"
    assert props["segment.bytes"] == "1073741824"
    typed = parse_topic_configs(props)
    assert typed["retention.ms"] == 42 and typed["cleanup.policy"] == ["compact", "delete"]
    assert typed["preallocate"] is False and typed["min.cleanable.dirty.ratio"] == 0.5


@pytest.mark.parametrize(
    "configs, match",
    [
        ({"retention.msec": "1"}, "Unknown topic config name: retention.msec"),
        ({"cleanup.policy": "forever"}, "cleanup.policy"),
        ({"segment.bytes": "13"}, "segment.bytes.*at least 14"),
        ({"retention.ms": "-2"}, "retention.ms.*at least -1"),
        ({"message.timestamp.type": "createtime"}, "message.timestamp.type"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "no more than 1"),
        ({"max.message.bytes": "2147483648"}, "32-bit"),
        ({"preallocate": "1"}, "true or false"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"retention.ms": None}, "Null value"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "conflict"),
    ],
)
def test_validate_topic_configs_errors(configs, match):
    with pytest.raises(ConfigError, match=match):
        validate_topic_configs(configs)


def test_validate_topic_configs_accepts_valid():
    validate_topic_configs({
        "cleanup.policy": "compact,delete", "segment.bytes": "14", "retention.ms": "-1",
        "message.timestamp.type": "LogAppendTime", "compression.type": "zstd", "min.insync.replicas": "1",
        "retention.bytes": "-1", "unclean.leader.election.enable": "TRUE",
    })


def test_describe_topic_sources():
    cfg = BrokerConfig({"log.retention.hours": "1"})
    cfg.set_dynamic("log.segment.bytes", "2048")
    entries = {e.name: e for e in describe_topic_config({"cleanup.policy": "compact"}, cfg)}
    assert set(entries) == set(TOPIC_CONFIGS)
    cp = entries["cleanup.policy"]
    assert (cp.value, cp.source, cp.is_default, cp.read_only) == ("compact", ConfigSource.TOPIC_CONFIG, False, False)
    assert [(s.name, s.source) for s in cp.synonyms] == [("cleanup.policy", 1), ("log.cleanup.policy", 5)]
    # Kafka's ConfigHelper lists the synonyms of log.retention.ms (ServerTopicConfigSynonyms' first)
    # from its own name on: with only log.retention.hours set there are none, and the source is
    # DEFAULT_CONFIG; the value is the effective one all the same.
    rt = entries["retention.ms"]
    assert (rt.value, rt.source, rt.is_default, rt.synonyms) == ("3600000", ConfigSource.DEFAULT_CONFIG, True, [])
    cfg.set_dynamic("log.retention.ms", "5000", cluster_default=True)
    (rt,) = describe_topic_config({}, cfg, ["retention.ms"])
    assert (rt.value, rt.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in rt.synonyms] == [
        ("log.retention.ms", "5000", 3), ("log.retention.hours", "1", 4), ("log.retention.hours", "168", 5)]
    sb = entries["segment.bytes"]
    assert (sb.value, sb.source) == ("2048", ConfigSource.DYNAMIC_BROKER_CONFIG)
    mb = entries["max.message.bytes"]
    assert (mb.value, mb.source, mb.is_default) == ("1048588", ConfigSource.DEFAULT_CONFIG, True)
    assert mb.config_type == ConfigType.INT
    only = describe_topic_config({}, cfg, ["retention.ms", "bogus"])
    assert [e.name for e in only] == ["retention.ms"]


# ------------------------------------------------------------------ definitions sanity
def test_required_configs_are_defined():
    required = """node.id broker.id process.roles listeners advertised.listeners listener.security.protocol.map
    log.dirs log.dir num.partitions default.replication.factor auto.create.topics.enable delete.topic.enable
    socket.request.max.bytes socket.send.buffer.bytes socket.receive.buffer.bytes message.max.bytes
    log.segment.bytes log.roll.ms log.roll.hours log.retention.ms log.retention.minutes log.retention.hours
    log.retention.bytes log.retention.check.interval.ms log.segment.delete.delay.ms log.index.interval.bytes
    log.index.size.max.bytes log.flush.interval.messages log.flush.interval.ms log.flush.scheduler.interval.ms
    log.flush.offset.checkpoint.interval.ms log.flush.start.offset.checkpoint.interval.ms log.cleanup.policy
    log.cleaner.enable log.cleaner.backoff.ms log.cleaner.delete.retention.ms log.cleaner.min.cleanable.ratio
    log.cleaner.min.compaction.lag.ms log.cleaner.max.compaction.lag.ms log.message.timestamp.type
    compression.type offsets.topic.num.partitions offsets.topic.replication.factor offsets.topic.segment.bytes
    offsets.retention.minutes offsets.retention.check.interval.ms offsets.commit.timeout.ms
    group.initial.rebalance.delay.ms group.min.session.timeout.ms group.max.session.timeout.ms group.max.size
    group.consumer.heartbeat.interval.ms group.consumer.session.timeout.ms transaction.state.log.num.partitions
    transaction.state.log.replication.factor transaction.state.log.segment.bytes transaction.max.timeout.ms
    transactional.id.expiration.ms transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction.remove.expired.transaction.cleanup.interval.ms producer.id.expiration.ms
    producer.id.expiration.check.interval.ms fetch.max.bytes replica.fetch.max.bytes
    max.incremental.fetch.session.cache.slots queued.max.requests cluster.id kbroker.log.level""".split()
    assert not set(required) - set(BROKER_CONFIGS)
    topics = """cleanup.policy compression.type delete.retention.ms file.delete.delay.ms flush.messages flush.ms
    index.interval.bytes max.compaction.lag.ms max.message.bytes message.timestamp.type
    message.timestamp.before.max.ms message.timestamp.after.max.ms min.cleanable.dirty.ratio min.compaction.lag.ms
    min.insync.replicas preallocate retention.bytes retention.ms segment.bytes segment.index.bytes
    segment.jitter.ms segment.ms unclean.leader.election.enable message.downconversion.enable""".split()
    assert not set(topics) - set(TOPIC_CONFIGS)


def test_all_defaults_are_valid():
    for d in list(BROKER_CONFIGS.values()) + list(TOPIC_CONFIGS.values()):
        d.parse(d.default)
        assert d.doc and "\n" not in d.doc
    for d in BROKER_CONFIGS.values():
        assert d.topic_name is None or d.topic_name in TOPIC_CONFIGS, d.name


# ------------------------------------------------------------------ meta.properties
def test_ensure_meta_properties(tmp_path):
    dirs = f"{tmp_path}/d1,{tmp_path}/d2"
    cfg = BrokerConfig({"log.dirs": dirs, "node.id": "3"})
    cid = cfg.ensure_meta_properties()
    assert len(cid) == 22
    meta = parse_properties((tmp_path / "d1" / "meta.properties").read_text())
    assert meta["cluster.id"] == cid and meta["node.id"] == "3" and meta["version"] == "1"
    assert BrokerConfig({"log.dirs": dirs, "node.id": "3"}).ensure_meta_properties() == cid
    with pytest.raises(ConfigError, match="node.id"):
        BrokerConfig({"log.dirs": dirs, "node.id": "4"}).ensure_meta_properties()
    with pytest.raises(ConfigError, match="does not match"):
        BrokerConfig({"log.dirs": dirs, "node.id": "3", "cluster.id": "other"}).ensure_meta_properties()
    fresh = BrokerConfig({"log.dirs": f"{tmp_path}/d3", "cluster.id": "my-cluster"})
    assert fresh.ensure_meta_properties() == "my-cluster"
    assert os.path.exists(tmp_path / "d3" / "meta.properties")


# ------------------------------------------------------------------ docs
def test_reference_markdown_lists_everything_and_is_current():
    md = config_reference_markdown()
    for name in list(BROKER_CONFIGS) + list(TOPIC_CONFIGS):
        assert f"`{name}`" in md
    ref = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "config-reference.md")
    if os.path.exists(ref):
        with open(ref, encoding="utf-8") as f:
            assert f.read() == md, "docs/config-reference.md is stale: run python -m broker.config"


def test_serve_help_epilog():
    text = serve_help_epilog()
    for name in ("listeners", "log.dirs", "num.partitions", "log.retention.ms", "transaction.max.timeout.ms"):
        assert name in text
    assert len(text.splitlines()) < 30


# ------------------------------------------------------------------ stock Kafka file, extra topic configs
KAFKA_KRAFT_SAMPLE = """\
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,\\
  SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_stock_kafka_kraft_properties_load_cleanly(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        cfg = BrokerConfig.load(write(tmp_path, KAFKA_KRAFT_SAMPLE))
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert cfg.node_id == 1
    assert [li.name for li in cfg.listeners] == ["PLAINTEXT", "CONTROLLER"]
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "localhost", 9092)]
    assert cfg.security_protocol_map["SASL_SSL"] == "SASL_SSL"
    assert cfg.log_dirs == ["/tmp/kraft-combined-logs"]
    entries = {e.name: e for e in cfg.describe(["log.retention.hours", "num.partitions"])}
    assert entries["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert not entries["log.retention.hours"].is_default


@pytest.mark.parametrize(
    "configs, ok",
    [
        ({"compression.gzip.level": "-1"}, True),
        ({"compression.gzip.level": "9"}, True),
        ({"compression.gzip.level": "0"}, False),
        ({"compression.lz4.level": "18"}, False),
        ({"compression.zstd.level": "-5"}, True),
        ({"leader.replication.throttled.replicas": "*"}, True),
        ({"leader.replication.throttled.replicas": "0:1,1:2"}, True),
        ({"follower.replication.throttled.replicas": "zero:one"}, False),
        ({"remote.storage.enable": "false"}, True),
        ({"remote.storage.enable": "true"}, False),
        ({"cleanup.policy": "Compact"}, False),  # case-sensitive like Kafka
        ({"cleanup.policy": ""}, True),
    ],
)
def test_extra_topic_config_validation(configs, ok):
    if ok:
        validate_topic_configs(configs)
    else:
        with pytest.raises(ConfigError, match=next(iter(configs))):
            validate_topic_configs(configs)


# ------------------------------------------------------------------ synonyms, caching, robustness
def test_broker_describe_synonyms_follow_kafka_order():
    cfg = BrokerConfig({"log.retention.minutes": "5", "log.retention.hours": "2"})
    cfg.set_dynamic("log.retention.ms", "1000")
    e = {x.name: x for x in cfg.describe(["log.retention.ms", "log.retention.minutes", "log.retention.hours"])}
    assert [(s.name, s.source) for s in e["log.retention.ms"].synonyms] == [
        ("log.retention.ms", 2), ("log.retention.minutes", 4), ("log.retention.hours", 4), ("log.retention.hours", 5)]
    # Higher-precedence spellings are dropped when describing a lower one.
    assert [(s.name, s.source) for s in e["log.retention.hours"].synonyms] == [
        ("log.retention.hours", 4), ("log.retention.hours", 5)]
    assert e["log.retention.minutes"].value == "5"


def test_topic_describe_synonyms_grouped_by_source():
    cfg = BrokerConfig({"log.retention.hours": "2"})
    cfg.set_dynamic("log.retention.ms", "1000", cluster_default=True)
    (rt,) = describe_topic_config({"retention.ms": "7"}, cfg, ["retention.ms"])
    assert [(s.name, s.value, s.source) for s in rt.synonyms] == [
        ("retention.ms", "7", 1), ("log.retention.ms", "1000", 3), ("log.retention.hours", "2", 4),
        ("log.retention.hours", "168", 5)]
    (rt,) = describe_topic_config({}, cfg, ["retention.ms"])
    assert (rt.value, rt.source) == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_caches_follow_dynamic_changes():
    cfg = BrokerConfig()
    assert log_config_properties({}, cfg)["segment.bytes"] == "1073741824"
    assert log_config_properties({"retention.ms": "5"}, cfg)["retention.ms"] == "5"
    cfg.set_dynamic("log.segment.bytes", "4096")
    assert log_config_properties({}, cfg)["segment.bytes"] == "4096"
    assert cfg.get("log.segment.bytes") == 4096
    # Returned containers are copies: mutating them does not leak into the config.
    cfg.get("log.cleanup.policy").append("compact")
    log_config_properties({}, cfg)["segment.bytes"] = "1"
    cfg.topic_defaults()["segment.bytes"] = "1"
    assert cfg.get("log.cleanup.policy") == ["delete"]
    assert log_config_properties({}, cfg)["segment.bytes"] == "4096"


def test_describe_topic_tolerates_invalid_stored_override():
    (e,) = describe_topic_config({"segment.bytes": "3"}, BrokerConfig(), ["segment.bytes"])
    assert (e.value, e.source) == ("3", ConfigSource.TOPIC_CONFIG)


# ------------------------------------------------------------------ Kafka 3.9's full broker config list
def test_kafka_broker_config_list_covers_kafka_3_9():
    from broker.config.kafka_broker_configs import KAFKA_BROKER_CONFIGS, KAFKA_VERSION

    assert KAFKA_VERSION == "3.9"
    # Entries of 39/generated/kafka_config.html (KafkaConfig.configDef, internal configs excluded).
    assert len(KAFKA_BROKER_CONFIGS) == 315
    assert sum(k.mode == "read-only" for k in KAFKA_BROKER_CONFIGS.values()) == 226
    assert sum(k.mode == "per-broker" for k in KAFKA_BROKER_CONFIGS.values()) == 37
    assert sum(k.mode == "cluster-wide" for k in KAFKA_BROKER_CONFIGS.values()) == 52
    # (name, type, default, update mode) as read in Kafka's source: SaslConfigs.DEFAULT_KERBEROS_MIN_TIME_BEFORE_RELOGIN
    # = 1 min, ServerConfigs.BROKER_RACK_CONFIG (STRING, null), ReplicationConfigs.NUM_REPLICA_FETCHERS (1,
    # DynamicThreadPool), CleanerConfig dedupe buffer 128 MiB, Defaults.MessageMaxBytes = 1 MiB + LOG_OVERHEAD,
    # SocketServerConfigs.MAX_CONNECTIONS (Int.MaxValue, DynamicConnectionQuota), QuotaConfigs window num 11,
    # TransactionStateManagerConfigs max timeout 15 min, ZkConfigs session timeout 18 s, the 1.7976931348623157E308
    # cleaner io cap (Double.MaxValue), the per-broker SSL keystore password and KRaftConfigs.PROCESS_ROLES.
    expected = {
        "sasl.kerberos.min.time.before.relogin": ("long", "60000", "per-broker"),
        "broker.rack": ("string", None, "read-only"),
        "num.replica.fetchers": ("int", "1", "cluster-wide"),
        "log.cleaner.dedupe.buffer.size": ("long", "134217728", "cluster-wide"),
        "message.max.bytes": ("int", "1048588", "cluster-wide"),
        "max.connections": ("int", "2147483647", "cluster-wide"),
        "quota.window.num": ("int", "11", "read-only"),
        "transaction.max.timeout.ms": ("int", "900000", "read-only"),
        "zookeeper.session.timeout.ms": ("int", "18000", "read-only"),
        "log.cleaner.io.max.bytes.per.second": ("double", "1.7976931348623157E308", "cluster-wide"),
        "ssl.keystore.password": ("password", None, "per-broker"),
        "process.roles": ("list", "", "read-only"),
        "offsets.topic.replication.factor": ("short", "3", "read-only"),
        "principal.builder.class": ("class",
                                    "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
                                    "per-broker"),
        "group.share.max.groups": ("short", "10", "read-only"),
    }
    for name, fact in expected.items():
        k = KAFKA_BROKER_CONFIGS[name]
        assert (k.type, k.default, k.mode) == fact, name
    assert KAFKA_BROKER_CONFIGS["sasl.kerberos.min.time.before.relogin"].dynamic
    assert not KAFKA_BROKER_CONFIGS["broker.rack"].dynamic
    # Every type is one the config machinery parses, and every default parses as its type.
    for k in KAFKA_BROKER_CONFIGS.values():
        assert k.type in {"boolean", "string", "int", "short", "long", "double", "list", "class", "password"}
        BROKER_CONFIGS[k.name].parse(BROKER_CONFIGS[k.name].default)


def test_kafka_broker_configs_join_the_registry_as_accepted_no_effect():
    from broker.config.broker_defs import _BROKER_DEFS, NO_EFFECT_BROKER_CONFIGS
    from broker.config.kafka_broker_configs import KAFKA_BROKER_CONFIGS

    own = {d.name: d for d in _BROKER_DEFS}
    assert set(KAFKA_BROKER_CONFIGS) <= set(BROKER_CONFIGS)
    # kbroker's own definitions win (they are the ones it acts on); every other Kafka name is "no effect".
    assert BROKER_CONFIGS["listeners"] is own["listeners"]
    assert set(NO_EFFECT_BROKER_CONFIGS) == set(KAFKA_BROKER_CONFIGS) - set(own)
    d = BROKER_CONFIGS["sasl.kerberos.min.time.before.relogin"]
    assert (d.type, d.default, d.dynamic) == ("long", "60000", True)
    assert "no" in d.doc and "not act" in d.doc


def test_no_effect_config_from_file_and_dynamic_describe(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        cfg = BrokerConfig.load(write(tmp_path, "broker.rack=r1\nnum.replica.fetchers=4\n"))
    assert not caplog.records  # Kafka configs are known: no "unknown config" warning
    assert cfg.get("broker.rack") == "r1" and cfg.get("num.replica.fetchers") == 4
    with pytest.raises(ConfigError, match="num.replica.fetchers"):
        BrokerConfig({"num.replica.fetchers": "many"})
    cfg.set_dynamic("sasl.kerberos.min.time.before.relogin", "58000")
    (entry,) = cfg.describe(["sasl.kerberos.min.time.before.relogin"])
    assert (entry.value, entry.source, entry.read_only, entry.config_type) == (
        "58000", ConfigSource.DYNAMIC_BROKER_CONFIG, False, ConfigType.LONG)
    (rack,) = cfg.describe(["broker.rack"])
    assert (rack.value, rack.source, rack.read_only) == ("r1", ConfigSource.STATIC_BROKER_CONFIG, True)
    (pw,) = cfg.describe(["ssl.keystore.password"])
    assert pw.sensitive and pw.value is None
    with pytest.raises(ConfigError, match="read-only"):
        cfg.set_dynamic("broker.rack", "r2")


def test_reference_lists_no_effect_configs_in_their_own_section():
    md = config_reference_markdown()
    section = md[md.index("## Kafka broker configs accepted with no effect"):md.index("## Topic configs")]
    assert "| `sasl.kerberos.min.time.before.relogin` | long | `60000` | per-broker |" in section
    assert "| `zookeeper.ssl.truststore.type` | string | null | read-only |" in section
    assert "`broker.rack`" not in section  # cluster mode acts on it: a kbroker definition
    assert "`listeners`" not in section  # kbroker acts on it: listed with kbroker's own configs
