"""TLS and SASL listeners end to end (issue 17 items 2-3): one broker, certificates from a CA made by
the test (openssl), the first SCRAM user written with ``kbroker users bootstrap`` before start.

Listeners: SASL_SSL (SCRAM-SHA-512 and -256; advertised, so clients' follow-up connections use it),
SSL with ``ssl.client.auth=required`` (mTLS), and SASL_PLAINTEXT (PLAIN users from the JAAS config,
SCRAM-SHA-256 with a 2 s session lifetime for KIP-368). Every client verifies the server certificate
against the test CA.
"""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import scramp
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from tests.helpers.broker_proc import REPO_ROOT, BrokerProcess, free_port
from tests.helpers.tls_certs import Certs, make_certs
from tests.helpers.tools import require_tool
from tests.helpers.wire import ConnectionClosed, RawConnection, send_raw

ALICE, ALICE_PW = "alice", "alice-secret"  # SCRAM-SHA-512, bootstrapped before start
PLAIN_USER, PLAIN_PW = "bob", "bob-secret"
REAUTH_MS = 2000
KCAT = shutil.which("kcat")
NODE = shutil.which("node")
JS_DIR = REPO_ROOT / "tests" / "compat" / "js"


class SecureBroker(BrokerProcess):
    """A broker started from a server.properties file; ready once ApiVersions answers on the
    SASL_PLAINTEXT listener (ApiVersions is served before authentication)."""

    def __init__(self, data_dir: Path, props: Path, port: int) -> None:
        super().__init__(data_dir, port=port)
        self.props = props

    def command(self) -> list[str]:
        return [self.python, "-m", "broker", "serve", str(self.props), "--log-level", "DEBUG"]


class Setup:
    def __init__(self, broker: SecureBroker, certs: Certs, sasl_ssl: int, ssl_port: int, sasl_plain: int,
                 props: Path) -> None:
        self.broker, self.certs, self.props = broker, certs, props
        self.sasl_ssl, self.ssl_port, self.sasl_plain = sasl_ssl, ssl_port, sasl_plain

    def confluent(self, user: str = ALICE, password: str = ALICE_PW, mechanism: str = "SCRAM-SHA-512") -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_ssl}", "security.protocol": "SASL_SSL",
                "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
                "ssl.ca.location": str(self.certs.ca), "ssl.endpoint.identification.algorithm": "https"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    tmp = tmp_path_factory.mktemp("tls_sasl")
    certs = make_certs(tmp / "certs", server_key_password="keypass")
    sasl_ssl, ssl_port, sasl_plain = free_port(), free_port(), free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="admin-secret" user_admin="admin-secret" user_{PLAIN_USER}="{PLAIN_PW}";')
    props = tmp / "server.properties"
    props.write_text("\n".join([
        f"listeners=SASL_SSL://127.0.0.1:{sasl_ssl},SSL://127.0.0.1:{ssl_port},"
        f"SASL_PLAINTEXT://127.0.0.1:{sasl_plain}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{sasl_ssl},SSL://127.0.0.1:{ssl_port},"
        f"SASL_PLAINTEXT://127.0.0.1:{sasl_plain}",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        f"log.dirs={tmp / 'data'}",
        "num.partitions=1",
        "group.initial.rebalance.delay.ms=0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms={REAUTH_MS}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs.server_keystore}",
        "ssl.key.password=keypass",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs.ca}",
        "listener.name.ssl.ssl.client.auth=required",
    ]) + "\n")
    out = subprocess.run([sys.executable, "-m", "cli", "users", "bootstrap", "--config", str(props),
                          "--user", ALICE, "--password", ALICE_PW], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    broker = SecureBroker(tmp / "data", props, sasl_plain)
    broker.start(timeout=60)
    try:
        yield Setup(broker, certs, sasl_ssl, ssl_port, sasl_plain, props)
    finally:
        broker.stop()
        broker.kill()
    assert "Traceback" not in broker.log_text(), broker.log_tail()


def _wait_for_log(broker: BrokerProcess, pattern: str, timeout: float = 30) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if m := re.search(pattern, broker.log_text()):
            return m
        time.sleep(0.05)
    raise AssertionError(f"no log line matching {pattern!r}\n{broker.log_tail()}")


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


# --- raw protocol helpers ---------------------------------------------------------------------------

def _client_tls(certs: Certs, *, client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert:
        ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return ctx


def _connect(port: int, tls: ssl.SSLContext | None = None) -> RawConnection:
    conn = RawConnection(f"127.0.0.1:{port}", timeout=15)
    if tls is not None:
        conn.sock = tls.wrap_socket(conn.sock, server_hostname="localhost")
    return conn


def _closed(conn: RawConnection) -> bool:
    """True when the broker closed the connection (EOF with no response frame)."""
    try:
        conn.read_raw_frame()
    except (ConnectionClosed, ConnectionResetError, ssl.SSLError):
        return True
    return False


def _scram(conn: RawConnection, mechanism: str, user: str, password: str, *, auth_version: int = 2):
    """Handshake v1 + SCRAM exchange; returns the last SaslAuthenticate response."""
    hs = conn.request(SaslHandshakeRequest(mechanism=mechanism), 1)
    assert hs.error_code == 0, hs
    client = scramp.ScramClient([mechanism], user, password)
    first = conn.request(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()), auth_version)
    if first.error_code:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = conn.request(SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()), auth_version)
    if final.error_code == 0:
        client.set_server_final(final.auth_bytes.decode())  # the server proved it knows the credential
    return final


