"""Server side of SASL: the mechanisms kbroker serves (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), their
per-listener configuration, and one exchange per authentication.

Configuration, as Kafka reads it:
- ``connections.max.reauth.ms`` (KIP-368), also as ``listener.name.<l>.connections.max.reauth.ms`` and
  ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``;
- ``sasl.enabled.mechanisms`` (Kafka's default GSSAPI), overridable per listener as
  ``listener.name.<listener>.sasl.enabled.mechanisms``; a mechanism kbroker does not serve refuses
  start-up with an error naming it;
- PLAIN users: ``user_<name>="<password>"`` entries of the listener's JAAS config
  ``listener.name.<listener>.plain.sasl.jaas.config`` (Kafka's PlainServerCallbackHandler);
- SCRAM: credentials from the metadata store (see scram_credentials), looked up per attempt so a
  credential changed with AlterUserScramCredentials applies to the next authentication.
SCRAM itself is the scramp library (RFC 5802/7677); nothing of SCRAM is hand-written here.
Error messages are Kafka's (SaslServerAuthenticator, PlainSaslServer, ScramSaslServer).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import scramp

from security.scram_credentials import ScramCredential

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

Lookup = Callable[[str], str | None]
# (user, mechanism) -> credential or None
CredentialLookup = Callable[[str, str], ScramCredential | None]


class SaslConfigError(ValueError):
    """A listener's SASL configuration cannot be served (the broker refuses to start)."""


class AuthenticationFailed(Exception):
    """The client's credentials are wrong: answer SASL_AUTHENTICATION_FAILED, then close."""


_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:\\.|[^"\\])*)"')


def parse_jaas_options(text: str) -> dict[str, str]:
    """The ``key="value"`` options of a JAAS config line (``<LoginModule> required k="v" ...;``)."""
    return {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(text or "")}


@dataclass
class ListenerSasl:
    """What one SASL_PLAINTEXT / SASL_SSL listener accepts."""

    listener: str
    mechanisms: list[str]
    plain_users: dict[str, str] = field(default_factory=dict)
    # KIP-368 session lifetime per mechanism (0 = sessions never expire)
    reauth_ms: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, get: Lookup, listener: str) -> ListenerSasl:
        prefix = f"listener.name.{listener.lower()}."
        raw = get(prefix + "sasl.enabled.mechanisms")
        if raw is None:
            raw = get("sasl.enabled.mechanisms") or "GSSAPI"
        mechanisms = [m.strip().upper() for m in raw.split(",") if m.strip()]
        if not mechanisms:
            raise SaslConfigError(f"listener {listener}: sasl.enabled.mechanisms is empty")
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise SaslConfigError(
                f"listener {listener}: SASL mechanism(s) {', '.join(unsupported)} in sasl.enabled.mechanisms "
                f"are not supported by kbroker (supported: {', '.join(SUPPORTED_MECHANISMS)}; Kafka's default "
                "is GSSAPI, so set sasl.enabled.mechanisms explicitly)")
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            jaas = get(prefix + "plain.sasl.jaas.config")
            if not jaas:
                raise SaslConfigError(f"listener {listener} enables PLAIN but {prefix}plain.sasl.jaas.config is "
                                      'not set (it lists the users as user_<name>="<password>")')
            users = {k[5:]: v for k, v in parse_jaas_options(jaas).items() if k.startswith("user_")}
        reauth = {}
        for mech in mechanisms:
            # Kafka: listener.name.<l>.<mechanism>.connections.max.reauth.ms, then the listener's, then global
            raw = (get(f"{prefix}{mech.lower()}.connections.max.reauth.ms") or get(prefix + "connections.max.reauth.ms")
                   or get("connections.max.reauth.ms") or "0")
            try:
                reauth[mech] = max(0, int(raw.strip()))
            except ValueError:
                raise SaslConfigError(f"listener {listener}: connections.max.reauth.ms for {mech} must be a "
                                      f"number of milliseconds, got {raw!r}") from None
        return cls(listener, mechanisms, users, reauth)


class Exchange:
    """One authentication: tokens in, tokens out, until ``complete`` (then ``username`` is set)."""

    mechanism: str
    complete = False
    username: str | None = None

    def step(self, token: bytes) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError


class PlainExchange(Exchange):
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    def step(self, token: bytes) -> bytes:
        # RFC 4616: [authzid] NUL authcid NUL passwd
        parts = token.decode("utf-8", "replace").split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                       f"{len(parts)}")
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(username)
        # compare_digest on equal-length digests: no timing hint about the stored password
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.username = username
        self.complete = True
        return b""


class ScramExchange(Exchange):
    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._stage = 0
        self._unknown_user = False
        self._user: str | None = None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = _saslname(username)
        cred = self._lookup(self._user, self.mechanism)
        if cred is None:
            self._unknown_user = True
            raise KeyError(username)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def _accept_librdkafka_nonce(self, client_final: str) -> None:
        """librdkafka before 2.6.1 puts its own nonce once more in front of the server's nonce in
        client-final-message (librdkafka #4895); Kafka 3.8.1-3.9 accept that form (its nonce check
        is endsWith), so kcat and older confluent-kafka builds authenticate. kbroker accepts exactly
        that form (client nonce + the full nonce), nothing looser: scramp then verifies the proof over
        the message as received."""
        full = str(self._server.nonce)
        c_nonce = full[: len(full) - len(str(self._server.s_nonce))]
        if _client_final_nonce(client_final) == c_nonce + full:
            self._server.nonce = type(self._server.nonce)(c_nonce + full)  # scramp keeps a Nonce object

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}") from None
        try:
            if self._stage == 0:
                self._server.set_client_first(text)
                self._stage = 1
                return self._server.get_server_first().encode()
            self._accept_librdkafka_nonce(text)
            self._server.set_client_final(text)
            final = self._server.get_server_final()
        except (scramp.ScramException, KeyError, ValueError) as e:
            if self._unknown_user:
                raise AuthenticationFailed("Authentication failed: Invalid user credentials") from None
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}") from e
        self.username = self._user
        self.complete = True
        return final.encode()


def _client_final_nonce(message: str) -> str | None:
    for attr in message.split(","):
        if attr.startswith("r="):
            return attr[2:]
    return None


def _saslname(name: str) -> str:
    """RFC 5802 saslname decoding (=2C is ',', =3D is '='), as Kafka's ScramFormatter.username()."""
    return name.replace("=2C", ",").replace("=3D", "=")


def new_exchange(mechanism: str, config: ListenerSasl, lookup: CredentialLookup) -> Exchange:
    if mechanism == "PLAIN":
        return PlainExchange(config.plain_users)
    return ScramExchange(mechanism, lookup)
