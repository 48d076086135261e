"""Broker and topic configuration with Apache Kafka's names, types, defaults and validation.

Reads a ``server.properties`` file (a ``java.util.Properties`` subset), applies CLI overrides and
runtime (AlterConfigs) changes, answers DescribeConfigs for brokers and topics with Kafka's source
and type codes, and derives topic-level defaults from the broker's ``log.*`` settings exactly the
way Kafka's ``ServerTopicConfigSynonyms`` does.  It also renders the configuration reference
(docs/config-reference.md) and the ``kbroker serve --help`` epilog.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


class ConfigError(ValueError):
    """An unknown config name or an invalid value; the message names the config and the reason."""


# --------------------------------------------------------------------------------------------
# Wire codes (DescribeConfigsResponse.ConfigSource / ConfigType in apache/kafka clients)
# --------------------------------------------------------------------------------------------
class ConfigSource:
    UNKNOWN = 0
    TOPIC_CONFIG = 1  # a.k.a. DYNAMIC_TOPIC_CONFIG
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType:
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPE_CODES = {
    "boolean": ConfigType.BOOLEAN,
    "string": ConfigType.STRING,
    "int": ConfigType.INT,
    "short": ConfigType.SHORT,
    "long": ConfigType.LONG,
    "double": ConfigType.DOUBLE,
    "list": ConfigType.LIST,
    "class": ConfigType.CLASS,
    "password": ConfigType.PASSWORD,
}


# --------------------------------------------------------------------------------------------
# Validators (each knows how to describe itself for the reference docs)
# --------------------------------------------------------------------------------------------
class Validator:
    def __call__(self, name: str, value: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        return ""


@dataclass(frozen=True)
class Range(Validator):
    min: float | None = None
    max: float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be no more than {self.max}")

    def describe(self) -> str:
        if self.min is not None and self.min == self.max:
            return str(self.min)
        if self.max is None:
            return f"[{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"[{self.min},...,{self.max}]"


def at_least(n: float) -> Range:
    return Range(min=n)


def between(lo: float, hi: float) -> Range:
    return Range(min=lo, max=hi)


@dataclass(frozen=True)
class ValidString(Validator):
    values: tuple[str, ...]
    case_insensitive: bool = False

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        allowed = [v.lower() for v in self.values] if self.case_insensitive else list(self.values)
        probe = value.lower() if self.case_insensitive else value
        if probe not in allowed:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: String must be one of: {', '.join(self.values)}"
            )

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ValidList(Validator):
    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        for item in value:
            if item not in self.values:  # case-sensitive, as Kafka's ValidList.in
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(self.values)}"
                )

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


class ListenersValidator(Validator):
    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        listeners = [parse_listener(v, name) for v in value]
        names = [li.name for li in listeners]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"Invalid value for configuration {name}: duplicate listener name(s) {sorted(dup)}")

    def describe(self) -> str:
        return "NAME://host:port, ..."


class ProtocolMapValidator(Validator):
    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        _parse_protocol_map(value, name)

    def describe(self) -> str:
        return "LISTENER_NAME:PROTOCOL, ..."


class NonEmptyList(Validator):
    def __call__(self, name: str, value: Any) -> None:
        if value is not None and not value:
            raise ConfigError(f"Invalid value for configuration {name}: empty list is not allowed")

    def describe(self) -> str:
        return "non-empty list"


@dataclass(frozen=True)
class AnyOf(Validator):
    """Valid when any alternative accepts the value (e.g. gzip level: -1 or 1..9)."""

    alternatives: tuple[Validator, ...]

    def __call__(self, name: str, value: Any) -> None:
        for v in self.alternatives:
            try:
                v(name, value)
                return
            except ConfigError:
                pass
        raise ConfigError(f"Invalid value {value} for configuration {name}: must be {self.describe()}")

    def describe(self) -> str:
        return " or ".join(v.describe() for v in self.alternatives)


class ThrottledReplicasValidator(Validator):
    """'*' or a list of partition:brokerId pairs (Kafka's ThrottledReplicaListValidator)."""

    def __call__(self, name: str, value: Any) -> None:
        if not value or value == ["*"]:
            return
        for item in value:
            if not re.fullmatch(r"\d+:\d+", item.strip()):
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: must be '*' or a list of partitionId:brokerId"
                )

    def describe(self) -> str:
        return "[partitionId]:[brokerId],... or *"


class MustBeFalse(Validator):
    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __call__(self, name: str, value: Any) -> None:
        if value:
            raise ConfigError(f"Invalid value true for configuration {name}: {self.reason}")

    def describe(self) -> str:
        return "false"


GZIP_LEVEL = AnyOf((Range(-1, -1), between(1, 9)))
LZ4_LEVEL = between(1, 17)
ZSTD_LEVEL = between(-131072, 22)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")  # Python logging names

# Kafka 3.x accepted segment.bytes >= 14 (the v0 record overhead); Kafka 4.0 raised the floor to 1 MiB
# and added an internal override for tests.  kbroker keeps the 3.x floor: small segments are how
# roll, retention and compaction get tested without writing gigabytes.
MIN_SEGMENT_BYTES = 14


# --------------------------------------------------------------------------------------------
# Definitions
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # "string"|"int"|"long"|"double"|"boolean"|"list"|"password"|"class"|"short"
    default: str | None
    doc: str
    valid: Validator | None = None
    dynamic: bool = False
    # For broker configs: the topic-level config this one supplies the default for.
    topic_name: str | None = None

    @property
    def config_type(self) -> int:
        return _TYPE_CODES[self.type]

    @property
    def sensitive(self) -> bool:
        return self.type == "password"

    def parse(self, raw: str | None) -> Any:
        """Convert a string to this config's Python type and validate it (ConfigError on failure)."""
        value = parse_value(self.name, self.type, raw)
        if self.valid is not None:
            self.valid(self.name, value)
        return value


