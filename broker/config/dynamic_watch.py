"""Dynamic broker configs, from the metadata store into this broker's BrokerConfig, on every broker.

AlterConfigs / IncrementalAlterConfigs on a BROKER resource only write the metadata store; every
broker applies what the store holds, as Kafka's DynamicConfigPublisher applies the config records of
the metadata log: the cluster-wide default (resource "") on every broker, a per-broker set (resource
"<id>") on that broker only. On a single node the local store reports its own writes; in a cluster
the etcd store's watch reports every change, also those made through another broker, within moments.

What is applied follows Kafka's DynamicBrokerConfig.fromPersistentProps: a value that does not parse
or validate, and a per-broker-only config found in the cluster default, are left out with an error
in the log; the rest applies. Side effects (``add_effect``) run once per change with the names whose
stored value changed; the broker registers them (broker/config_effects.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.config.broker_config import BrokerConfig
from broker.config.kafka_broker_configs import per_broker_only

if TYPE_CHECKING:
    from cluster.metadata_store import MetadataStore

log = logging.getLogger("broker.config")

Effect = Callable[[set[str]], None]


class DynamicConfigWatch:
    def __init__(self, config: BrokerConfig, store: MetadataStore, node_id: int) -> None:
        self.config = config
        self.store = store
        self.node_id = node_id
        self._effects: list[Effect] = []

    def add_effect(self, fn: Effect) -> None:
        """``fn(changed names)`` after every change that applied (the names of both layers)."""
        self._effects.append(fn)

    def start(self) -> set[str]:
        """Apply what the store holds now and follow its changes from here on; the names applied."""
        self.store.add_broker_config_listener(self._on_change)
        return self.sync(None) | self.sync(self.node_id)

    def _on_change(self, resource: int | None) -> None:
        if resource is None or resource == self.node_id:
            self.sync(resource)

    def sync(self, resource: int | None) -> set[str]:
        """Make the config layer of ``resource`` (None: the cluster default, else this node) equal
        to the store's; runs the effects when something changed, and returns the changed names."""
        stored = self.store.broker_dynamic_configs(resource)
        if resource is None:
            ignored = sorted(n for n in stored if per_broker_only(n))
            if ignored:
                log.error("per-broker configs defined at default cluster level will be ignored: %s", ignored)
                stored = {n: v for n, v in stored.items() if n not in ignored}
        changed = self.config.replace_dynamic(stored, cluster_default=resource is None)
        if changed:
            log.info("applied %s dynamic configs: %s", "cluster-wide" if resource is None else f"broker {resource}",
                     ", ".join(f"{n}={self._shown(n, stored.get(n))}" for n in sorted(changed)))
            for fn in list(self._effects):
                try:
                    fn(changed)
                except Exception:
                    log.exception("applying the side effects of dynamic configs %s failed", sorted(changed))
        return changed

    def _shown(self, name: str, value: str | None) -> str:
        d = self.config.definition(name)
        if value is None:
            return "(deleted)"
        return "[hidden]" if d is not None and d.sensitive else value
