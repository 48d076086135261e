"""The client side of the inter-broker listener: how this broker connects to the other brokers
(follower fetchers, transaction markers, KIP-890 verification) when ``inter.broker.listener.name``
(default: the first listener) is SSL, SASL_PLAINTEXT or SASL_SSL, as Kafka's brokers do.

As Kafka (ChannelBuilders.clientChannelBuilder with the server's JAAS context):
- TLS: the broker's own ``ssl.*`` settings of that listener (``listener.name.<l>.ssl.*`` wins) act
  as client settings: the truststore verifies the peer (none set: the system CAs, as Java's default
  truststore), the keystore is presented when the peer asks for a client certificate (mTLS),
  ``ssl.enabled.protocols`` / ``ssl.cipher.suites`` apply, and
  ``ssl.endpoint.identification.algorithm`` (default ``https``) checks the peer's advertised host
  name against its certificate; empty turns the check off;
- SASL: ``sasl.mechanism.inter.broker.protocol`` (Kafka's default GSSAPI; kbroker supports PLAIN,
  SCRAM-SHA-256, SCRAM-SHA-512) must be among the listener's ``sasl.enabled.mechanisms``; the
  credentials are the ``username`` / ``password`` options of the listener's JAAS config for that
  mechanism, ``listener.name.<l>.<mechanism lower case>.sasl.jaas.config``.
Deviation: the bare ``sasl.jaas.config`` is also read when the listener-prefixed one is not set
(kbroker has no static JAAS file to fall back on, which is where Kafka would look).

``check`` runs at start in cluster mode and refuses a configuration that cannot connect (one error
naming the setting); ``connect`` opens one authenticated connection. The TLS context is rebuilt per
connection (connections are few and long-lived), so a dynamic keystore / truststore change of the
listener also applies to the next inter-broker connection.
"""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.listener_security import config_lookup
from protocol.client import ProtocolClient
from protocol.sasl_client import SaslAuthenticationError, SaslCredentials
from security import tls
from security.sasl import SUPPORTED_MECHANISMS, ListenerSasl, SaslConfigError, parse_jaas_options

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from cluster.metadata_store import MetadataStore

log = logging.getLogger("broker.inter_broker_security")

MECHANISM_SETTING = "sasl.mechanism.inter.broker.protocol"
# An authentication failure is logged at WARNING at most this often per peer address (fetchers
# retry every replica.fetch.backoff.ms; the rest go to DEBUG).
AUTH_WARN_INTERVAL_S = 30.0


class InterBrokerSecurityError(OSError):
    """The inter-broker listener's client side cannot be set up (an OSError: start-up reports it and exits)."""


@dataclass(frozen=True)
class InterBrokerSecurity:
    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None
    sasl: SaslCredentials | None

    def client(self, host: str, port: int, *, client_id: str) -> ProtocolClient:
        return ProtocolClient(host, port, client_id=client_id, ssl_context=self.ssl_context, sasl=self.sasl)


def listener_name(config: BrokerConfig) -> str:
    """The inter-broker listener, as the fetchers and InterBrokerClients pick it."""
    return config.get("inter.broker.listener.name") or config.listeners[0].name


def peer_address(config: BrokerConfig, metadata: MetadataStore, node_id: int) -> tuple[str, int] | None:
    """The advertised address of broker ``node_id`` on the inter-broker listener (None: unknown)."""
    listener = listener_name(config)
    for b in metadata.brokers():
        if b.node_id == node_id:
            return b.address(listener)
    return None


def build(config: BrokerConfig) -> InterBrokerSecurity:
    """What a connection to another broker's inter-broker listener needs (raises InterBrokerSecurityError)."""
    listener = listener_name(config)
    names = [li.name for li in config.listeners]
    if listener not in names:
        raise InterBrokerSecurityError(f"inter.broker.listener.name={listener} is not one of the listeners "
                                       f"({', '.join(names)}); refusing to start")
    protocol = config.security_protocol_map.get(listener, listener)
    get = config_lookup(config)
    context = _client_context(get, listener) if protocol in ("SSL", "SASL_SSL") else None
    creds = _credentials(get, listener) if protocol in ("SASL_PLAINTEXT", "SASL_SSL") else None
    return InterBrokerSecurity(listener, protocol, context, creds)