def parse_value(name: str, type_: str, raw: str | None) -> Any:
    """Typed value of a raw string following Kafka's ConfigDef.parseType rules (numbers trimmed)."""
    if raw is None:
        return None
    s = raw.strip()
    try:
        if type_ in ("int", "short", "long"):
            if not re.fullmatch(r"[+-]?\d+", s):
                raise ValueError
            n = int(s)
            lo, hi = {"int": (INT_MIN, INT_MAX), "short": (-(2**15), 2**15 - 1), "long": (LONG_MIN, LONG_MAX)}[type_]
            if not lo <= n <= hi:
                raise ValueError
            return n
        if type_ == "double":
            return float(s)
        if type_ == "boolean":
            if s.lower() == "true":
                return True
            if s.lower() == "false":
                return False
            raise ValueError
        if type_ == "list":
            return [] if s == "" else [item.strip() for item in s.split(",")]
        return s  # string, password, class
    except ValueError:
        expected = {"short": "a 16-bit integer", "int": "a 32-bit integer", "long": "a 64-bit integer",
                    "double": "a number", "boolean": "true or false"}.get(type_, type_)
        raise ConfigError(f"Invalid value {raw!r} for configuration {name}: expected {expected}") from None


def format_value(type_: str, value: Any) -> str | None:
    """Canonical string form of a typed value, as Kafka reports it in DescribeConfigs."""
    if value is None:
        return None
    if type_ == "boolean":
        return "true" if value else "false"
    if type_ == "list":
        return ",".join(value)
    if type_ == "double":
        return repr(float(value))
    return str(value)


def _b(name: str, type_: str, default: Any, doc: str, valid: Validator | None = None, *, dynamic: bool = False,
       topic: str | None = None) -> ConfigDef:
    if isinstance(default, bool):
        default = "true" if default else "false"
    elif default is not None:
        default = str(default)
    return ConfigDef(name, type_, default, doc, valid, dynamic, topic)


_WEEK_MS = 7 * 24 * 3600 * 1000
_DAY_MS = 24 * 3600 * 1000

