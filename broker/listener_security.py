"""What each listener requires, built from the broker config before anything is served: its
security protocol (listener.security.protocol.map), a TLS context for SSL / SASL_SSL, the SASL
mechanisms and PLAIN users for SASL_PLAINTEXT / SASL_SSL, and the certificate principal mapper.

The glue between BrokerConfig and the broker-independent ``security`` package; a listener that
cannot be served as configured raises ``ListenerSecurityError`` and the broker does not start.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.config.broker_defs import BROKER_CONFIGS
from broker.config.listeners import Listener
from security.sasl import ListenerSasl, SaslConfigError
from security.tls import PrincipalMapper, TlsConfigError, server_context, subject_dn


class ListenerSecurityError(OSError):
    """The listener's security settings cannot be served (an OSError so start-up reports it and exits)."""


@dataclass
class ListenerSecurity:
    listener: Listener
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl: ListenerSasl | None = None
    principal_mapper: PrincipalMapper | None = None


def config_lookup(config: BrokerConfig):
    """Raw string values by name: defined configs through the config (so defaults apply), the
    listener-prefixed ones (listener.name.<l>.*) as given in the file."""
    def get(name: str) -> str | None:
        if name in BROKER_CONFIGS:
            value = config.get(name)
            if isinstance(value, list):
                return ",".join(value)
            return None if value is None else str(value)
        value = config.originals.get(name)
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
                sec.ssl_context = server_context(get, li.name, proto)
            if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
                sec.sasl = ListenerSasl.from_config(get, li.name)
            out[li.name] = sec
    except (TlsConfigError, SaslConfigError) as e:
        raise ListenerSecurityError(f"{e}; refusing to start") from None
    return out


__all__ = ["ListenerSecurity", "ListenerSecurityError", "build", "config_lookup", "subject_dn"]