def check(config: BrokerConfig) -> None:
    """At start in cluster mode: refuse what could not connect to the other brokers."""
    build(config)


async def connect(config: BrokerConfig, host: str, port: int, *, client_id: str) -> ProtocolClient:
    """A connected (and authenticated) client to another broker's inter-broker listener at host:port.
    An authentication failure is logged (rate-limited) and raised as SaslAuthenticationError, a
    ConnectionError: callers back off and retry as for a lost connection."""
    client = build(config).client(host, port, client_id=client_id)
    try:
        await client.connect()
    except (SaslAuthenticationError, ssl.SSLError) as e:
        _log_failure(host, port, e)
        raise
    _failures.pop((host, port), None)
    return client


_failures: dict[tuple[str, int], float] = {}  # peer -> when its failure was last logged at WARNING


def _log_failure(host: str, port: int, e: Exception) -> None:
    what = "authentication" if isinstance(e, SaslAuthenticationError) else "TLS handshake"
    now = time.monotonic()
    last = _failures.get((host, port))
    if last is None or now - last >= AUTH_WARN_INTERVAL_S:
        _failures[(host, port)] = now
        log.warning("inter-broker %s with %s:%d failed: %s (retrying with backoff)", what, host, port, e)
    else:
        log.debug("inter-broker %s with %s:%d failed: %s", what, host, port, e)


def _client_context(get: tls.Lookup, listener: str) -> ssl.SSLContext:
    # security/tls.py's loaders, so PEM handling is the listener's own (a server side that loads
    # also loads here); a client context verifies the peer by default.
    cfg = tls.listener_lookup(get, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    algorithm = (cfg("ssl.endpoint.identification.algorithm") or "").strip().lower()
    if cfg("ssl.endpoint.identification.algorithm") is None:
        algorithm = "https"  # Kafka's default
    if algorithm not in ("", "https"):
        raise InterBrokerSecurityError(f"ssl.endpoint.identification.algorithm={algorithm} is not supported "
                                       "(https or empty); refusing to start")
    ctx.check_hostname = algorithm == "https"
    try:
        tls._set_protocols(ctx, cfg("ssl.enabled.protocols"))
        tls._set_ciphers(ctx, cfg("ssl.cipher.suites"))
        tls._load_keystore(ctx, cfg, listener)
        if cfg("ssl.truststore.location") or cfg("ssl.truststore.certificates"):
            tls._load_truststore(ctx, cfg, listener, required=True)
        else:
            ctx.load_default_certs()
    except tls.TlsConfigError as e:
        msg = f"inter-broker listener {listener} (client side): {e}; refusing to start"
        raise InterBrokerSecurityError(msg) from None
    return ctx


def _credentials(get: tls.Lookup, listener: str) -> SaslCredentials:
    mechanism = (get(MECHANISM_SETTING) or "GSSAPI").strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise InterBrokerSecurityError(
            f"{MECHANISM_SETTING}={mechanism} is not supported by kbroker (supported: "
            f"{', '.join(SUPPORTED_MECHANISMS)}; Kafka's default is GSSAPI, so set it explicitly) but the "
            f"inter-broker listener {listener} uses SASL; refusing to start")
    try:
        enabled = ListenerSasl.from_config(get, listener).mechanisms
    except SaslConfigError as e:
        raise InterBrokerSecurityError(f"{e}; refusing to start") from None
    if mechanism not in enabled:
        raise InterBrokerSecurityError(
            f"{MECHANISM_SETTING} ({mechanism}) must be included in sasl.enabled.mechanisms of listener "
            f"{listener} ({', '.join(enabled)}) when SASL is used for inter-broker communication; refusing to start")
    prefixed = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    source = "sasl.jaas.config" if not get(prefixed) and get("sasl.jaas.config") else prefixed
    jaas = get(source)
    options = parse_jaas_options(jaas or "")
    if not options.get("username") or "password" not in options:
        problem = "has no username/password" if jaas else "is not set"
        raise InterBrokerSecurityError(
            f"the inter-broker listener {listener} uses SASL {mechanism} but {source} {problem} (the login "
            f'module\'s username="..." password="..." are this broker\'s inter-broker credentials); refusing to start')
    return SaslCredentials(mechanism, options["username"], options["password"])