# --- clients over SASL_SSL with SCRAM-SHA-512 ---------------------------------------------------------

def test_confluent_kafka_produces_and_consumes_over_sasl_ssl(setup):
    from confluent_kafka import Consumer, Producer

    topic = _topic()
    p = Producer(setup.confluent())
    for i in range(5):
        p.produce(topic, f"ck-{i}".encode())
    assert p.flush(60) == 0
    c = Consumer({**setup.confluent(), "group.id": f"{topic}-g", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        c.close()
    assert got == [f"ck-{i}" for i in range(5)]
    _wait_for_log(setup.broker, rf"Produce v\d+ .* principal=User:{ALICE}\b")


def test_frames_spanning_many_tls_records_arrive_whole(setup):
    """2 MB in 4 KB records: produce batches and fetch responses larger than one TLS record (16 KB)
    and than one socket read go through the TLS transport intact."""
    from confluent_kafka import Consumer, Producer

    topic = _topic()
    values = [bytes([i % 251]) * 4096 for i in range(500)]
    p = Producer({**setup.confluent(), "linger.ms": 50, "batch.size": 1_000_000})
    for v in values:
        p.produce(topic, v)
    assert p.flush(60) == 0
    c = Consumer({**setup.confluent(), "group.id": f"{topic}-g", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert got == values


def test_kafka_python_produces_and_consumes_over_sasl_ssl(setup):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic()
    common = dict(bootstrap_servers=f"127.0.0.1:{setup.sasl_ssl}", security_protocol="SASL_SSL",
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ALICE, sasl_plain_password=ALICE_PW,
                  ssl_cafile=str(setup.certs.ca), ssl_check_hostname=True)
    p = KafkaProducer(**common)
    for i in range(5):
        p.send(topic, f"kp-{i}".encode()).get(timeout=60)
    p.close()
    c = KafkaConsumer(topic, group_id=f"{topic}-g", auto_offset_reset="earliest", consumer_timeout_ms=30000,
                      **common)
    got = []
    for m in c:
        got.append(m.value.decode())
        if len(got) == 5:
            break
    c.close()
    assert got == [f"kp-{i}" for i in range(5)]


async def test_aiokafka_produces_and_consumes_over_sasl_ssl(setup):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = _topic()
    common = dict(bootstrap_servers=f"127.0.0.1:{setup.sasl_ssl}", security_protocol="SASL_SSL",
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ALICE, sasl_plain_password=ALICE_PW,
                  ssl_context=create_ssl_context(cafile=str(setup.certs.ca)))
    p = AIOKafkaProducer(**common)
    await p.start()
    try:
        for i in range(5):
            await p.send_and_wait(topic, f"ak-{i}".encode())
    finally:
        await p.stop()
    c = AIOKafkaConsumer(topic, group_id=f"{topic}-g", auto_offset_reset="earliest", **common)
    await c.start()
    got = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=500)
            for records in batch.values():
                got += [r.value.decode() for r in records]
    finally:
        await c.stop()
    assert got == [f"ak-{i}" for i in range(5)]


def test_kcat_produces_and_consumes_over_sasl_ssl(setup):
    require_tool("kcat", KCAT is not None, "kcat not on PATH (apt-get install kcat)")
    topic = _topic()
    conf = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={ALICE}",
            "-X", f"sasl.password={ALICE_PW}", "-X", f"ssl.ca.location={setup.certs.ca}",
            "-X", "ssl.endpoint.identification.algorithm=https"]
    bootstrap = ["-b", f"127.0.0.1:{setup.sasl_ssl}"]
    lines = "".join(f"kc-{i}\n" for i in range(5))
    out = subprocess.run([KCAT, *bootstrap, *conf, "-P", "-t", topic], input=lines, capture_output=True, text=True,
                         timeout=90)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([KCAT, *bootstrap, *conf, "-C", "-t", topic, "-o", "beginning", "-c", "5", "-e"],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"kc-{i}" for i in range(5)]


def test_kafkajs_produces_and_consumes_over_sasl_ssl(setup):
    from tests.compat.test_kafkajs import require_kafkajs

    require_kafkajs()
    topic = _topic()
    args = {"brokers": [f"127.0.0.1:{setup.sasl_ssl}"], "ca": str(setup.certs.ca), "mechanism": "scram-sha-512",
            "username": ALICE, "password": ALICE_PW, "topic": topic, "count": 5}
    proc = subprocess.run([NODE, "sasl_ssl.js", json.dumps(args)], cwd=JS_DIR, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(result["consumed"]) == sorted(f"kafkajs-{i}" for i in range(5))


# --- authentication failures and enforcement ------------------------------------------------------------

def test_wrong_password_gets_an_authentication_error(setup):
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    p = Producer({**setup.confluent(password="wrong"), "error_cb": errors.append})
    deadline = time.monotonic() + 60
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    del p
    # The wire view: SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection closes.
    with _connect(setup.sasl_ssl, _client_tls(setup.certs)) as conn:
        final = _scram(conn, "SCRAM-SHA-512", ALICE, "wrong")
        assert final.error_code == 58
        assert final.error_message == ("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism SCRAM-SHA-512")
        assert _closed(conn)
    with _connect(setup.sasl_ssl, _client_tls(setup.certs)) as conn:
        final = _scram(conn, "SCRAM-SHA-512", "nobody", "x")
        assert (final.error_code, final.error_message) == (58, "Authentication failed: Invalid user credentials")
        assert _closed(conn)


def test_plaintext_client_on_a_tls_listener_gets_no_kafka_response(setup):
    from kafka.protocol.metadata import ApiVersionsRequest as AV

    from tests.helpers.wire import encode_request

    for port in (setup.sasl_ssl, setup.ssl_port):
        reply = send_raw(f"127.0.0.1:{port}", encode_request(AV(), 0, 1), timeout=10)
        # Nothing, or a TLS alert record (content type 21): never a Kafka frame.
        assert reply == b"" or reply[0] == 21, reply[:32]


def test_only_api_versions_and_sasl_before_authentication(setup):
    with _connect(setup.sasl_plain) as conn:
        versions = conn.request(ApiVersionsRequest(), 3)
        keys = {k.api_key for k in versions.api_keys}
        assert {17, 36, 50, 51} <= keys
        conn.send(MetadataRequest(topics=None), 4)
        assert _closed(conn)
    _wait_for_log(setup.broker, r"unexpected Kafka request of type Metadata during SASL authentication")


def test_unsupported_mechanism_is_refused_with_the_enabled_list(setup):
    with _connect(setup.sasl_plain) as conn:
        hs = conn.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert hs.error_code == 33
        assert hs.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
        assert _closed(conn)


def test_plain_over_sasl_plaintext(setup):
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": f"127.0.0.1:{setup.sasl_plain}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": PLAIN_USER, "sasl.password": PLAIN_PW}
    md = AdminClient(conf).list_topics(timeout=30)
    assert md.brokers
    _wait_for_log(setup.broker, rf"Metadata v\d+ .* principal=User:{PLAIN_USER}\b")
    # Raw: a wrong PLAIN password answers Kafka's message and closes.
    with _connect(setup.sasl_plain) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = conn.request(SaslAuthenticateRequest(auth_bytes=f"\0{PLAIN_USER}\0nope".encode()), 2)
        assert (r.error_code, r.error_message) == (58, "Authentication failed: Invalid username or password")
        assert _closed(conn)


def test_sasl_handshake_v0_then_raw_tokens(setup):
    """SaslHandshake v0: the SASL tokens follow as bare size-prefixed frames, no Kafka headers."""
    import struct

    with _connect(setup.sasl_plain) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = f"\0{PLAIN_USER}\0{PLAIN_PW}".encode()
        conn.send_raw(struct.pack(">i", len(token)) + token)
        assert conn.read_raw_frame() == b""  # PLAIN's (empty) server token
        assert conn.request(MetadataRequest(topics=[]), 4).brokers
    with _connect(setup.sasl_plain) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = f"\0{PLAIN_USER}\0wrong".encode()
        conn.send_raw(struct.pack(">i", len(token)) + token)
        assert _closed(conn)  # v0 has no error response: the connection closes


def test_mtls_maps_the_certificate_subject_to_the_principal(setup):
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": f"127.0.0.1:{setup.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(setup.certs.ca), "ssl.certificate.location": str(setup.certs.client_cert),
            "ssl.key.location": str(setup.certs.client_key), "client.id": "mtls-client"}
    assert AdminClient(conf).list_topics(timeout=30).brokers
    _wait_for_log(setup.broker, r"client=mtls-client .* principal=User:" + re.escape(setup.certs.client_subject) + "$")
    # Without a client certificate the TLS handshake fails: nothing is served.
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with _connect(setup.ssl_port, _client_tls(setup.certs)) as conn:
            conn.request(ApiVersionsRequest(), 0)


# --- KIP-368 re-authentication ---------------------------------------------------------------------

def _scram_user(setup, user: str, password: str, mechanism: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(setup.confluent())
    info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096)
    for fut in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode())]).values():
        fut.result(30)


