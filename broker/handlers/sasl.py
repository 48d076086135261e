"""SaslHandshake (key 17) v0-1 and SaslAuthenticate (key 36) v0-2: the per-connection SASL state
machine of SASL_PLAINTEXT / SASL_SSL listeners (Kafka's SaslServerAuthenticator), and the handlers
that answer these APIs where no authentication is due.

Behaviour, as Kafka:
- before authentication completes only ApiVersions (before the handshake) and the SASL APIs are
  served; any other request closes the connection with a WARN line and no response;
- a mechanism that is not enabled answers UNSUPPORTED_SASL_MECHANISM with the enabled list, then
  closes; wrong credentials answer SASL_AUTHENTICATION_FAILED with Kafka's message, then close;
- SaslHandshake v0 is followed by raw length-prefixed SASL tokens (no request header), v1 by
  SaslAuthenticate requests;
- KIP-368: with ``connections.max.reauth.ms`` > 0 a successful SaslAuthenticate v1+ carries
  ``session_lifetime_ms``; a request arriving after the session expired closes the connection,
  unless it starts a re-authentication (SaslHandshake v1+ on the same connection, same mechanism;
  the principal may not change);
- on PLAINTEXT / SSL listeners (and for SaslAuthenticate after authentication) both APIs answer
  ILLEGAL_SASL_STATE, as KafkaApis does.
"""

from __future__ import annotations

import time

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from broker.handlers import RequestContext, api
from protocol.errors import ErrorCode
from security.sasl import AuthenticationFailed, CredentialLookup, Exchange, ListenerSasl, new_exchange

ANONYMOUS = "User:ANONYMOUS"
_SASL_APIS = (17, 36)


class SaslSession:
    """The authentication state of one connection on a SASL listener."""

    def __init__(self, config: ListenerSasl, lookup: CredentialLookup) -> None:
        self.config = config
        self.lookup = lookup
        self.max_reauth_ms = 0  # of the mechanism in use (connections.max.reauth.ms, KIP-368)
        self.state = "handshake"  # -> "authenticate" -> "complete" (-> "authenticate" to re-authenticate)
        self.raw = False  # after SaslHandshake v0: the next frames are bare SASL tokens
        self.exchange: Exchange | None = None
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.authenticated = False
        self.expires_at: float | None = None  # monotonic time the session ends (KIP-368)
        self.reauth_capable = False
        self.api_versions_seen = False

    # --- gatekeeping -----------------------------------------------------------------------------

    def refuse(self, api_key: int, api_name: str) -> str | None:
        """Why a request of ``api_key`` must close the connection now, or None to serve it."""
        if api_key in _SASL_APIS:
            return None
        if not self.authenticated:
            if api_key == 18 and self.state == "handshake":
                return None
            return f"unexpected Kafka request of type {api_name} during SASL authentication (state {self.state})"
        if self.expires_at is not None and time.monotonic() >= self.expires_at:
            return (f"SASL session of {self.principal} expired (connections.max.reauth.ms={self.max_reauth_ms}) "
                    f"and {api_name} is not a re-authentication")
        return None

    # --- SaslHandshake -----------------------------------------------------------------------------

    def handshake(self, version: int, request) -> tuple[SaslHandshakeResponse, str | None]:
        """The response and, when the connection must close after it, why."""
        mechanisms = list(self.config.mechanisms)
        mechanism = request.mechanism
        reauth = self.authenticated
        if self.state == "authenticate" or (reauth and (version < 1 or not self.reauth_capable)):
            # a handshake in the middle of an exchange, or after authentication without KIP-368
            return self._handshake_response(version, ErrorCode.ILLEGAL_SASL_STATE, mechanisms), None
        if mechanism not in mechanisms:
            return (self._handshake_response(version, ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms),
                    f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(mechanisms)})")
        if reauth and mechanism != self.mechanism:
            return (self._handshake_response(version, ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms),
                    f"SASL mechanism {mechanism!r} requested by client is not supported for re-authentication "
                    f"of mechanism {self.mechanism!r}")
        self.mechanism = mechanism
        self.max_reauth_ms = self.config.reauth_ms.get(mechanism, 0)
        self.exchange = new_exchange(mechanism, self.config, self.lookup)
        self.state = "authenticate"
        self.raw = version == 0
        return self._handshake_response(version, ErrorCode.NONE, mechanisms), None

    @staticmethod
    def _handshake_response(version: int, error: int, mechanisms: list[str]) -> SaslHandshakeResponse:
        return SaslHandshakeResponse(version=version, error_code=error, mechanisms=mechanisms)

    # --- SaslAuthenticate / raw tokens -----------------------------------------------------------

    def authenticate(self, version: int, request) -> tuple[SaslAuthenticateResponse, str | None]:
        if self.state != "authenticate" or self.exchange is None or self.raw:
            msg = ("SaslAuthenticate request received after successful authentication" if self.authenticated
                   else "Unexpected SaslAuthenticate request before SaslHandshake")
            if self.authenticated:
                return self._auth_response(version, ErrorCode.ILLEGAL_SASL_STATE, msg), None
            return self._auth_response(version, ErrorCode.ILLEGAL_SASL_STATE, msg), msg
        try:
            out = self.step(bytes(request.auth_bytes or b""))
        except AuthenticationFailed as e:
            return self._auth_response(version, ErrorCode.SASL_AUTHENTICATION_FAILED, str(e)), \
                f"SASL authentication failed ({self.mechanism}): {e}" + (f" ({e.__cause__})" if e.__cause__ else "")
        lifetime = 0
        if self.authenticated and self.state == "complete":
            self.reauth_capable = version >= 1
            if self.max_reauth_ms > 0 and version >= 1:
                lifetime = self.max_reauth_ms
        return self._auth_response(version, ErrorCode.NONE, None, out, lifetime), None

    def step(self, token: bytes) -> bytes:
        """Feed one token to the exchange; completes the session when the exchange completes."""
        assert self.exchange is not None
        out = self.exchange.step(token)
        if self.exchange.complete:
            principal = f"User:{self.exchange.username}"
            if self.principal is not None and principal != self.principal:
                raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                           f"{self.principal}: {principal}")
            self.principal = principal
            self.authenticated = True
            self.state = "complete"
            self.raw = False
            self.exchange = None
            # Kafka ends every session after connections.max.reauth.ms, re-authenticating clients or not.
            self.expires_at = time.monotonic() + self.max_reauth_ms / 1000 if self.max_reauth_ms > 0 else None
        return out

    @staticmethod
    def _auth_response(version: int, error: int, message: str | None, auth_bytes: bytes = b"",
                       lifetime_ms: int = 0) -> SaslAuthenticateResponse:
        return SaslAuthenticateResponse(version=version, error_code=error, error_message=message,
                                        auth_bytes=auth_bytes, session_lifetime_ms=lifetime_ms)


# --- where no SASL exchange is due (PLAINTEXT / SSL listeners) ------------------------------------


@api(17, 0, 1)
async def handle_sasl_handshake(ctx: RequestContext, request) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(version=ctx.api_version, error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


@api(36, 0, 2)
async def handle_sasl_authenticate(ctx: RequestContext, request) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(version=ctx.api_version, error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate request received after successful authentication",
                                    auth_bytes=b"", session_lifetime_ms=0)