_BROKER_DEFS: list[ConfigDef] = [
    # --- identity and networking
    _b("node.id", "int", None, "Id of this node in the cluster; kbroker uses 1 when neither node.id nor broker.id is set.",
       at_least(-1)),
    _b("broker.id", "int", -1, "Legacy name of the node id; used when node.id is not set.", at_least(-1)),
    _b("process.roles", "list", "broker,controller",
       "Roles this process plays (informational: a kbroker node is always broker and controller).",
       ValidList(("broker", "controller"))),
    _b("cluster.id", "string", None,
       "kbroker extension: cluster id to use; when unset one is generated and stored in meta.properties."),
    _b("listeners", "list", "PLAINTEXT://127.0.0.1:9092",
       "Comma-separated NAME://host:port addresses to listen on; an empty host or 0.0.0.0 binds all interfaces.",
       ListenersValidator()),
    _b("advertised.listeners", "list", None,
       "Addresses given to clients in Metadata; defaults to listeners with wildcard hosts replaced by 127.0.0.1.",
       ListenersValidator()),
    _b("listener.security.protocol.map", "string",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Maps each listener name to its security protocol.", ProtocolMapValidator()),
    _b("socket.request.max.bytes", "int", 104857600, "Largest request frame the server accepts.", at_least(1)),
    _b("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF for client sockets; -1 keeps the OS default."),
    _b("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF for client sockets; -1 keeps the OS default."),
    _b("queued.max.requests", "int", 500, "Requests queued per server before reading from sockets pauses.",
       at_least(1)),
    _b("message.max.bytes", "int", 1048588,
       "Largest record batch (after compression) the broker accepts; topic default for max.message.bytes.",
       at_least(0), dynamic=True, topic="max.message.bytes"),
    _b("fetch.max.bytes", "int", 57671680, "Upper bound on the bytes returned for one fetch request.",
       at_least(1024)),
    _b("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower tries to fetch per partition.", at_least(0)),
    _b("max.incremental.fetch.session.cache.slots", "int", 1000, "Number of incremental fetch sessions kept.",
       at_least(0)),
    # Accepted so that a stock Kafka server.properties loads without warnings; they do not change
    # kbroker's behaviour (one event loop per process, no separate controller quorum).
    _b("controller.listener.names", "list", None,
       "Listener names used by the KRaft controller; kbroker does not advertise these to clients."),
    _b("inter.broker.listener.name", "string", None, "Listener used between brokers (defaults to the first listener)."),
    _b("controller.quorum.voters", "list", "", "KRaft voter set (accepted and ignored: kbroker has no Raft quorum)."),
    _b("controller.quorum.bootstrap.servers", "list", "",
       "KRaft controller bootstrap addresses (accepted and ignored)."),
    _b("num.network.threads", "int", 3, "Network threads in Kafka (accepted and ignored: kbroker uses one event loop).",
       at_least(1)),
    _b("num.io.threads", "int", 8, "Request handler threads in Kafka (accepted and ignored).", at_least(1)),
    _b("num.recovery.threads.per.data.dir", "int", 1, "Threads per data dir for log recovery (accepted and ignored).",
       at_least(1)),
    _b("log.cleaner.threads", "int", 1, "Log cleaner threads (kbroker runs cleaning in an executor).", at_least(0)),
    # --- topics
    _b("num.partitions", "int", 1, "Partition count for auto-created topics and CreateTopics without a count.",
       at_least(1)),
    _b("default.replication.factor", "int", 1, "Replication factor for auto-created topics and CreateTopics without one.",
       at_least(1)),
    _b("auto.create.topics.enable", "boolean", True, "Create a topic when a client asks for metadata of an unknown one."),
    _b("delete.topic.enable", "boolean", True, "Allow DeleteTopics; when false topics cannot be deleted."),
    _b("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all write.", at_least(1),
       dynamic=True, topic="min.insync.replicas"),
    _b("unclean.leader.election.enable", "boolean", False, "Allow an out-of-sync replica to become leader.",
       dynamic=True, topic="unclean.leader.election.enable"),
    _b("compression.type", "string", "producer",
       "Final compression of topic data; 'producer' keeps what the producer sent.",
       ValidString(COMPRESSION_TYPES), dynamic=True, topic="compression.type"),
    _b("compression.gzip.level", "int", -1, "Gzip level used when compression.type is gzip.", GZIP_LEVEL,
       dynamic=True, topic="compression.gzip.level"),
    _b("compression.lz4.level", "int", 9, "LZ4 level used when compression.type is lz4.", LZ4_LEVEL,
       dynamic=True, topic="compression.lz4.level"),
    _b("compression.zstd.level", "int", 3, "Zstd level used when compression.type is zstd.", ZSTD_LEVEL,
       dynamic=True, topic="compression.zstd.level"),
    # --- log storage
    _b("log.dirs", "list", None, "Directories holding partition data; overrides log.dir.", NonEmptyList()),
    _b("log.dir", "list", "./data", "Data directory used when log.dirs is not set.", NonEmptyList()),
    _b("log.segment.bytes", "int", 1073741824, "Size at which a log segment is rolled.",
       at_least(MIN_SEGMENT_BYTES), dynamic=True, topic="segment.bytes"),
    _b("log.roll.ms", "long", None, "Time after which a segment is rolled; overrides log.roll.hours.", at_least(1),
       dynamic=True, topic="segment.ms"),
    _b("log.roll.hours", "int", 168, "Hours after which a segment is rolled (used when log.roll.ms is unset).",
       at_least(1), topic="segment.ms"),
    _b("log.roll.jitter.ms", "long", None, "Random jitter subtracted from the roll time; overrides log.roll.jitter.hours.",
       at_least(0), dynamic=True, topic="segment.jitter.ms"),
    _b("log.roll.jitter.hours", "int", 0, "Roll jitter in hours (used when log.roll.jitter.ms is unset).", at_least(0),
       topic="segment.jitter.ms"),
    _b("log.retention.ms", "long", None,
       "Time to keep a segment before deleting it; -1 keeps forever. Wins over minutes and hours.",
       at_least(-1), dynamic=True, topic="retention.ms"),
    _b("log.retention.minutes", "int", None, "Retention in minutes; used when log.retention.ms is unset.",
       topic="retention.ms"),
    _b("log.retention.hours", "int", 168, "Retention in hours; used when ms and minutes are unset.",
       topic="retention.ms"),
    _b("log.retention.bytes", "long", -1, "Maximum partition size before old segments are deleted; -1 is unlimited.",
       dynamic=True, topic="retention.bytes"),
    _b("log.retention.check.interval.ms", "long", 300000, "How often segments are checked for deletion.",
       at_least(1)),
    _b("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.",
       at_least(0), dynamic=True, topic="file.delete.delay.ms"),
    _b("log.index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", at_least(0),
       dynamic=True, topic="index.interval.bytes"),
    _b("log.index.size.max.bytes", "int", 10485760, "Maximum size of an offset index file.", at_least(4),
       dynamic=True, topic="segment.index.bytes"),
    _b("log.preallocate", "boolean", False, "Preallocate segment files at their full size.", dynamic=True,
       topic="preallocate"),
    _b("log.flush.interval.messages", "long", LONG_MAX, "Messages appended before a partition is fsynced.",
       at_least(1), dynamic=True, topic="flush.messages"),
    _b("log.flush.interval.ms", "long", None,
       "Max time data may sit unflushed; falls back to log.flush.scheduler.interval.ms.", dynamic=True,
       topic="flush.ms"),
    _b("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks whether logs need fsync.",
       topic="flush.ms"),
    _b("log.flush.offset.checkpoint.interval.ms", "int", 60000,
       "How often the recovery-point checkpoint file is written.", at_least(0)),
    _b("log.flush.start.offset.checkpoint.interval.ms", "int", 60000,
       "How often the log-start-offset checkpoint file is written.", at_least(0)),
    _b("log.cleanup.policy", "list", "delete", "Default cleanup policy: delete, compact, or both.",
       ValidList(CLEANUP_POLICIES), dynamic=True, topic="cleanup.policy"),
    _b("log.cleaner.enable", "boolean", True, "Run the log cleaner (needed for compacted topics)."),
    _b("log.cleaner.backoff.ms", "long", 15000, "Sleep between cleaner passes when nothing is cleanable.",
       at_least(0), dynamic=True),
    _b("log.cleaner.delete.retention.ms", "long", _DAY_MS, "How long tombstones are kept on compacted topics.",
       at_least(0), dynamic=True, topic="delete.retention.ms"),
    _b("log.cleaner.min.cleanable.ratio", "double", 0.5, "Dirty/total ratio that makes a log eligible for cleaning.",
       between(0, 1), dynamic=True, topic="min.cleanable.dirty.ratio"),
    _b("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age before a record may be compacted.",
       at_least(0), dynamic=True, topic="min.compaction.lag.ms"),
    _b("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.",
       at_least(1), dynamic=True, topic="max.compaction.lag.ms"),
    _b("log.message.timestamp.type", "string", "CreateTime",
       "Whether batch timestamps are the producer's (CreateTime) or the append time (LogAppendTime).",
       ValidString(TIMESTAMP_TYPES), dynamic=True, topic="message.timestamp.type"),
    _b("log.message.timestamp.before.max.ms", "long", LONG_MAX,
       "How far in the past a CreateTime timestamp may be before the batch is rejected.", at_least(0),
       dynamic=True, topic="message.timestamp.before.max.ms"),
    _b("log.message.timestamp.after.max.ms", "long", LONG_MAX,
       "How far in the future a CreateTime timestamp may be before the batch is rejected.", at_least(0),
       dynamic=True, topic="message.timestamp.after.max.ms"),
    _b("log.message.downconversion.enable", "boolean", True,
       "Allow down-conversion for old fetch versions (kbroker serves v2 batches only).", dynamic=True,
       topic="message.downconversion.enable"),
    # --- group coordinator / __consumer_offsets
    _b("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets (fixed once created).",
       at_least(1)),
    _b("offsets.topic.replication.factor", "short", 3,
       "Replication factor of __consumer_offsets (capped at the live broker count by kbroker).", at_least(1)),
    _b("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", at_least(1)),
    _b("offsets.retention.minutes", "int", 10080, "How long committed offsets of an empty group are kept.",
       at_least(1)),
    _b("offsets.retention.check.interval.ms", "long", 600000, "How often stale offsets are looked for.",
       at_least(1)),
    _b("offsets.commit.timeout.ms", "int", 5000, "Time an offset commit waits for its write to be replicated.",
       at_least(1)),
    _b("group.initial.rebalance.delay.ms", "int", 3000,
       "Delay before the first rebalance of a new group, to let more members join.", at_least(0)),
    _b("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a classic group member may ask for."),
    _b("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a classic group member may ask for."),
    _b("group.max.size", "int", INT_MAX, "Maximum members in one classic group.", at_least(1)),
    _b("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval for consumer-protocol groups.",
       at_least(1)),
    _b("group.consumer.session.timeout.ms", "int", 45000, "Session timeout for consumer-protocol groups.",
       at_least(1)),
    # --- transaction coordinator / __transaction_state / producer state
    _b("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state (fixed once created).",
       at_least(1)),
    _b("transaction.state.log.replication.factor", "short", 3,
       "Replication factor of __transaction_state (capped at the live broker count by kbroker).", at_least(1)),
    _b("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state.", at_least(1)),
    _b("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state.",
       at_least(1)),
    _b("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout a producer may request.",
       at_least(1)),
    _b("transactional.id.expiration.ms", "int", _WEEK_MS,
       "Idle time after which a transactional id's state is expired.", at_least(1)),
    _b("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
       "How often timed-out transactions are looked for and aborted.", at_least(1)),
    _b("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
       "How often expired transactional ids are removed.", at_least(1)),
    _b("producer.id.expiration.ms", "int", _DAY_MS,
       "Idle time after which a partition forgets an idempotent producer's state.", at_least(1), dynamic=True),
    _b("producer.id.expiration.check.interval.ms", "int", 600000, "How often expired producer ids are removed.",
       at_least(1)),
    # --- kbroker extensions
    _b("kbroker.log.level", "string", "INFO", "kbroker extension: level of the broker's own logging.",
       ValidString(LOG_LEVELS, case_insensitive=True), dynamic=True),
]

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}