def test_session_lifetime_reauthentication_and_expiry(setup):
    _scram_user(setup, "carol", "carol-secret", "SCRAM-SHA-256")
    _scram_user(setup, "dave", "dave-secret", "SCRAM-SHA-256")
    with _connect(setup.sasl_plain) as conn:
        t0 = time.monotonic()
        final = _scram(conn, "SCRAM-SHA-256", "carol", "carol-secret")
        assert final.error_code == 0 and final.session_lifetime_ms == REAUTH_MS
        assert conn.request(MetadataRequest(topics=[]), 4).brokers
        # Re-authentication on the same connection starts a new session.
        again = _scram(conn, "SCRAM-SHA-256", "carol", "carol-secret")
        assert again.error_code == 0 and again.session_lifetime_ms == REAUTH_MS
        assert conn.request(MetadataRequest(topics=[]), 4).brokers
    with _connect(setup.sasl_plain) as conn:
        assert _scram(conn, "SCRAM-SHA-256", "carol", "carol-secret").error_code == 0
        # The principal may not change in a re-authentication.
        other = _scram(conn, "SCRAM-SHA-256", "dave", "dave-secret")
        assert other.error_code == 58 and "Cannot change principals" in other.error_message
        assert _closed(conn)
    with _connect(setup.sasl_plain) as conn:
        t0 = time.monotonic()
        assert _scram(conn, "SCRAM-SHA-256", "carol", "carol-secret").error_code == 0
        while time.monotonic() - t0 < REAUTH_MS / 1000 + 0.2:  # the session's end, not a timing assertion
            time.sleep(0.05)
        conn.send(MetadataRequest(topics=[]), 4)
        assert _closed(conn)
    _wait_for_log(setup.broker, r"SASL session of User:carol expired")


