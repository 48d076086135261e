"""Kafka API keys mapped to their request/response wire structs (kafka-python 3.x schemas).

Which versions kbroker *serves* is decided by the handler registry in broker/handlers; this
table only knows the wire formats, including which versions are flexible (tagged fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import kafka.protocol.admin  # noqa: F401  (imports register the classes)
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
from kafka.protocol.api_message import ApiMessage


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    name: str
    request: type[ApiMessage]
    response: type[ApiMessage]
    schema_max_version: int

    def request_flexible(self, version: int) -> bool:
        return self.request.flexible_version_q(version)

    def response_header_flexible(self, version: int) -> bool:
        # ApiVersionsResponse always uses response header v0 so that a client that sent a
        # version the broker does not know can still parse the error (KIP-511).
        if self.api_key == 18:
            return False
        return self.response.flexible_version_q(version)


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


@cache
def _table() -> dict[int, ApiSpec]:
    requests: dict[int, type[ApiMessage]] = {}
    responses: dict[int, type[ApiMessage]] = {}
    for cls in _all_subclasses(ApiMessage):
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue  # versioned wrappers / abstract bases
        kind = cls._json["type"]
        (requests if kind == "request" else responses)[cls._json["apiKey"]] = cls
    table = {}
    for key, req in requests.items():
        resp = responses.get(key)
        if resp is None:
            continue
        table[key] = ApiSpec(key, req._json["name"].removesuffix("Request"), req, resp, req.max_version)
    return table


def register(spec: ApiSpec) -> None:
    """Add an API whose schema kafka-python does not ship (e.g. KIP-848 ConsumerGroupHeartbeat)."""
    _table()[spec.api_key] = spec


def get_spec(api_key: int) -> ApiSpec | None:
    return _table().get(api_key)


def all_specs() -> dict[int, ApiSpec]:
    return dict(_table())