def _t(name: str, type_: str, default: Any, doc: str, valid: Validator | None = None) -> ConfigDef:
    return _b(name, type_, default, doc, valid, dynamic=True)


_TOPIC_DEFS: list[ConfigDef] = [
    _t("cleanup.policy", "list", "delete", "delete (time/size retention), compact (keep last value per key), or both.",
       ValidList(CLEANUP_POLICIES)),
    _t("compression.type", "string", "producer", "Final compression of the topic's data; 'producer' keeps the producer's.",
       ValidString(COMPRESSION_TYPES)),
    _t("compression.gzip.level", "int", -1, "Gzip level used when compression.type is gzip.", GZIP_LEVEL),
    _t("compression.lz4.level", "int", 9, "LZ4 level used when compression.type is lz4.", LZ4_LEVEL),
    _t("compression.zstd.level", "int", 3, "Zstd level used when compression.type is zstd.", ZSTD_LEVEL),
    _t("delete.retention.ms", "long", _DAY_MS, "How long tombstones are retained on a compacted topic.", at_least(0)),
    _t("file.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", at_least(0)),
    _t("flush.messages", "long", LONG_MAX, "Messages appended before the partition is fsynced.", at_least(1)),
    _t("flush.ms", "long", LONG_MAX, "Max time data may sit unflushed.", at_least(0)),
    _t("index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", at_least(0)),
    _t("max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.",
       at_least(1)),
    _t("max.message.bytes", "int", 1048588, "Largest record batch (after compression) accepted for this topic.",
       at_least(0)),
    _t("message.timestamp.type", "string", "CreateTime", "CreateTime (producer's timestamp) or LogAppendTime.",
       ValidString(TIMESTAMP_TYPES)),
    _t("message.timestamp.before.max.ms", "long", LONG_MAX,
       "How far in the past a CreateTime timestamp may be.", at_least(0)),
    _t("message.timestamp.after.max.ms", "long", LONG_MAX,
       "How far in the future a CreateTime timestamp may be.", at_least(0)),
    _t("min.cleanable.dirty.ratio", "double", 0.5, "Dirty/total ratio that makes the log eligible for cleaning.",
       between(0, 1)),
    _t("min.compaction.lag.ms", "long", 0, "Minimum age before a record may be compacted.", at_least(0)),
    _t("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all write.", at_least(1)),
    _t("preallocate", "boolean", False, "Preallocate segment files at their full size."),
    _t("retention.bytes", "long", -1, "Maximum partition size before old segments are deleted; -1 is unlimited."),
    _t("retention.ms", "long", _WEEK_MS, "Time to keep a segment before deleting it; -1 keeps forever.",
       at_least(-1)),
    _t("segment.bytes", "int", 1073741824, "Size at which a segment is rolled.", at_least(MIN_SEGMENT_BYTES)),
    _t("segment.index.bytes", "int", 10485760, "Maximum size of a segment's offset index.", at_least(4)),
    _t("segment.jitter.ms", "long", 0, "Random jitter subtracted from segment.ms to spread rolls.", at_least(0)),
    _t("segment.ms", "long", _WEEK_MS, "Time after which a segment is rolled even if not full.", at_least(1)),
    _t("unclean.leader.election.enable", "boolean", False, "Allow an out-of-sync replica to become leader."),
    _t("message.downconversion.enable", "boolean", True,
       "Allow down-conversion for old fetch versions (kbroker serves v2 batches only)."),
    _t("leader.replication.throttled.replicas", "list", "",
       "Replicas whose leader-side replication is throttled: partitionId:brokerId pairs or *.",
       ThrottledReplicasValidator()),
    _t("follower.replication.throttled.replicas", "list", "",
       "Replicas whose follower-side replication is throttled: partitionId:brokerId pairs or *.",
       ThrottledReplicasValidator()),
    _t("remote.storage.enable", "boolean", False, "Tiered storage for the topic (not supported by kbroker).",
       MustBeFalse("tiered storage is not supported by kbroker")),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _TOPIC_DEFS}

