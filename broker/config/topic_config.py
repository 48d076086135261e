"""Topic-level configs: validation of overrides, effective values and DescribeConfigs for a TOPIC."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker.config.broker_config import BrokerConfig
from broker.config.topic_defs import TOPIC_CONFIGS, TOPIC_SYNONYMS
from broker.config.types import (
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    format_value,
    parse_value,
)
from storage.log_config import LogConfig


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


def topic_log_config(overrides: dict[str, str], broker: BrokerConfig) -> LogConfig:
    """The storage configuration of a topic with ``overrides`` under this broker's defaults."""
    return LogConfig.from_properties(log_config_properties(overrides, broker))


def topic_max_message_bytes(overrides: dict[str, str], broker: BrokerConfig) -> int:
    return int(log_config_properties(overrides, broker).get("max.message.bytes", broker.message_max_bytes))


def topic_min_insync_replicas(overrides: dict[str, str], broker: BrokerConfig) -> int:
    return int(log_config_properties(overrides, broker).get("min.insync.replicas", 1))


def parse_topic_configs(props: dict[str, str]) -> dict[str, Any]:
    """Typed values (int/bool/float/str/list) of topic config strings; unknown names are dropped."""
    return {n: TOPIC_CONFIGS[n].parse(v) for n, v in props.items() if n in TOPIC_CONFIGS}


def describe_topic_config(
    overrides: dict[str, str], broker: BrokerConfig, names: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs for a TOPIC, as Kafka's ConfigHelper.createTopicConfigEntry: an override
    comes first with source TOPIC_CONFIG (1); then the synonyms of the broker config that supplies
    the default (ServerTopicConfigSynonyms' first, e.g. log.retention.ms, described as a broker
    config: its dynamic, static and default values over all its spellings, from its own name on).
    The entry's source is the first synonym's, DEFAULT_CONFIG (5) without any. Kafka's rule has a
    consequence kept here: retention.ms inherited from log.retention.hours alone lists no synonym
    and reports DEFAULT_CONFIG (its value is the effective one all the same)."""
    wanted = list(TOPIC_CONFIGS) if names is None else [n for n in names if n in TOPIC_CONFIGS]
    entries: list[ConfigEntry] = []
    for name in wanted:
        d = TOPIC_CONFIGS[name]
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            try:
                value = format_value(d.type, d.parse(overrides[name]))
            except ConfigError:
                # Stored before a rule tightened: report it as stored rather than failing Describe.
                value = overrides[name]
            synonyms.append(ConfigSynonym(name, value, ConfigSource.TOPIC_CONFIG))
        else:
            value = format_value(d.type, broker._topic_default_value(name)[0])
        if name in TOPIC_SYNONYMS:
            synonyms += broker.synonyms(TOPIC_SYNONYMS[name][0], d.sensitive)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
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
