"""TLS and HTTP basic authentication of the Schema Registry listener, from the broker's own
settings and users.

TLS (an ``https://`` listener): the keystore, truststore, protocols, ciphers and
``ssl.client.auth`` of the broker's ``ssl.*`` configs, overridable per listener as
``listener.name.schema_registry.ssl.*`` (security/tls.py builds the context). Forwarding to
another broker's registry verifies it with the same truststore.

Basic authentication (``kbroker.schema.registry.basic.auth=true``): a user name and password the
brokers accept, i.e. a SCRAM credential of the metadata store (the password is checked against
its salted StoredKey, RFC 5802) or a PLAIN user of a SASL listener's JAAS config. Every
authenticated user may use every endpoint (no per-subject authorization).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from broker.config import BrokerConfig
from broker.listener_security import config_lookup
from security import tls
from security.sasl import ListenerSasl

if TYPE_CHECKING:
    from cluster.metadata_store import MetadataStore

LISTENER_NAME = "SCHEMA_REGISTRY"
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
_CACHE_S = 60.0


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    try:
        return tls.server_context(config_lookup(config), LISTENER_NAME, "SSL")
    except tls.TlsConfigError as e:
        raise OSError(f"kbroker.schema.registry.listener (https): {e}; refusing to start") from None


def client_context(config: BrokerConfig) -> ssl.SSLContext:
    cfg = tls.listener_lookup(config_lookup(config), LISTENER_NAME)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = (cfg("ssl.endpoint.identification.algorithm") or "https").strip().lower() == "https"
    try:
        tls._load_keystore(ctx, cfg, LISTENER_NAME)  # noqa: SLF001 - presented when the peer asks (mTLS)
        if cfg("ssl.truststore.location") or cfg("ssl.truststore.certificates"):
            tls._load_truststore(ctx, cfg, LISTENER_NAME, required=True)  # noqa: SLF001
        else:
            ctx.load_default_certs()
    except tls.TlsConfigError as e:
        raise OSError(f"kbroker.schema.registry.listener (forwarding client): {e}; refusing to start") from None
    return ctx


def _plain_users(config: BrokerConfig) -> dict[str, str]:
    get = config_lookup(config)
    users: dict[str, str] = {}
    protocols = config.security_protocol_map
    for li in config.listeners:
        if protocols.get(li.name, li.name) in ("SASL_PLAINTEXT", "SASL_SSL"):
            try:
                users.update(ListenerSasl.from_config(get, li.name).plain_users)
            except Exception:  # noqa: BLE001 - the listener itself refuses to start on this
                continue
    return users


def _scram_matches(cred: object, mechanism: str, password: str) -> bool:
    h = _HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), cred.salt, cred.iterations)  # type: ignore[attr-defined]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return hmac.compare_digest(h(client_key).digest(), cred.stored_key)  # type: ignore[attr-defined]


def make_authenticator(config: BrokerConfig, metadata: MetadataStore) -> Callable[[str, str], Awaitable[bool]]:
    accepted: dict[tuple[str, bytes], float] = {}  # (user, sha256(password)) -> until when it is trusted

    async def check(user: str, password: str) -> bool:
        digest = hashlib.sha256(password.encode()).digest()
        now = time.monotonic()
        if accepted.get((user, digest), 0) > now:
            return True
        plain = _plain_users(config).get(user)
        ok = plain is not None and hmac.compare_digest(plain.encode(), password.encode())
        if not ok:
            creds = metadata.scram_credentials().get(user, {})
            loop = asyncio.get_running_loop()
            for mechanism, cred in creds.items():
                if mechanism in _HASHES and await loop.run_in_executor(None, _scram_matches, cred, mechanism, password):
                    ok = True
                    break
        if ok:
            accepted[(user, digest)] = now + _CACHE_S
        return ok

    return check
