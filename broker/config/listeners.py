"""Listener addresses (NAME://host:port) and listener.security.protocol.map parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.config.types import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


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


def parse_protocol_map(text: str, config_name: str) -> dict[str, str]:
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


# Security protocols kbroker serves; a listener mapped to any other refuses to start rather than
# serving plaintext where TLS or SASL was asked for (issue 17). SSL and SASL_SSL listeners only ever
# speak TLS, SASL ones authenticate before anything else (broker/server.py).
IMPLEMENTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def unimplemented_listeners(listeners: list[Listener], protocol_map: dict[str, str]) -> list[tuple[Listener, str]]:
    """The listeners whose security protocol (through listener.security.protocol.map) is not
    implemented, each with that protocol."""
    return [(li, protocol_map.get(li.name, li.name)) for li in listeners
            if protocol_map.get(li.name, li.name) not in IMPLEMENTED_SECURITY_PROTOCOLS]
