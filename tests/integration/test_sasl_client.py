"""protocol/sasl_client.py and ProtocolClient's TLS / SASL options against kbroker's own SASL server:
one real single-node broker with a SASL_PLAINTEXT listener (PLAIN users from the JAAS config,
SCRAM-SHA-256 and -512 users bootstrapped before start) and a SASL_SSL listener (test CA).

What the inter-broker connections rely on: SaslHandshake v1 + SaslAuthenticate v2 succeed for each
mechanism and the connection then serves requests; a wrong password, an unknown user or a mechanism
the listener does not enable raise SaslAuthenticationError with the broker's error and leave no
connection behind; TLS verifies the broker certificate and its host name.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataRequest

from protocol.client import ProtocolClient
from protocol.sasl_client import SaslAuthenticationError, SaslCredentials
from tests.helpers.broker_proc import REPO_ROOT, BrokerProcess, free_port
from tests.helpers.tls_certs import Certs, make_certs

PLAIN_USER, PLAIN_PW = "plainuser", "plain-secret"
SCRAM_USER, SCRAM_PW = "scramuser", "scram-secret"
REAUTH_MS = 1500  # KIP-368 session lifetime of SCRAM-SHA-256 on the SASL_PLAINTEXT listener


class PropsBroker(BrokerProcess):
    """A broker started from a server.properties file; ready once ApiVersions answers on ``port``
    (a SASL listener serves ApiVersions before authentication)."""

    def __init__(self, data_dir: Path, props: Path, port: int) -> None:
        super().__init__(data_dir, port=port)
        self.props = props

    def command(self) -> list[str]:
        return [self.python, "-m", "broker", "serve", str(self.props)]


class Setup:
    def __init__(self, sasl_plain: int, sasl_ssl: int, certs: Certs) -> None:
        self.sasl_plain, self.sasl_ssl, self.certs = sasl_plain, sasl_ssl, certs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sasl_client")
    certs = make_certs(tmp / "certs")
    sasl_plain, sasl_ssl = free_port(), free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="admin-secret" user_{PLAIN_USER}="{PLAIN_PW}";')
    props = tmp / "server.properties"
    props.write_text("\n".join([
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{sasl_plain},SASL_SSL://127.0.0.1:{sasl_ssl}",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        f"log.dirs={tmp / 'data'}",
        "num.partitions=1",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms={REAUTH_MS}",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs.server_keystore}",
    ]) + "\n")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        out = subprocess.run([sys.executable, "-m", "cli", "users", "bootstrap", "--config", str(props),
                              "--user", SCRAM_USER, "--password", SCRAM_PW, "--mechanism", mechanism],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    broker = PropsBroker(tmp / "data", props, sasl_plain)
    broker.start(timeout=60)
    try:
        yield Setup(sasl_plain, sasl_ssl, certs)
    finally:
        broker.stop()
        broker.kill()
    assert "Traceback" not in broker.log_text(), broker.log_tail()


async def _metadata(client: ProtocolClient) -> list[int]:
    resp = await client.request(MetadataRequest(version=1, topics=[]), 1)
    return [b.node_id for b in resp.brokers]


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", PLAIN_USER, PLAIN_PW),
    ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PW),
    ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PW),
])
async def test_authenticates_then_serves_requests(setup: Setup, mechanism: str, user: str, password: str) -> None:
    client = ProtocolClient("127.0.0.1", setup.sasl_plain, sasl=SaslCredentials(mechanism, user, password))
    await client.connect()
    try:
        # Metadata is refused (connection closed) before authentication: an answer proves it completed.
        assert len(await _metadata(client)) == 1
        assert client.session_lifetime_ms == (REAUTH_MS if mechanism == "SCRAM-SHA-256" else 0)
    finally:
        await client.close()


async def test_reauthenticates_before_the_session_ends(setup: Setup) -> None:
    """KIP-368: the broker closes a connection whose session ended on its next request unless it
    re-authenticates; the client does so on the same connection at 85-95 % of the lifetime."""
    import asyncio
    import time

    client = ProtocolClient("127.0.0.1", setup.sasl_plain, sasl=SaslCredentials("SCRAM-SHA-256", SCRAM_USER, SCRAM_PW))
    await client.connect()
    try:
        transport = client._transport
        sessions = {client._reauth_at}
        deadline = time.monotonic() + 60
        while len(sessions) < 4:  # three re-authentications, each followed by requests
            assert time.monotonic() < deadline, f"only {len(sessions) - 1} re-authentications in 60 s"
            assert len(await _metadata(client)) == 1
            sessions.add(client._reauth_at)
            await asyncio.sleep(0.1)
        assert client._transport is transport  # one connection all along
    finally:
        await client.close()


@pytest.mark.parametrize("mechanism,user,password,expected", [
    ("PLAIN", PLAIN_USER, "wrong", "SASL_AUTHENTICATION_FAILED: Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", SCRAM_USER, "wrong", "SASL_AUTHENTICATION_FAILED"),
    ("SCRAM-SHA-256", "nobody", SCRAM_PW, "SASL_AUTHENTICATION_FAILED: Authentication failed: Invalid user credentials"),
])
async def test_wrong_credentials_raise_with_the_brokers_message(setup: Setup, mechanism: str, user: str,
                                                                password: str, expected: str) -> None:
    client = ProtocolClient("127.0.0.1", setup.sasl_plain, sasl=SaslCredentials(mechanism, user, password))
    with pytest.raises(SaslAuthenticationError, match=expected):
        await client.connect()
    with pytest.raises(ConnectionError):  # closed by connect(): nothing half-open is left
        await _metadata(client)


async def test_mechanism_not_enabled_on_the_listener(setup: Setup) -> None:
    client = ProtocolClient("127.0.0.1", setup.sasl_ssl, ssl_context=ssl.create_default_context(
        cafile=str(setup.certs.ca)), sasl=SaslCredentials("PLAIN", PLAIN_USER, PLAIN_PW))
    with pytest.raises(SaslAuthenticationError, match=r"UNSUPPORTED_SASL_MECHANISM.*enabled.*SCRAM-SHA-512"):
        await client.connect()


async def test_sasl_ssl_verifies_the_broker_certificate(setup: Setup) -> None:
    ctx = ssl.create_default_context(cafile=str(setup.certs.ca))
    creds = SaslCredentials("SCRAM-SHA-512", SCRAM_USER, SCRAM_PW)
    client = ProtocolClient("127.0.0.1", setup.sasl_ssl, ssl_context=ctx, sasl=creds)
    await client.connect()
    try:
        assert len(await _metadata(client)) == 1
    finally:
        await client.close()
    # A name the certificate does not hold (its SANs: 127.0.0.1, localhost) fails the handshake.
    wrong_name = ProtocolClient("127.0.0.1", setup.sasl_ssl, ssl_context=ctx, server_hostname="broker.example",
                                sasl=creds)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        await wrong_name.connect()
    # No CA that signed it: refused too.
    untrusted = ProtocolClient("127.0.0.1", setup.sasl_ssl, ssl_context=ssl.create_default_context(), sasl=creds)
    with pytest.raises(ssl.SSLCertVerificationError):
        await untrusted.connect()
