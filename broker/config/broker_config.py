"""BrokerConfig: a broker's effective configuration (file, CLI overrides, dynamic changes) and meta.properties."""

from __future__ import annotations

import base64
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from broker.config.broker_defs import BROKER_CONFIGS
from broker.config.listeners import Listener, parse_listener, parse_protocol_map
from broker.config.properties import parse_properties
from broker.config.topic_defs import _SYNONYM_SCALE, TOPIC_CONFIGS, TOPIC_SYNONYMS
from broker.config.types import (
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    format_value,
    parse_value,
)

log = logging.getLogger("broker.config")

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
                if key.startswith("listener.name."):
                    continue  # per-listener overrides (ssl.*, sasl.*), read by broker/listener_security.py
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
                # ISO-8859-1, as Kafka's Utils.loadProps (java.util.Properties.load(InputStream)):
                # other characters are written as \uXXXX escapes.
                with open(path, encoding="iso-8859-1") as f:
                    props = parse_properties(f.read())
            except OSError as e:
                raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
        for k, v in (overrides or {}).items():
            if v is not None:
                props[k] = str(v)
        return cls(props)

    def _check_listeners(self) -> None:
        pmap = parse_protocol_map(self._raw("listener.security.protocol.map") or "", "listener.security.protocol.map")
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
    def definition(self, name: str) -> ConfigDef | None:
        """A broker config's definition; for ``listener.name.<listener>.<name>`` (a listener of this
        broker; ssl.* and sasl.enabled.mechanisms, the names read per listener) the one of <name>."""
        d = BROKER_CONFIGS.get(name)
        if d is not None or not name.startswith("listener.name."):
            return d
        for li in self.listeners:
            prefix = f"listener.name.{li.name.lower()}."
            if name.startswith(prefix):
                base = name[len(prefix):]
                if base.startswith("ssl.") or base == "sasl.enabled.mechanisms":
                    return BROKER_CONFIGS.get(base)
        return None

    def validate_dynamic(self, name: str, value: str | None) -> None:
        d = self.definition(name)
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

    def replace_dynamic(self, configs: dict[str, str], *, cluster_default: bool = False) -> set[str]:
        """Make one dynamic layer (this broker's, or with ``cluster_default`` the cluster-wide one)
        equal to ``configs`` as the metadata store holds them; the names whose value changed. As
        Kafka's DynamicBrokerConfig.fromPersistentProps, a stored value that is not valid (any
        more) is left out with an error in the log, and the others still apply."""
        layer = self.dynamic_default if cluster_default else self.dynamic
        changed: set[str] = set()
        for name in sorted(set(layer) | set(configs)):
            value = configs.get(name)
            if layer.get(name) == (None if value is None else value.strip()):
                continue
            try:
                self.set_dynamic(name, value, cluster_default=cluster_default)
            except ConfigError as e:
                log.error("dynamic %s config %s=%r ignored: %s", "default cluster" if cluster_default else "broker",
                          name, value, e)
                if name not in layer:
                    continue
                self.set_dynamic(name, None, cluster_default=cluster_default)
            changed.add(name)
        return changed

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
        return parse_protocol_map(self._raw("listener.security.protocol.map") or "", "listener.security.protocol.map")

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

    def synonyms(self, name: str, sensitive: bool = False) -> list[ConfigSynonym]:
        """Kafka's ConfigHelper.configSynonyms of a broker config: over its spellings
        (``broker_synonyms``), every dynamic per-broker value, then the dynamic cluster defaults,
        then the static values (file, --override), then the non-null defaults; dropped from the
        front until the first entry named ``name`` (describing log.retention.hours leaves out a
        leading log.retention.ms, and a list with no ``name`` entry at all is empty)."""
        names = broker_synonyms(name, self.definition(name) is not None)
        out: list[ConfigSynonym] = []
        layers = (
            (self.dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.originals, ConfigSource.STATIC_BROKER_CONFIG),
            ({n: BROKER_CONFIGS[n].default for n in names if n in BROKER_CONFIGS}, ConfigSource.DEFAULT_CONFIG),
        )
        for store, source in layers:
            for n in names:
                v = store.get(n)
                if v is not None:
                    out.append(ConfigSynonym(n, None if sensitive else v, source))
        while out and out[0].name != name:
            out.pop(0)
        return out

    # ---------------------------------------------------------------- DescribeConfigs (BROKER)
    def describe(self, names: Iterable[str] | None = None, *, cluster_default: bool = False) -> list[ConfigEntry]:
        """DescribeConfigs of this broker (every config, and the listener-prefixed ones set in the
        file or dynamically), or with ``cluster_default`` of the cluster-default resource "": as
        Kafka's ConfigHelper, only the dynamic cluster defaults that are set, with their
        DYNAMIC_DEFAULT_BROKER_CONFIG synonyms only."""
        known: Iterable[str] = self.dynamic_default if cluster_default else BROKER_CONFIGS
        if not cluster_default:
            prefixed = [n for n in {**self.originals, **self.dynamic}
                        if n not in BROKER_CONFIGS and n.startswith("listener.name.") and self.definition(n)]
            known = [*known, *sorted(prefixed)]
        known = list(known)
        known_set = set(known)
        wanted = known if names is None else [n for n in names if n in known_set]
        entries: list[ConfigEntry] = []
        for name in wanted:
            d = self.definition(name)
            assert d is not None
            if cluster_default:
                value = format_value(d.type, parse_value(name, d.type, self.dynamic_default[name]))
            elif name in BROKER_CONFIGS:
                value = format_value(d.type, self.get(name))
            else:  # listener-prefixed: its raw value, as Kafka reports originals
                value = self.dynamic.get(name, self.originals.get(name))
            synonyms = self.synonyms(name, d.sensitive)
            if cluster_default:
                synonyms = [s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
            entries.append(
                ConfigEntry(
                    name=name,
                    value=None if d.sensitive else value,
                    source=source,
                    # Kafka's !AllDynamicConfigs.contains(name): a listener-prefixed name is
                    # reported read-only, though it is updated dynamically (with that name).
                    read_only=not d.dynamic or name not in BROKER_CONFIGS,
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


# DynamicBrokerConfig.brokerConfigSynonyms: the log.* configs described with the values of their
# other spellings (the units of one topic default), highest precedence first.
_SPELLINGS = {n: group for group in (
    ["log.roll.ms", "log.roll.hours"],
    ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
) for n in group}
_SPELLINGS["log.flush.interval.ms"] = ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]


def broker_synonyms(name: str, known_listener_config: bool = True) -> list[str]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms(name, matchListenerOverride = true): the
    names whose values describe ``name``: its spellings for a log.* time config, the base name
    after it for a listener-prefixed one (``listener.name.<l>.ssl.keystore.location`` then
    ``ssl.keystore.location``), else ``name`` alone."""
    if name in _SPELLINGS:
        return list(_SPELLINGS[name])
    if name.startswith("listener.name.") and name not in BROKER_CONFIGS and known_listener_config:
        return [name, name.split(".", 3)[3]]
    return [name]


def new_cluster_id() -> str:
    """A random id in Kafka's Uuid string form (22 chars of unpadded URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

