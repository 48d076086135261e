"""etcd access settings against a real etcd: TLS (https:// endpoints, kbroker.etcd.ssl.*) and user/password auth.

etcd is started with ``--cert-file --key-file --trusted-ca-file --client-cert-auth`` and serves
clients over TLS only; certificates come from the openssl-made test CA (tests/helpers/tls_certs.py:
server certificate with an IP SAN for 127.0.0.1, a client certificate). Authentication is enabled
through etcd's JSON gateway (``/v3/auth/...``), as ``etcdctl auth enable`` does.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from cluster.etcd_session import EtcdSession, EtcdUnavailable
from cluster.etcd_tls import EtcdTls
from cluster.node import ClusterNode, ClusterStartError
from cluster.records import Endpoint
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.etcd_proc import ETCD_PACKAGE, EtcdProcess, EtcdTlsFiles
from tests.helpers.tls_certs import Certs, make_certs
from tests.helpers.tools import require_tool

FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200"}


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


@pytest.fixture
def tls_etcd(tmp_path: Path, certs: Certs):
    require_tool("etcd", shutil.which("etcd") is not None, f"etcd not on PATH (apt-get install {ETCD_PACKAGE})")
    proc = EtcdProcess(tmp_path / "etcd", tls=EtcdTlsFiles(certs.ca, certs.server_cert, certs.server_key,
                                                           client_cert_auth=True, client_cert=certs.client_cert,
                                                           client_key=certs.client_key))
    proc.start()
    try:
        yield proc
    finally:
        try:
            proc.stop()
        finally:
            proc.kill()


def tls_settings(etcd: EtcdProcess, certs: Certs, **extra: str) -> dict[str, str]:
    return {"kbroker.etcd.endpoints": etcd.endpoints, "kbroker.etcd.ssl.cafile": str(certs.ca),
            "kbroker.etcd.ssl.certfile": str(certs.client_cert), "kbroker.etcd.ssl.keyfile": str(certs.client_key),
            **FAST, **extra}


async def start_node(settings: dict[str, str], tmp_path: Path) -> ClusterNode:
    return await ClusterNode.start(settings, node_id=1, endpoints=[Endpoint("PLAINTEXT", "127.0.0.1", 9092)],
                                   rack=None, log_dirs=[tmp_path / "logs"])


async def test_session_over_tls_with_client_certificate_puts_and_gets(tls_etcd, certs):
    assert tls_etcd.endpoints.startswith("https://127.0.0.1:")
    session = EtcdSession.from_config(tls_settings(tls_etcd, certs))
    await session.open()
    try:
        assert session.endpoint == tls_etcd.endpoints
        await session.client.put(b"/tls-test", b"over tls", lease=session.lease_id)
        assert (await session.client.get(b"/tls-test")).value == b"over tls"
    finally:
        await session.close()


async def test_plaintext_client_against_tls_etcd_is_refused_with_a_hint(tls_etcd, tmp_path):
    settings = {**FAST, "kbroker.etcd.endpoints": tls_etcd.endpoints.replace("https://", "http://")}
    with pytest.raises(ClusterStartError) as e:
        await start_node(settings, tmp_path)
    assert "cannot reach etcd" in str(e.value) and "https://" in str(e.value)


async def test_wrong_ca_fails_the_tls_handshake(tls_etcd, certs, tmp_path):
    other = make_certs(tmp_path / "other-certs")
    settings = tls_settings(tls_etcd, certs, **{"kbroker.etcd.ssl.cafile": str(other.ca)})
    with pytest.raises(ClusterStartError) as e:
        await start_node(settings, tmp_path)
    assert "TLS handshake failed" in str(e.value) and "kbroker.etcd.ssl.cafile" in str(e.value)


async def test_missing_client_certificate_is_refused_by_etcd(tls_etcd, certs, tmp_path):
    settings = {**FAST, "kbroker.etcd.endpoints": tls_etcd.endpoints, "kbroker.etcd.ssl.cafile": str(certs.ca)}
    with pytest.raises(ClusterStartError, match="cannot reach etcd"):
        await start_node(settings, tmp_path)


async def test_settings_that_would_send_plaintext_or_cannot_be_read_refuse_the_start(tmp_path, certs):
    with pytest.raises(ClusterStartError, match="use https://"):
        await start_node({**FAST, "kbroker.etcd.endpoints": "http://127.0.0.1:1",
                          "kbroker.etcd.ssl.cafile": str(certs.ca)}, tmp_path)
    with pytest.raises(ClusterStartError, match="kbroker.etcd.ssl.cafile=.*missing.pem"):
        await start_node({**FAST, "kbroker.etcd.endpoints": "https://127.0.0.1:1",
                          "kbroker.etcd.ssl.cafile": str(tmp_path / "missing.pem")}, tmp_path)
    with pytest.raises(ValueError, match="go together"):
        EtcdTls(certfile=str(certs.client_cert))


def test_a_broker_joins_a_tls_etcd_and_serves(tls_etcd, certs, tmp_path):
    from confluent_kafka.admin import AdminClient

    broker = BrokerProcess(tmp_path / "node-1", overrides={**tls_settings(tls_etcd, certs), "node.id": "1",
                                                           "broker.session.timeout.ms": "3000",
                                                           "broker.heartbeat.interval.ms": "500"})
    broker.start(timeout=60)
    try:
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
        assert list(md.brokers) == [1]
        assert "via https://" in broker.log_text()
    finally:
        broker.stop()


# --- user/password authentication ----------------------------------------------------------------
def enable_auth(etcd: EtcdProcess, password: str) -> None:
    """As ``etcdctl user add root; etcdctl auth enable``: a root user with the root role, then auth on."""
    etcd.gateway("/v3/auth/user/add", {"name": "root", "password": password})
    etcd.gateway("/v3/auth/role/add", {"name": "root"})
    etcd.gateway("/v3/auth/user/grant", {"user": "root", "role": "root"})
    etcd.gateway("/v3/auth/enable", {})


async def test_user_and_password_authenticate_to_an_etcd_with_auth(etcd, tmp_path):
    enable_auth(etcd, "s3cret")
    session = EtcdSession.from_config({**FAST, "kbroker.etcd.endpoints": etcd.endpoints,
                                       "kbroker.etcd.username": "root", "kbroker.etcd.password": "s3cret"})
    await session.open()
    try:
        await session.client.put(b"/auth-test", b"authenticated", lease=session.lease_id)
        assert (await session.client.get(b"/auth-test")).value == b"authenticated"
    finally:
        await session.close()
    with pytest.raises(EtcdUnavailable, match="(?i)authentication failed"):
        await EtcdSession.from_config({**FAST, "kbroker.etcd.endpoints": etcd.endpoints,
                                       "kbroker.etcd.username": "root", "kbroker.etcd.password": "wrong"}).open()
    # Without credentials etcd refuses the requests a broker needs (the cluster id read, here).
    with pytest.raises(ClusterStartError):
        await start_node({**FAST, "kbroker.etcd.endpoints": etcd.endpoints}, tmp_path)


async def test_an_expired_auth_token_is_renewed(etcd, tmp_path):
    """etcd forgets every auth token when it restarts (and drops one unused for --auth-token-ttl); aetcd
    alone keeps sending the dead token and every request fails with "invalid auth token". The client
    authenticates again and repeats the request."""
    enable_auth(etcd, "s3cret")
    session = EtcdSession.from_config({**FAST, "kbroker.etcd.endpoints": etcd.endpoints,
                                       "kbroker.etcd.username": "root", "kbroker.etcd.password": "s3cret"})
    await session.open()
    try:
        await session.client.put(b"/token-test", b"before")
        etcd.restart()
        await session.client.put(b"/token-test", b"after")
        assert (await session.client.get(b"/token-test")).value == b"after"
        assert session.client.reauthentications >= 1
    finally:
        await session.close()


def test_a_broker_with_etcd_auth_survives_an_etcd_restart(etcd, tmp_path):
    """A broker on an etcd with auth keeps working after etcd restarts (all tokens gone): a topic created
    afterwards is written to etcd (a KV request with a renewed token) and comes back through the
    broker's watch (reopened with the new token)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    enable_auth(etcd, "s3cret")
    broker = BrokerProcess(tmp_path / "node-1", overrides={
        "kbroker.etcd.endpoints": etcd.endpoints, "kbroker.etcd.username": "root",
        "kbroker.etcd.password": "s3cret", "node.id": "1", "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "500", "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1"})
    broker.start(timeout=60)
    try:
        etcd.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deadline = time.monotonic() + 60
        while True:  # the broker may answer NOT_CONTROLLER / time out while it reconnects: retry
            try:
                admin.create_topics([NewTopic("after-restart", 2, 1)])["after-restart"].result(20)
                break
            except Exception as e:  # noqa: BLE001
                if "already exists" in str(e):
                    break
                assert time.monotonic() < deadline, f"topic creation kept failing: {e}"
                time.sleep(0.5)
        topics = admin.list_topics(timeout=30).topics
        assert "after-restart" in topics and len(topics["after-restart"].partitions) == 2
        assert "Traceback" not in broker.log_text(), broker.log_tail()
    finally:
        broker.stop()
