"""Group-level dynamic configs (Kafka's GroupConfig): set with IncrementalAlterConfigs (or
AlterConfigs) on a GROUP (32) resource, described with DescribeConfigs, stored in the metadata
store (``MetadataStore.group_configs``) so every broker sees them.

A group's value overrides the broker default named after it (``share.record.lock.duration.ms`` <-
``group.share.record.lock.duration.ms``, ...). Values are validated as Kafka's
GroupConfig.validate does: types, ``share.auto.offset.reset`` in latest / earliest /
``by_duration:<ISO-8601 duration>``, ``share.isolation.level`` in read_committed /
read_uncommitted, and timeouts within the broker's min/max bounds (INVALID_CONFIG otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.config.types import ConfigEntry, ConfigError, ConfigType

GROUP_CONFIG_SOURCE = 8  # Kafka's ConfigSource.GROUP_CONFIG
DEFAULT_CONFIG_SOURCE = 5


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: str  # "int" | "string"
    broker_default: str | None  # the broker config supplying the default, if any
    default: str
    bounds: tuple[str, str] | None = None  # broker configs bounding the value (min, max)
    doc: str = ""


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef("consumer.session.timeout.ms", "int", "group.consumer.session.timeout.ms", "45000",
                   ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
                   "Session timeout of the group's consumer-protocol members."),
    GroupConfigDef("consumer.heartbeat.interval.ms", "int", "group.consumer.heartbeat.interval.ms", "5000",
                   ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
                   "Heartbeat interval of the group's consumer-protocol members."),
    GroupConfigDef("share.session.timeout.ms", "int", "group.share.session.timeout.ms", "45000",
                   ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
                   "Session timeout of the share group's members."),
    GroupConfigDef("share.heartbeat.interval.ms", "int", "group.share.heartbeat.interval.ms", "5000",
                   ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
                   "Heartbeat interval of the share group's members."),
    GroupConfigDef("share.record.lock.duration.ms", "int", "group.share.record.lock.duration.ms", "30000",
                   ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
                   "How long a member holds the records it acquired."),
    GroupConfigDef("share.auto.offset.reset", "string", None, "latest", None,
                   "Where a share-partition without state starts: latest, earliest, or by_duration:<ISO-8601 "
                   "duration> (the first record at most that old)."),
    GroupConfigDef("share.isolation.level", "string", None, "read_uncommitted", None,
                   "read_committed: share consumers get no records of aborted transactions and none past the "
                   "last stable offset; read_uncommitted: every record up to the high watermark."),
)}

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMn.nS, Java's Duration.parse subset) in milliseconds."""
    m = _DURATION.match(text.strip())
    if m is None or not any(m.groups()) or text.strip().upper().endswith("T"):
        raise ConfigError(f"Invalid duration: {text}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def parse_auto_offset_reset(value: str) -> tuple[str, int]:
    """('latest' | 'earliest', 0) or ('by_duration', milliseconds)."""
    v = value.strip().lower()
    if v in ("latest", "earliest"):
        return v, 0
    if v.startswith("by_duration:"):
        ms = parse_duration_ms(value.strip()[len("by_duration:"):])
        if ms < 0:
            raise ConfigError(f"Invalid value {value} for configuration share.auto.offset.reset: negative duration")
        return "by_duration", ms
    raise ConfigError(f"Invalid value {value} for configuration share.auto.offset.reset: String must be one of: "
                      "latest, earliest, by_duration:PnDTnHnMn.nS")


def validate(props: dict[str, str], broker_get: Callable[[str], Any]) -> None:
    """Kafka's GroupConfig.validate: names, types, values and the broker's bounds."""
    for name, value in props.items():
        d = GROUP_CONFIGS.get(name)
        if d is None:
            raise ConfigError(f"Unknown group config name: {name}")
        if d.type == "int":
            try:
                n = int(value)
            except (TypeError, ValueError):
                raise ConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
            if name == "share.record.lock.duration.ms" and n < 1000:
                raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least 1000")
            if n < 1:
                raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least 1")
            if d.bounds is not None:
                lo, hi = (int(broker_get(b)) for b in d.bounds)
                if n < lo:
                    raise ConfigError(f"{name} must be greater than or equal to {d.bounds[0]}")
                if n > hi:
                    raise ConfigError(f"{name} must be less than or equal to {d.bounds[1]}")
        elif name == "share.auto.offset.reset":
            parse_auto_offset_reset(value)
        elif name == "share.isolation.level" and value not in ("read_committed", "read_uncommitted"):
            raise ConfigError(f"Invalid value {value} for configuration {name}: String must be one of: "
                              "read_committed, read_uncommitted")


def effective(group_configs: dict[str, str], name: str, broker_get: Callable[[str], Any]) -> str:
    """The value in force for a group: its own, else the broker default it derives from."""
    if name in group_configs:
        return group_configs[name]
    d = GROUP_CONFIGS[name]
    if d.broker_default is not None:
        value = broker_get(d.broker_default)
        if value is not None:
            return str(value)
    return d.default


def describe(group_configs: dict[str, str], broker_get: Callable[[str], Any]) -> list[ConfigEntry]:
    out = []
    for name, d in GROUP_CONFIGS.items():
        own = name in group_configs
        out.append(ConfigEntry(name=name, value=effective(group_configs, name, broker_get),
                               source=GROUP_CONFIG_SOURCE if own else DEFAULT_CONFIG_SOURCE, read_only=False,
                               is_default=not own, sensitive=False,
                               config_type=ConfigType.INT if d.type == "int" else ConfigType.STRING,
                               documentation=d.doc))
    return out
