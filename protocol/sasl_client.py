"""Client side of SASL on a Kafka connection: SaslHandshake v1 then SaslAuthenticate v2 (Kafka's
SaslClientAuthenticator), for PLAIN and SCRAM-SHA-256 / SCRAM-SHA-512.

Used by ProtocolClient (protocol/client.py) when it is given credentials, e.g. for inter-broker
connections to a SASL_PLAINTEXT / SASL_SSL listener. SCRAM is the ``scramp`` library's client
(RFC 5802/7677, username escaping included); PLAIN sends ``NUL username NUL password`` (RFC 4616,
no authorization id, as Kafka's PlainSaslClient). Any failure raises ``SaslAuthenticationError``
with the broker's error message. ProtocolClient runs it again on the same connection before a
session the server limited (KIP-368, ``session_lifetime_ms``) ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import scramp
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from .errors import ErrorCode


class _Requester(Protocol):
    """What authentication needs of protocol.client.ProtocolClient: one request, its answer."""

    async def request(self, request: Any, version: int) -> Any: ...


MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 2


class SaslAuthenticationError(ConnectionError):
    """SASL authentication did not succeed (wrong credentials, mechanism not enabled, bad server answer).

    A ConnectionError: callers that retry on a lost connection treat it the same way."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:  # never the password in a log line
        return f"SaslCredentials({self.mechanism}, {self.username!r})"


async def authenticate(client: _Requester, creds: SaslCredentials) -> int:
    """Authenticate the (connected) ``client``; returns the session lifetime in ms (0: no limit)."""
    mechanism = creds.mechanism.upper()
    if mechanism not in MECHANISMS:
        raise SaslAuthenticationError(f"SASL mechanism {mechanism} is not supported by this client "
                                      f"(supported: {', '.join(MECHANISMS)})")
    hs = await client.request(SaslHandshakeRequest(version=HANDSHAKE_VERSION, mechanism=mechanism),
                              HANDSHAKE_VERSION)
    if hs.error_code:
        raise SaslAuthenticationError(
            f"SaslHandshake for {mechanism} failed with {_name(hs.error_code)} (mechanisms enabled on the "
            f"listener: {', '.join(hs.mechanisms or []) or 'none'})")
    if mechanism == "PLAIN":
        token = b"\0" + creds.username.encode() + b"\0" + creds.password.encode()
        _, lifetime = await _step(client, mechanism, token)
        return lifetime
    try:
        scram = scramp.ScramClient([mechanism], creds.username, creds.password)
        server_first, _ = await _step(client, mechanism, scram.get_client_first().encode())
        scram.set_server_first(server_first.decode())
        server_final, lifetime = await _step(client, mechanism, scram.get_client_final().encode())
        # The server's signature proves it knows the credential: without this check a man in the
        # middle could accept any password.
        scram.set_server_final(server_final.decode())
    except (scramp.ScramException, UnicodeDecodeError) as e:
        raise SaslAuthenticationError(f"{mechanism} authentication of {creds.username!r} failed: {e}") from None
    return lifetime


async def _step(client: _Requester, mechanism: str, token: bytes) -> tuple[bytes, int]:
    resp = await client.request(SaslAuthenticateRequest(version=AUTHENTICATE_VERSION, auth_bytes=token),
                                AUTHENTICATE_VERSION)
    if resp.error_code:
        raise SaslAuthenticationError(f"{mechanism} authentication failed with {_name(resp.error_code)}: "
                                      f"{resp.error_message or 'no message'}")
    return bytes(resp.auth_bytes or b""), int(resp.session_lifetime_ms or 0)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