# --- SCRAM credential APIs -------------------------------------------------------------------------------

def test_admin_client_describes_and_alters_scram_credentials(setup):
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

    _scram_user(setup, "erin", "erin-secret", "SCRAM-SHA-512")
    admin = AdminClient(setup.confluent())
    desc = admin.describe_user_scram_credentials(["erin", ALICE])
    assert [(i.mechanism, i.iterations) for i in desc["erin"].result(30).scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_512, 4096)]
    everyone = admin.describe_user_scram_credentials().result(30)
    assert {ALICE, "erin"} <= set(everyone)
    # The new credential authenticates.
    from confluent_kafka.admin import AdminClient as A2
    assert A2(setup.confluent("erin", "erin-secret")).list_topics(timeout=30).brokers
    for fut in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)]).values():
        fut.result(30)
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|does not exist"):
        admin.describe_user_scram_credentials(["erin"])["erin"].result(30)


def test_scram_credential_api_validation(setup):
    from kafka.protocol.admin import AlterUserScramCredentialsRequest as Alter
    from kafka.protocol.admin import DescribeUserScramCredentialsRequest as Describe

    up = Alter.ScramCredentialUpsertion
    dl = Alter.ScramCredentialDeletion
    salted = b"\x01" * 64

    def upsert(name, mech=2, iterations=4096):
        return up(name=name, mechanism=mech, iterations=iterations, salt=b"salt", salted_password=salted)

    with _connect(setup.sasl_ssl, _client_tls(setup.certs)) as conn:
        assert _scram(conn, "SCRAM-SHA-512", ALICE, ALICE_PW).error_code == 0
        r = conn.request(Alter(deletions=[dl(name="ghost", mechanism=2)],
                               upsertions=[upsert("few", iterations=4095), upsert("many", iterations=16385),
                                           upsert("badmech", mech=0), upsert(""), upsert("dup"), upsert("dup"),
                                           upsert("ok", iterations=16384)]), 0)
        got = {x.user: (x.error_code, x.error_message) for x in r.results}
        assert got == {
            "ghost": (91, "Attempt to delete a user credential that does not exist"),
            "few": (93, "Too few iterations"),
            "many": (93, "Too many iterations"),
            "badmech": (33, "Unknown SCRAM mechanism"),
            "": (93, "Username must not be empty"),
            "dup": (92, "A user credential cannot be altered twice in the same request"),
            "ok": (0, None),
        }
        d = conn.request(Describe(users=[Describe.UserName(name="ok"), Describe.UserName(name="ghost"),
                                         Describe.UserName(name="ok")]), 0)
        got = {x.user: (x.error_code, x.error_message) for x in d.results}
        assert got == {"ok": (92, "Cannot describe SCRAM credentials for the same user twice in a single "
                                  "request: ok"),
                       "ghost": (91, "Attempt to describe a user credential that does not exist: ghost")}
        d = conn.request(Describe(users=[Describe.UserName(name="ok")]), 0)
        assert [(i.mechanism, i.iterations) for i in d.results[0].credential_infos] == [(2, 16384)]
        conn.request(Alter(deletions=[dl(name="ok", mechanism=2)], upsertions=[]), 0)


