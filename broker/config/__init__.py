"""Broker and topic configuration with Apache Kafka's names, types, defaults and validation.

Reads a ``server.properties`` file (a ``java.util.Properties`` subset), applies CLI overrides and
runtime (AlterConfigs) changes, answers DescribeConfigs for brokers and topics with Kafka's source
and type codes, and derives topic-level defaults from the broker's ``log.*`` settings exactly the
way Kafka's ``ServerTopicConfigSynonyms`` does.

The package keeps definitions apart from the machinery:
- ``types``: wire codes, ConfigDef, value parsing/formatting, DescribeConfigs entries;
- ``validators``: Kafka's validator family;
- ``broker_defs`` / ``topic_defs``: the definitions, as data;
- ``properties``: the server.properties parser; ``listeners``: listener and protocol-map parsing;
- ``broker_config``: BrokerConfig; ``topic_config``: topic overrides and their DescribeConfigs;
- ``reference``: docs/config-reference.md and the ``kbroker serve --help`` epilog.
Everything callers use is re-exported here.
"""

from broker.config.broker_config import BrokerConfig, new_cluster_id
from broker.config.broker_defs import (
    BROKER_CONFIGS,
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    LOG_LEVELS,
    MIN_SEGMENT_BYTES,
    TIMESTAMP_TYPES,
)
from broker.config.listeners import SECURITY_PROTOCOLS, Listener, parse_listener, parse_protocol_map
from broker.config.properties import parse_properties
from broker.config.reference import config_reference_markdown, serve_help_epilog
from broker.config.topic_config import (
    describe_topic_config,
    log_config_properties,
    parse_topic_configs,
    topic_log_config,
    topic_max_message_bytes,
    topic_min_insync_replicas,
    validate_topic_configs,
)
from broker.config.topic_defs import TOPIC_CONFIGS, TOPIC_SYNONYMS
from broker.config.types import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    format_value,
    parse_value,
)

__all__ = [
    "BROKER_CONFIGS", "CLEANUP_POLICIES", "COMPRESSION_TYPES", "INT_MAX", "INT_MIN", "LOG_LEVELS", "LONG_MAX",
    "LONG_MIN", "MIN_SEGMENT_BYTES", "SECURITY_PROTOCOLS", "TIMESTAMP_TYPES", "TOPIC_CONFIGS", "TOPIC_SYNONYMS",
    "BrokerConfig", "ConfigDef", "ConfigEntry", "ConfigError", "ConfigSource", "ConfigSynonym", "ConfigType",
    "Listener", "config_reference_markdown", "describe_topic_config", "format_value", "log_config_properties",
    "new_cluster_id", "parse_listener", "parse_properties", "parse_protocol_map", "parse_topic_configs",
    "parse_value", "serve_help_epilog", "topic_log_config", "topic_max_message_bytes", "topic_min_insync_replicas",
    "validate_topic_configs",
]