# Topic config -> broker configs supplying its default, highest precedence first
# (Kafka's ServerTopicConfigSynonyms).
TOPIC_SYNONYMS: dict[str, list[str]] = {}
for _d in _BROKER_DEFS:
    if _d.topic_name:
        TOPIC_SYNONYMS.setdefault(_d.topic_name, []).append(_d.name)
del _d

# Unit multipliers converting a broker synonym's value into the topic config's unit (ms).
_SYNONYM_SCALE = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}

# Main configs shown by `kbroker serve --help`.
_HELP_CONFIGS = (
    "node.id", "listeners", "advertised.listeners", "log.dirs", "num.partitions", "default.replication.factor",
    "auto.create.topics.enable", "log.segment.bytes", "log.retention.ms", "log.retention.hours",
    "log.retention.bytes", "log.cleanup.policy", "message.max.bytes", "offsets.topic.num.partitions",
    "transaction.state.log.num.partitions", "transaction.max.timeout.ms", "group.initial.rebalance.delay.ms",
    "cluster.id", "kbroker.log.level",
)


# --------------------------------------------------------------------------------------------
# Properties file parsing (java.util.Properties subset)
# --------------------------------------------------------------------------------------------
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WS = " \t\f"


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        if c != "\\":
            out.append(c)
        i += 1
    return "".join(out)