def test_kbroker_users_add_list_delete(setup, tmp_path):
    client_props = tmp_path / "client.properties"
    client_props.write_text(f"security.protocol=SASL_SSL\nsasl.mechanisms=SCRAM-SHA-512\nsasl.username={ALICE}\n"
                            f"sasl.password={ALICE_PW}\nssl.ca.location={setup.certs.ca}\n")
    base = [sys.executable, "-m", "cli", "users", "-b", f"127.0.0.1:{setup.sasl_ssl}",
            "--command-config", str(client_props)]

    def run(*args: str) -> str:
        out = subprocess.run([*base, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr
        return out.stdout

    run("add", "--user", "frank", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=f1],"
        "SCRAM-SHA-512=[password=f2]")
    listed = run("list", "--user", "frank")
    assert listed.strip() == ("SCRAM credential configs for user-principal 'frank' are "
                              "SCRAM-SHA-256=iterations=8192,SCRAM-SHA-512=iterations=4096")
    assert f"SCRAM credential configs for user-principal '{ALICE}' are SCRAM-SHA-512=iterations=4096" in run("list")
    from confluent_kafka.admin import AdminClient
    assert AdminClient(setup.confluent("frank", "f1", "SCRAM-SHA-256")).list_topics(timeout=30).brokers
    run("delete", "--user", "frank")
    assert "'frank'" not in run("list")


def test_users_bootstrap_refuses_while_the_broker_runs(setup):
    out = subprocess.run([sys.executable, "-m", "cli", "users", "bootstrap", "--config", str(setup.props),
                          "--user", "x", "--password", "y"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert f"held by process {setup.broker.proc.pid}" in out.stderr, out.stderr


def test_dynamic_sasl_mechanisms_apply_at_the_next_start(setup):
    """sasl.enabled.mechanisms is per-broker dynamic as in Kafka; kbroker builds its listeners at start,
    so an altered value is stored and applies after a restart (the last test: it restarts the broker)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient(setup.confluent())
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.enabled.mechanisms", "SCRAM-SHA-512", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    with _connect(setup.sasl_ssl, _client_tls(setup.certs)) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).mechanisms == \
            ["SCRAM-SHA-512", "SCRAM-SHA-256"]  # still the listeners built at start
    setup.broker.restart(timeout=60)
    with _connect(setup.sasl_ssl, _client_tls(setup.certs)) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).mechanisms == ["SCRAM-SHA-512"]
    with _connect(setup.sasl_plain) as conn:  # its listener-prefixed setting still wins
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).mechanisms == ["PLAIN", "SCRAM-SHA-256"]
