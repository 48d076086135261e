"""What each listener requires, built from the broker config before anything is served: its
security protocol (listener.security.protocol.map), a TLS context for SSL / SASL_SSL, the SASL
mechanisms and PLAIN users for SASL_PLAINTEXT / SASL_SSL, and the certificate principal mapper.

The glue between BrokerConfig and the broker-independent ``security`` package; a listener that
cannot be served as configured raises ``ListenerSecurityError`` and the broker does not start.
``prepare_tls_reload`` validates a dynamic ``listener.name.<l>.ssl.keystore.*`` / truststore change
against the live listeners (security/tls_reload.py) before it is stored, and hands back the swap.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.config.broker_defs import BROKER_CONFIGS
from broker.config.listeners import Listener
from security.sasl import ListenerSasl, SaslConfigError
from security.tls import PrincipalMapper, TlsConfigError, subject_dn
from security.tls_reload import RECONFIGURABLE, ReloadableTls


class ListenerSecurityError(OSError):
    """The listener's security settings cannot be served (an OSError so start-up reports it and exits)."""


@dataclass
class ListenerSecurity:
    listener: Listener
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl: ListenerSasl | None = None
    principal_mapper: PrincipalMapper | None = None
    tls: ReloadableTls | None = None  # owns ssl_context; swaps the certificate for new connections


def config_lookup(config: BrokerConfig, dynamic: dict[str, str] | None = None):
    """Raw string values by name: defined configs through the config (so defaults apply), the
    listener-prefixed ones (listener.name.<l>.*) from the dynamic configs, then the file. With
    ``dynamic``, as if the per-broker dynamic configs were that set (a change being validated)."""
    per_broker = config.dynamic if dynamic is None else dynamic

    def raw(name: str) -> str | None:
        for layer in (per_broker, config.dynamic_default, config.originals):
            if name in layer:
                return layer[name]
        return None

    def get(name: str) -> str | None:
        if name in BROKER_CONFIGS:
            if dynamic is None:
                value = config.get(name)
            else:
                d = BROKER_CONFIGS[name]
                found = raw(name)
                value = d.parse(found if found is not None else d.default)
            if isinstance(value, list):
                return ",".join(value)
            return None if value is None else str(value)
        value = raw(name)
        return None if value is None else str(value)

    return get


def build(config: BrokerConfig) -> dict[str, ListenerSecurity]:
    get = config_lookup(config)
    protocols = config.security_protocol_map
    out: dict[str, ListenerSecurity] = {}
    try:
        mapper = PrincipalMapper(get("ssl.principal.mapping.rules"))
        for li in config.listeners:
            proto = protocols.get(li.name, li.name)
            sec = ListenerSecurity(li, proto, principal_mapper=mapper)
            if proto in ("SSL", "SASL_SSL"):
                sec.tls = ReloadableTls(get, li.name, proto)
                sec.ssl_context = sec.tls.context
            if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
                sec.sasl = ListenerSasl.from_config(get, li.name)
            out[li.name] = sec
    except (TlsConfigError, SaslConfigError) as e:
        raise ListenerSecurityError(f"{e}; refusing to start") from None
    return out


def reload_listeners(names: Iterable[str], listeners: Iterable[str]) -> set[str]:
    """The listeners whose TLS a change of these config names reloads: those named by a
    listener.name.<l>.<reconfigurable ssl name> (Kafka: only listener-prefixed, never bare)."""
    out = set()
    by_prefix = {f"listener.name.{li.lower()}.": li for li in listeners}
    for name in names:
        for prefix, li in by_prefix.items():
            if name.startswith(prefix) and name[len(prefix):] in RECONFIGURABLE:
                out.add(li)
    return out


def prepare_tls_reload(security: dict[str, ListenerSecurity], config: BrokerConfig, dynamic: dict[str, str],
                       listeners: Iterable[str]) -> Callable[[], None]:
    """Validate the TLS of ``listeners`` as the per-broker dynamic set ``dynamic`` configures it
    (raises TlsConfigError, nothing changed); returns the function that swaps the new contexts in."""
    get = config_lookup(config, dynamic)
    ready = []
    for name in sorted(listeners):
        sec = security.get(name)
        if sec is not None and sec.tls is not None:  # a listener without TLS has nothing to reload
            ready.append((sec.tls, sec.tls.prepare(get)))

    def apply() -> None:
        for tls, candidate in ready:
            tls.apply(candidate)

    return apply


__all__ = ["ListenerSecurity", "ListenerSecurityError", "build", "config_lookup", "prepare_tls_reload",
           "reload_listeners", "subject_dn"]
