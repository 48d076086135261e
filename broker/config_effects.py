"""What a dynamic broker config change does to a running broker (Kafka's BrokerReconfigurables).

Called by broker/config/dynamic_watch.py with the names whose dynamic value changed, on every broker
the change concerns. Most configs need nothing here because they are read where they are used, at
each use: min.insync.replicas (also by acks=all produces already waiting: their outcome is decided
when the high watermark reaches them), num.replica.fetchers, log.cleaner.backoff.ms (the cleaner's
next sleep), the connection limits (server.py reloads them through a BrokerConfig change listener),
unclean.leader.election.enable (the controller reads the stored configs). The others:

* the broker defaults of topic configs (log.retention.ms, log.segment.bytes, message.max.bytes,
  log.cleaner.*, compression.type, ...): every partition's log config is rebuilt from the new
  defaults and its topic's overrides, as Kafka's DynamicLogConfig.updateLogsConfig does, so
  retention, rolling, the cleaner and produce validation use them at once;
* producer.id.expiration.ms: every partition's producer state (DynamicProducerStateManagerConfig);
* kbroker.log.level: the level of the broker's logging.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.config import BROKER_CONFIGS, topic_log_config, topic_max_message_bytes

# Broker configs that supply the default of a topic config (Kafka's ServerTopicConfigSynonyms).
TOPIC_DEFAULT_CONFIGS = frozenset(n for n, d in BROKER_CONFIGS.items() if d.topic_name)


def apply_config_effects(broker: Any, names: set[str]) -> None:
    """``broker``: the broker.broker.Broker being run (its parts may not all be built yet: the
    stored configs are applied first thing at start)."""
    cfg = broker.config
    partitions = getattr(broker, "replica_manager", None)
    if partitions is not None and names & TOPIC_DEFAULT_CONFIGS:
        _update_log_configs(broker.metadata.topics(), partitions, cfg)
    log_manager = getattr(broker, "log_manager", None)
    if log_manager is not None and names & TOPIC_DEFAULT_CONFIGS:
        log_manager.default_config = topic_log_config({}, cfg)
    if partitions is not None and "producer.id.expiration.ms" in names:
        ms = int(cfg.get("producer.id.expiration.ms"))
        for part in list(partitions.all()):
            if part.producer_state is not None:
                part.producer_state.producer_id_expiration_ms = ms
    if "kbroker.log.level" in names:
        logging.getLogger().setLevel(cfg.log_level)


def _update_log_configs(topics: dict[str, Any], partitions: Any, cfg: Any) -> None:
    """Every partition's log config and max message size, from the broker defaults and its topic's
    overrides: one pass over the partitions, each topic's config built once."""
    built: dict[str, tuple[Any, int]] = {}
    for part in list(partitions.all()):
        entry = built.get(part.topic)
        if entry is None:
            info = topics.get(part.topic)
            overrides = info.configs if info is not None else {}
            entry = built[part.topic] = (topic_log_config(overrides, cfg), topic_max_message_bytes(overrides, cfg))
        part.log.update_config(entry[0])
        part.max_message_bytes = entry[1]
