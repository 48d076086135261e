"""Per-partition log configuration: Kafka's topic-level config names, meanings and defaults.

`LogConfig.from_properties` reads topic configs (``segment.bytes`` ...); `from_broker_properties`
maps the broker-wide ``log.*`` defaults (``log.segment.bytes``, ``log.retention.hours`` ...) onto
the same fields, so a broker can build its default config and then apply topic overrides with
`with_overrides`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

LONG_MAX = 9223372036854775807

# topic config name -> (field name, parser)
_TOPIC_KEYS: dict[str, tuple[str, type]] = {
    "segment.bytes": ("segment_bytes", int),
    "segment.ms": ("segment_ms", int),
    "segment.index.bytes": ("segment_index_bytes", int),
    "index.interval.bytes": ("index_interval_bytes", int),
    "retention.ms": ("retention_ms", int),
    "retention.bytes": ("retention_bytes", int),
    "flush.messages": ("flush_messages", int),
    "flush.ms": ("flush_ms", int),
    "cleanup.policy": ("cleanup_policy", str),
    "delete.retention.ms": ("delete_retention_ms", int),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", int),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
    "message.timestamp.type": ("message_timestamp_type", str),
    "file.delete.delay.ms": ("file_delete_delay_ms", int),
}

# broker config name -> (field name, parser, multiplier to the field's unit)
_BROKER_KEYS: dict[str, tuple[str, type, int]] = {
    "log.segment.bytes": ("segment_bytes", int, 1),
    "log.roll.hours": ("segment_ms", int, 3600000),
    "log.roll.ms": ("segment_ms", int, 1),
    "log.index.size.max.bytes": ("segment_index_bytes", int, 1),
    "log.index.interval.bytes": ("index_interval_bytes", int, 1),
    "log.retention.hours": ("retention_ms", int, 3600000),
    "log.retention.minutes": ("retention_ms", int, 60000),
    "log.retention.ms": ("retention_ms", int, 1),
    "log.retention.bytes": ("retention_bytes", int, 1),
    "log.flush.interval.messages": ("flush_messages", int, 1),
    "log.flush.interval.ms": ("flush_ms", int, 1),
    "log.cleanup.policy": ("cleanup_policy", str, 1),
    "log.cleaner.delete.retention.ms": ("delete_retention_ms", int, 1),
    "log.cleaner.min.compaction.lag.ms": ("min_compaction_lag_ms", int, 1),
    "log.cleaner.max.compaction.lag.ms": ("max_compaction_lag_ms", int, 1),
    "log.cleaner.min.cleanable.ratio": ("min_cleanable_dirty_ratio", float, 1),
    "log.message.timestamp.type": ("message_timestamp_type", str, 1),
    "log.segment.delete.delay.ms": ("file_delete_delay_ms", int, 1),
}
# Kafka: the more precise unit wins when several are given (ms > minutes > hours).
_BROKER_PRECEDENCE = {"log.roll.hours": 0, "log.roll.ms": 1,
                      "log.retention.hours": 0, "log.retention.minutes": 1, "log.retention.ms": 2}


@dataclass
class LogConfig:
    """Kafka topic-level log settings (names in comments), with Kafka's defaults."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms
    segment_index_bytes: int = 10485760  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 604800000  # retention.ms (-1 = forever)
    retention_bytes: int = -1  # retention.bytes
    flush_messages: int = LONG_MAX  # flush.messages
    flush_ms: int = LONG_MAX  # flush.ms
    cleanup_policy: str = "delete"  # cleanup.policy: delete | compact | compact,delete
    delete_retention_ms: int = 86400000  # delete.retention.ms
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    extra: dict[str, str] = field(default_factory=dict)  # other topic configs, kept verbatim

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LogConfig:
        """Build from Kafka topic config names; unknown keys are kept in ``extra``."""
        return cls().with_overrides(props)

    @classmethod
    def from_broker_properties(cls, props: dict[str, str]) -> LogConfig:
        """Build the broker-wide default from ``log.*`` server.properties names."""
        values: dict[str, object] = {}
        rank: dict[str, int] = {}
        for key, raw in props.items():
            spec = _BROKER_KEYS.get(key)
            if spec is None:
                continue
            name, parse, mult = spec
            prec = _BROKER_PRECEDENCE.get(key, 0)
            if name in rank and rank[name] > prec:
                continue
            value = parse(str(raw).strip())
            values[name] = value * mult if mult != 1 else value  # type: ignore[operator]
            rank[name] = prec
        return dataclasses.replace(cls(), **values)  # type: ignore[arg-type]

    def with_overrides(self, props: dict[str, str]) -> LogConfig:
        """A copy with topic-level overrides (Kafka topic config names) applied."""
        values: dict[str, object] = {}
        extra = dict(self.extra)
        for key, raw in props.items():
            spec = _TOPIC_KEYS.get(key)
            if spec is None:
                extra[key] = str(raw)
                continue
            name, parse = spec
            values[name] = parse(str(raw).strip())
        return dataclasses.replace(self, extra=extra, **values)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """Kafka topic config names -> string values (for DescribeConfigs)."""
        out = {key: _fmt(getattr(self, name)) for key, (name, _) in _TOPIC_KEYS.items()}
        out.update(self.extra)
        return out

    @property
    def delete_enabled(self) -> bool:
        return "delete" in _policies(self.cleanup_policy)

    @property
    def compact_enabled(self) -> bool:
        return "compact" in _policies(self.cleanup_policy)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


def _policies(value: str) -> set[str]:
    return {p.strip() for p in value.replace("[", "").replace("]", "").split(",") if p.strip()}


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)
