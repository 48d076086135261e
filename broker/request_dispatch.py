"""Serving one request frame of a connection: header, api key and version checks, decoding (with
Kafka's nullability rules), SASL gating, the handler, client quota throttling (KIP-219), request
statistics and the response's encoding. Any violation raises CloseConnection before a handler
runs: only that connection closes, with one WARN line and no response, as Kafka does; ApiVersions
with a version we do not know gets the v0 UNSUPPORTED_VERSION answer (KIP-511).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

from kafka.protocol.metadata import ApiVersionsResponse

from broker import client_throttle
from broker.handlers import HANDLERS, CloseConnection, RawResponse, Registration, RequestContext
from broker.handlers.api_versions import supported_api_keys
from broker.handlers.sasl import ANONYMOUS, SaslSession
from broker.metrics.stats import RequestStats
from broker.services import BrokerServices
from protocol.api_table import ApiSpec, get_spec
from protocol.errors import ErrorCode
from protocol.headers import HeaderError, encode_response_prefix, parse_request_header, skip_tagged_fields
from protocol.null_check import checker_for
from protocol.response_summary import error_summary
from security.quotas import ClientQuotaManager

log = logging.getLogger("broker.server")
request_log = logging.getLogger("kbroker.request")

_SIZE = struct.Struct(">i")


class ServerState(Protocol):
    services: BrokerServices
    quotas: ClientQuotaManager
    request_stats: RequestStats
    raise_api: int  # test-only: the handler of this api key raises (KBROKERTEST_RAISE_API)


class ConnectionState(Protocol):
    id: int
    peer: tuple[str, int]
    listener_name: str
    principal: str
    sasl: SaslSession | None
    # Set here: the reason to close once this response is out (a failed authentication), and the
    # KIP-219 throttle the connection applies after (or, for old versions, before) the response.
    close_after: str | None
    throttle_s: float
    throttle_before_response: bool


async def dispatch(server: ServerState, conn: ConnectionState, frame: bytearray,
                   release: Callable[[], None] | None = None) -> list[bytes | memoryview] | None:
    """The response chunks for ``frame`` (None: no response is due). ``release``: given to the
    handler (RequestContext.release), which calls it once what is left is only waiting."""
    if conn.sasl is not None and conn.sasl.raw:
        return _raw_sasl_token(conn, frame)
    mv = memoryview(frame)
    try:
        header = parse_request_header(mv)
    except HeaderError as e:
        raise CloseConnection(f"malformed request header ({e})") from None
    key, version = header.api_key, header.api_version
    served = _SERVED.get((key, version))
    if served is None:
        reg = HANDLERS.get(key)
        spec = get_spec(key)
        if reg is None or spec is None:
            raise CloseConnection(f"unknown or unsupported api key {key} (version {version})")
        if not reg.min_version <= version <= reg.max_version:
            if key == 18:
                return _api_versions_fallback(header.correlation_id)
            raise CloseConnection(
                f"unsupported version {version} of {spec.name} (supported {reg.min_version}-{reg.max_version})")
        served = _serve(reg, spec, version)
    reg, spec, request_flexible, response_flexible, check = served
    pos = header.body_offset
    try:
        if request_flexible:
            pos = skip_tagged_fields(mv, pos)
        if reg.decoder is not None:
            # Hand-written decoders (Produce) apply the same nullability rules themselves.
            request = reg.decoder(mv[pos:], version)
        else:
            request = spec.request.decode(mv[pos:], version=version)
            # Kafka's parse errors for a non-nullable field sent as null or a string longer
            # than 32767 bytes, before any handler runs.
            if check is not None and (bad := check(request)) is not None:
                raise ValueError(bad)
    except Exception as e:
        raise CloseConnection(f"could not decode {spec.name} v{version} request: {e}") from None
    principal = conn.principal
    if conn.sasl is not None:
        if (why := conn.sasl.refuse(key, spec.name)) is not None:
            raise CloseConnection(why)
        principal = conn.sasl.principal or ANONYMOUS
    ctx = RequestContext(server.services, key, version, header.correlation_id, header.client_id,
                         conn.peer[0], conn.peer[1], conn.id, principal, conn.listener_name, release)
    t0 = time.perf_counter()
    if conn.sasl is not None and key in (17, 36):
        if key == 17:
            response, conn.close_after = conn.sasl.handshake(version, request)
        else:
            response, conn.close_after = conn.sasl.authenticate(version, request)
        if conn.sasl.authenticated and principal != conn.sasl.principal:
            log.debug("connection %s from %s:%s authenticated as %s (%s)", conn.id, *conn.peer,
                      conn.sasl.principal, conn.sasl.mechanism)
    else:
        if key == server.raise_api:
            raise RuntimeError(f"test-only failure of api {key} (KBROKERTEST_RAISE_API)")
        response = await reg.handler(ctx, request)
        if key in client_throttle.CLIENT_THROTTLES:
            response, ms = client_throttle.apply(server.quotas, key, version, principal, header.client_id,
                                                 request, len(frame), response)
            if ms > 0:
                conn.throttle_s = ms / 1000
                conn.throttle_before_response = version < client_throttle.CLIENT_THROTTLES[key]
    server.request_stats.record(key, version, time.perf_counter() - t0, response)
    if request_log.isEnabledFor(logging.DEBUG):
        request_log.debug("%s v%d corr=%d client=%s conn=%d from=%s:%s took %.3f ms error=%s principal=%s",
                          spec.name, version, header.correlation_id, header.client_id, conn.id, conn.peer[0],
                          conn.peer[1], (time.perf_counter() - t0) * 1000, error_summary(key, version, response),
                          ctx.principal)
    if response is None:
        return None
    if response.__class__ is RawResponse:
        prefix = encode_response_prefix(header.correlation_id, response.size, response_flexible)
        return [prefix, *response.chunks]
    body = response.encode(version=version)
    prefix = encode_response_prefix(header.correlation_id, len(body), response_flexible)
    return [prefix, body]


# What serving one (api key, version) needs, worked out at its first request: its registration,
# wire spec, whether the request and response headers are flexible, and the null check. Every
# request used to ask for each of these (five calls); handlers and specs never change while the
# broker runs.
_Served = tuple[Registration, ApiSpec, bool, bool, Callable[[Any], str | None] | None]
_SERVED: dict[tuple[int, int], _Served] = {}


def _serve(reg: Registration, spec: ApiSpec, version: int) -> _Served:
    check = None if reg.decoder is not None else checker_for(spec.request, version)
    served = (reg, spec, bool(spec.request_flexible(version)), bool(spec.response_header_flexible(version)), check)
    _SERVED[(reg.api_key, version)] = served
    return served


def _raw_sasl_token(conn: ConnectionState, frame: bytearray) -> list[bytes | memoryview]:
    """After SaslHandshake v0 the client sends bare SASL tokens and gets bare tokens back (each
    size-prefixed, no headers); a failure has no error response in this form: the connection closes."""
    assert conn.sasl is not None
    try:
        out = conn.sasl.step(bytes(frame))
    except Exception as e:  # AuthenticationFailed, or a token the mechanism cannot parse
        raise CloseConnection(f"SASL authentication failed ({conn.sasl.mechanism}, SaslHandshake v0): {e}") from None
    if conn.sasl.authenticated:
        log.debug("connection %s from %s:%s authenticated as %s (%s)", conn.id, *conn.peer,
                  conn.sasl.principal, conn.sasl.mechanism)
    return [_SIZE.pack(len(out)), out]

def _api_versions_fallback(correlation_id: int) -> list[bytes | memoryview]:
    resp = ApiVersionsResponse[0](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=supported_api_keys(0))
    body = resp.encode(version=0)
    return [encode_response_prefix(correlation_id, len(body), False), body]