def _continues(line: str) -> bool:
    """A line continues when it ends with an odd number of backslashes."""
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def parse_properties(text: str) -> dict[str, str]:
    """Parse server.properties text: '#'/'!' comments, '=' ':' or whitespace separators, backslash
    continuation lines, Java escapes; keys and values are whitespace-trimmed.  Later keys win."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WS)
            i += 1
        # The key ends at the first unescaped '=', ':' or whitespace.
        j = 0
        while j < len(line) and line[j] not in "=:" + _WS:
            j += 2 if line[j] == "\\" else 1
        key = line[:j]
        rest = line[j:].lstrip(_WS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_WS)
        result[_unescape(key).strip()] = _unescape(rest).strip()
    return result


# --------------------------------------------------------------------------------------------
# Listeners
# --------------------------------------------------------------------------------------------
@dataclass
class Listener:
    name: str
    host: str
    port: int

    @property
    def bind_host(self) -> str:
        """Host to bind: '' / 0.0.0.0 mean all interfaces (asyncio wants None for that)."""
        return "" if self.host in ("", "0.0.0.0", "::") else self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_\-]+)://(\[[^\]]*\]|[^:/\[\]]*):(-?\d+)$")


def parse_listener(text: str, config_name: str = "listeners") -> Listener:
    m = _LISTENER_RE.match(text.strip())
    if not m:
        raise ConfigError(f"Invalid value {text!r} for configuration {config_name}: expected NAME://host:port")
    name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
    if host.startswith("["):
        host = host[1:-1]
    if not 0 <= port <= 65535:
        raise ConfigError(f"Invalid value {text!r} for configuration {config_name}: port out of range")
    return Listener(name, host, port)


def _parse_protocol_map(text: str, config_name: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, proto = item.partition(":")
        if not sep or not name.strip() or proto.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {item!r} for configuration {config_name}: expected LISTENER_NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        mapping[name.strip().upper()] = proto.strip().upper()
    return mapping


# --------------------------------------------------------------------------------------------
# DescribeConfigs entries
# --------------------------------------------------------------------------------------------
@dataclass
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    is_default: bool
    sensitive: bool
    config_type: int
    documentation: str
    # Synonyms in precedence order (the entry's own effective source first), for include_synonyms.
    synonyms: list[ConfigSynonym] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Broker configuration
# --------------------------------------------------------------------------------------------
class BrokerConfig:
    """Static (file + CLI) and dynamic (AlterConfigs) broker configuration."""

    def __init__(self, originals: dict[str, str] | None = None) -> None:
        self.originals: dict[str, str] = dict(originals or {})
        self._static: dict[str, Any] = {}
        # Per-broker dynamic configs (source 2) and cluster-wide dynamic defaults (source 3).
        self.dynamic: dict[str, str] = {}
        self.dynamic_default: dict[str, str] = {}
        self._listeners_cb: list[Callable[[str, str | None], None]] = []
        # Typed values and derived topic defaults are cached (produce/fetch paths ask for them per
        # request); every set_dynamic clears the caches.
        self._cache: dict[str, Any] = {}
        self._props_cache: dict[frozenset[tuple[str, str]], dict[str, str]] = {}
        for key, raw in self.originals.items():
            d = BROKER_CONFIGS.get(key)
            if d is None:
                if key not in TOPIC_CONFIGS:
                    log.warning("unknown broker config %r ignored (kept in originals)", key)
                else:
                    log.warning("%r is a topic config; set its broker default (log.*) instead", key)
                continue
            self._static[key] = d.parse(raw)
        self._check_listeners()

    # ---------------------------------------------------------------- loading
    @classmethod
    def load(cls, path: str | None, overrides: dict[str, str] | None = None) -> BrokerConfig:
        props: dict[str, str] = {}
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    props = parse_properties(f.read())
            except OSError as e:
                raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
        for k, v in (overrides or {}).items():
            if v is not None:
                props[k] = str(v)
        return cls(props)

    def _check_listeners(self) -> None:
        pmap = _parse_protocol_map(self._raw("listener.security.protocol.map") or "", "listener.security.protocol.map")
        for cfg in ("listeners", "advertised.listeners"):
            raw = self._raw(cfg)
            for li in [parse_listener(x, cfg) for x in parse_value(cfg, "list", raw) or []]:
                if li.name not in pmap:
                    raise ConfigError(
                        f"Invalid value for configuration {cfg}: listener name {li.name} has no entry in "
                        "listener.security.protocol.map"
                    )
        adv = {li.name for li in self.advertised_listeners}
        own = {li.name for li in self.listeners}
        if not adv <= own:
            raise ConfigError(
                f"advertised.listeners names {sorted(adv - own)} are not among the listeners {sorted(own)}"
            )

    # ---------------------------------------------------------------- raw / typed access
    def _raw(self, name: str) -> str | None:
        """Effective raw string: dynamic per-broker > dynamic cluster default > static > default."""
        if name in self.dynamic:
            return self.dynamic[name]
        if name in self.dynamic_default:
            return self.dynamic_default[name]
        if name in self.originals:
            return self.originals[name]
        d = BROKER_CONFIGS.get(name)
        return d.default if d else None

    def _source(self, name: str) -> int:
        if name in self.dynamic:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self.dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self.originals:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def is_set(self, name: str) -> bool:
        """True when the config was given explicitly (file, CLI or dynamically)."""
        return name in self.dynamic or name in self.dynamic_default or name in self.originals

    def get(self, name: str) -> Any:
        """Typed effective value (int/bool/float/str/list[str]/None). Unknown keys from the file
        come back as their raw string; a name never seen raises ConfigError."""
        try:
            value = self._cache[name]
        except KeyError:
            d = BROKER_CONFIGS.get(name)
            if d is None:
                if name in self.originals:
                    return self.originals[name]
                raise ConfigError(f"Unknown broker config name: {name}") from None
            value = self._cache[name] = parse_value(name, d.type, self._raw(name))
        # Lists are mutable: hand out a copy so callers cannot corrupt the cache.
        return list(value) if isinstance(value, list) else value

    def __getattr__(self, attr: str) -> Any:
        # Convenience: cfg.group_initial_rebalance_delay_ms -> get("group.initial.rebalance.delay.ms").
        # No Kafka config name contains '_', so the mapping is unambiguous.
        if attr.startswith("_"):
            raise AttributeError(attr)
        name = attr.replace("_", ".")
        if name in BROKER_CONFIGS:
            return self.get(name)
        raise AttributeError(f"{type(self).__name__} has no attribute {attr!r}")

    # ---------------------------------------------------------------- dynamic changes
    def validate_dynamic(self, name: str, value: str | None) -> None:
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise ConfigError(f"Unknown broker config name: {name}")
        if not d.dynamic:
            raise ConfigError(f"Cannot update these configs dynamically: {name} is read-only")
        if value is not None:
            d.parse(value)

    def set_dynamic(self, name: str, value: str | None, *, cluster_default: bool = False) -> None:
        """Apply an AlterConfigs change for this broker (or, with cluster_default, for all brokers:
        resource name ""); value None deletes the dynamic setting so the static/default one returns."""
        self.validate_dynamic(name, value)
        store = self.dynamic_default if cluster_default else self.dynamic
        if value is None:
            store.pop(name, None)
        else:
            store[name] = value.strip()
        self._cache.clear()
        self._props_cache.clear()
        for cb in list(self._listeners_cb):
            cb(name, value)

    def add_change_listener(self, cb: Callable[[str, str | None], None]) -> None:
        """Called as cb(name, new_value_or_None) after every set_dynamic."""
        self._listeners_cb.append(cb)

    # ---------------------------------------------------------------- typed convenience properties
    @property
    def node_id(self) -> int:
        if self.is_set("node.id"):
            return int(self.get("node.id"))
        if self.is_set("broker.id") and self.get("broker.id") >= 0:
            return int(self.get("broker.id"))
        return 1

    @property
    def cluster_id(self) -> str | None:
        return self.get("cluster.id") or None

    @property
    def listeners(self) -> list[Listener]:
        return [parse_listener(x, "listeners") for x in self.get("listeners") or []]

    @property
    def advertised_listeners(self) -> list[Listener]:
        if self.is_set("advertised.listeners") and self.get("advertised.listeners"):
            adv = [parse_listener(x, "advertised.listeners") for x in self.get("advertised.listeners")]
        else:
            adv = [Listener(li.name, li.host, li.port) for li in self.listeners]
        # Like Kafka, controller listeners are not advertised to clients.
        controller = {n.upper() for n in self.get("controller.listener.names") or []}
        adv = [li for li in adv if li.name not in controller]
        for li in adv:
            if li.host in ("", "0.0.0.0", "::"):
                li.host = "127.0.0.1"
        return adv

    @property
    def security_protocol_map(self) -> dict[str, str]:
        return _parse_protocol_map(self._raw("listener.security.protocol.map") or "", "listener.security.protocol.map")

    @property
    def log_dirs(self) -> list[str]:
        if self.is_set("log.dirs") and self.get("log.dirs"):
            return list(self.get("log.dirs"))
        return list(self.get("log.dir"))

    @property
    def num_partitions(self) -> int:
        return self.get("num.partitions")

    @property
    def default_replication_factor(self) -> int:
        return self.get("default.replication.factor")

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.get("auto.create.topics.enable")

    @property
    def delete_topic_enable(self) -> bool:
        return self.get("delete.topic.enable")

    @property
    def socket_request_max_bytes(self) -> int:
        return self.get("socket.request.max.bytes")

    @property
    def message_max_bytes(self) -> int:
        return self.get("message.max.bytes")

    @property
    def offsets_topic_num_partitions(self) -> int:
        return self.get("offsets.topic.num.partitions")

    @property
    def transaction_state_log_num_partitions(self) -> int:
        return self.get("transaction.state.log.num.partitions")

    @property
    def log_retention_ms(self) -> int:
        """Kafka's precedence: log.retention.ms > .minutes > .hours; any negative result means -1 (forever)."""
        return self._topic_default_value("retention.ms")[0]

    @property
    def log_roll_ms(self) -> int:
        return self._topic_default_value("segment.ms")[0]

    @property
    def log_flush_interval_ms(self) -> int:
        return self._topic_default_value("flush.ms")[0]

    @property
    def log_level(self) -> int:
        level = str(self.get("kbroker.log.level")).upper()
        return logging.getLevelNamesMapping()[level]

    # ---------------------------------------------------------------- topic defaults
    def _topic_default_value(self, topic_name: str) -> tuple[Any, str | None, int]:
        """(typed value, broker synonym that supplied it or None, its source) for a topic config."""
        tdef = TOPIC_CONFIGS[topic_name]
        synonyms = TOPIC_SYNONYMS.get(topic_name, [])
        # An explicitly set synonym wins in precedence order; otherwise the first synonym with a
        # non-null default does (log.retention.hours=168 when nothing is set).
        chosen = next((s for s in synonyms if self.is_set(s) and self._raw(s) is not None), None)
        if chosen is None:
            chosen = next((s for s in synonyms if BROKER_CONFIGS[s].default is not None), None)
        if chosen is None:
            return parse_value(topic_name, tdef.type, tdef.default), None, ConfigSource.DEFAULT_CONFIG
        value = self.get(chosen)
        if chosen in _SYNONYM_SCALE:
            value = value * _SYNONYM_SCALE[chosen]
        if topic_name == "retention.ms" and value < 0:
            value = -1
        return value, chosen, self._source(chosen)

    def topic_defaults(self) -> dict[str, str]:
        """Topic config name -> effective default string, derived from the broker's log.* settings."""
        cached = self._cache.get("\0topic_defaults")
        if cached is None:
            cached = self._cache["\0topic_defaults"] = {
                name: format_value(d.type, self._topic_default_value(name)[0]) or ""
                for name, d in TOPIC_CONFIGS.items()
            }
        return dict(cached)

    def _synonyms(self, names: list[str], sensitive: bool = False) -> list[ConfigSynonym]:
        """Kafka's synonym listing: every dynamic per-broker value of the names (in precedence
        order), then dynamic cluster defaults, then static values, then non-null defaults."""
        out: list[ConfigSynonym] = []
        layers = (
            (self.dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.originals, ConfigSource.STATIC_BROKER_CONFIG),
            ({n: BROKER_CONFIGS[n].default for n in names}, ConfigSource.DEFAULT_CONFIG),
        )
        for store, source in layers:
            for n in names:
                v = store.get(n)
                if v is not None:
                    out.append(ConfigSynonym(n, None if sensitive else v, source))
        return out

    # ---------------------------------------------------------------- DescribeConfigs (BROKER)
    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        wanted = list(BROKER_CONFIGS) if names is None else [n for n in names if n in BROKER_CONFIGS]
        entries: list[ConfigEntry] = []
        for name in wanted:
            d = BROKER_CONFIGS[name]
            source = self._source(name)
            value = format_value(d.type, self.get(name))
            # A log.* config's synonyms are all spellings of the same topic default (retention
            # ms/minutes/hours); like Kafka, those of higher precedence than `name` are dropped.
            names = TOPIC_SYNONYMS[d.topic_name] if d.topic_name else [name]
            synonyms = self._synonyms(names, d.sensitive)
            while synonyms and synonyms[0].name != name:
                synonyms.pop(0)
            entries.append(
                ConfigEntry(
                    name=name,
                    value=None if d.sensitive else value,
                    source=source,
                    read_only=not d.dynamic,
                    is_default=source == ConfigSource.DEFAULT_CONFIG,
                    sensitive=d.sensitive,
                    config_type=d.config_type,
                    documentation=d.doc,
                    synonyms=synonyms,
                )
            )
        return entries

    # ---------------------------------------------------------------- cluster id / meta.properties
    def ensure_meta_properties(self) -> str:
        """Return the cluster id, creating or checking ``meta.properties`` in every log dir as Kafka
        does (version, cluster.id, node.id, directory.id).  A configured cluster.id must match."""
        found: str | None = None
        for d in self.log_dirs:
            path = os.path.join(d, "meta.properties")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    meta = parse_properties(f.read())
                cid = meta.get("cluster.id")
                if found is not None and cid != found:
                    raise ConfigError(f"log dirs disagree on cluster.id ({found} vs {cid} in {path})")
                found = cid
                if "node.id" in meta and int(meta["node.id"]) != self.node_id:
                    raise ConfigError(
                        f"{path} belongs to node.id {meta['node.id']}, but this broker is node.id {self.node_id}"
                    )
        if found and self.cluster_id and found != self.cluster_id:
            raise ConfigError(f"configured cluster.id {self.cluster_id} does not match stored cluster.id {found}")
        cluster_id = found or self.cluster_id or new_cluster_id()
        for d in self.log_dirs:
            path = os.path.join(d, "meta.properties")
            if os.path.exists(path):
                continue
            os.makedirs(d, exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(
                    "#\n#Written by kbroker\n"
                    f"cluster.id={cluster_id}\ndirectory.id={new_cluster_id()}\nnode.id={self.node_id}\nversion=1\n"
                )
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        return cluster_id


def new_cluster_id() -> str:
    """A random id in Kafka's Uuid string form (22 chars of unpadded URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# --------------------------------------------------------------------------------------------
# Topic configs
# --------------------------------------------------------------------------------------------
def validate_topic_configs(configs: dict[str, str | None]) -> None:
    """Raise ConfigError for an unknown topic config name, a null or invalid value, or
    min.compaction.lag.ms > max.compaction.lag.ms (Kafka's LogConfig.validate rules)."""
    for name, raw in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        if raw is None:
            raise ConfigError(f"Null value not supported for topic config {name}")
        d.parse(raw)
    if "min.compaction.lag.ms" in configs and "max.compaction.lag.ms" in configs:
        lo = parse_value("min.compaction.lag.ms", "long", configs["min.compaction.lag.ms"])
        hi = parse_value("max.compaction.lag.ms", "long", configs["max.compaction.lag.ms"])
        if lo > hi:
            raise ConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})"
            )


def log_config_properties(overrides: dict[str, str], broker: BrokerConfig) -> dict[str, str]:
    """Effective topic config (broker-derived defaults, then the topic's overrides) by topic config name."""
    key = frozenset(overrides.items())
    cached = broker._props_cache.get(key)
    if cached is None:
        cached = broker.topic_defaults()
        for name, raw in overrides.items():
            d = TOPIC_CONFIGS.get(name)
            cached[name] = (format_value(d.type, d.parse(raw)) or "") if d else raw
        if len(broker._props_cache) > 1024:
            broker._props_cache.clear()
        broker._props_cache[key] = cached
    return dict(cached)


def parse_topic_configs(props: dict[str, str]) -> dict[str, Any]:
    """Typed values (int/bool/float/str/list) of topic config strings; unknown names are dropped."""
    return {n: TOPIC_CONFIGS[n].parse(v) for n, v in props.items() if n in TOPIC_CONFIGS}


def describe_topic_config(
    overrides: dict[str, str], broker: BrokerConfig, names: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs for a TOPIC: overrides have source TOPIC_CONFIG (1); inherited values carry
    the source of the broker synonym that supplied them (2/3/4) or DEFAULT_CONFIG (5)."""
    wanted = list(TOPIC_CONFIGS) if names is None else [n for n in names if n in TOPIC_CONFIGS]
    entries: list[ConfigEntry] = []
    for name in wanted:
        d = TOPIC_CONFIGS[name]
        default_value, synonym, syn_source = broker._topic_default_value(name)
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            try:
                value = format_value(d.type, d.parse(overrides[name]))
            except ConfigError:
                # Stored before a rule tightened: report it as stored rather than failing Describe.
                value = overrides[name]
            source = ConfigSource.TOPIC_CONFIG
            synonyms.append(ConfigSynonym(name, value, source))
        else:
            value = format_value(d.type, default_value)
            source = syn_source
        synonyms += broker._synonyms(TOPIC_SYNONYMS.get(name, []))
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=source,
                read_only=False,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                sensitive=False,
                config_type=d.config_type,
                documentation=d.doc,
                synonyms=synonyms,
            )
        )
    return entries


# --------------------------------------------------------------------------------------------
# Documentation
# --------------------------------------------------------------------------------------------
def _md(s: str | None) -> str:
    if s is None:
        return "null"
    if s == "":
        return '""'
    return "`" + s.replace("|", "\\|") + "`"


def config_reference_markdown() -> str:
    """Markdown reference of every broker and topic config (docs/config-reference.md)."""
    out = [
        "# kbroker configuration reference",
        "",
        "<!-- Generated by broker.config.config_reference_markdown(); do not edit by hand. -->",
        "",
        "kbroker reads a Kafka-style `server.properties` file (`kbroker serve --config FILE`); command-line",
        "overrides win over the file. Names, types, defaults and validation follow Apache Kafka. Configs marked",
        "*dynamic* can be changed at runtime with `kafka-configs --alter --entity-type brokers` (IncrementalAlterConfigs);",
        "unknown keys in the file are kept and logged as warnings.",
        "",
        "## Broker configs",
        "",
        "| Name | Type | Default | Valid values | Dynamic | Topic default for | Description |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in _BROKER_DEFS:
        out.append(
            f"| `{d.name}` | {d.type} | {_md(d.default)} | {d.valid.describe() if d.valid else ''} | "
            f"{'yes' if d.dynamic else ''} | {('`' + d.topic_name + '`') if d.topic_name else ''} | {d.doc} |"
        )
    out += [
        "",
        "Precedence where Kafka has several spellings: `log.retention.ms` > `log.retention.minutes` >",
        "`log.retention.hours`; `log.roll.ms` > `log.roll.hours`; `log.flush.interval.ms` >",
        "`log.flush.scheduler.interval.ms`; `node.id` > `broker.id`; `log.dirs` > `log.dir`.",
        "",
        "## Topic configs",
        "",
        "Set per topic with CreateTopics / `kafka-configs --alter --entity-type topics`. A topic config that is not",
        "set takes its value from the broker config listed as its server default.",
        "",
        "| Name | Type | Default | Valid values | Server default property | Description |",
        "|---|---|---|---|---|---|",
    ]
    for d in _TOPIC_DEFS:
        server = ", ".join(f"`{s}`" for s in TOPIC_SYNONYMS.get(d.name, []))
        out.append(
            f"| `{d.name}` | {d.type} | {_md(d.default)} | {d.valid.describe() if d.valid else ''} | "
            f"{server} | {d.doc} |"
        )
    out.append("")
    return "\n".join(out)


def serve_help_epilog() -> str:
    """Short list of the main configs for `kbroker serve --help`."""
    lines = [
        "main configuration (server.properties keys, overridable with --override KEY=VALUE;",
        "see docs/config-reference.md for all of them):",
    ]
    # Effective defaults where Kafka's own default is null but kbroker derives one.
    derived = {"node.id": "1", "advertised.listeners": "listeners, wildcard host -> 127.0.0.1",
               "log.dirs": "log.dir = ./data", "log.retention.ms": "from log.retention.hours",
               "cluster.id": "generated, kept in meta.properties"}
    width = max(len(n) for n in _HELP_CONFIGS)
    for name in _HELP_CONFIGS:
        d = BROKER_CONFIGS[name]
        default = derived.get(name) or d.default
        lines.append(f"  {name.ljust(width)}  (default {default})")
    return "\n".join(lines)


if __name__ == "__main__":  # regenerate docs/config-reference.md
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "docs",
                                                                  "config-reference.md")
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(config_reference_markdown())
