"""Certificate reload without a restart (issue 17 item 5): a dynamic change of
``listener.name.<l>.ssl.keystore.location`` swaps the certificate new connections see, after Kafka's
SslFactory validation (the material loads, the DN and SANs are kept unless allowed).

One broker, certificates from a CA made by the test. Listeners: SSL with mTLS (``ssl.client.auth=required``,
advertised: clients use it), RELAXED (SSL too, with ``listener.name.relaxed.ssl.allow.dn.changes=true``)
and PLAINTEXT (readiness and the raw IncrementalAlterConfigs requests). The tests run in order: each
starts from the certificate the previous one left.
"""

from __future__ import annotations

import hashlib
import ssl
import sys
import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.helpers.broker_proc import BrokerProcess, free_port
from tests.helpers.tls_certs import Certs, make_certs, make_server_keystore
from tests.helpers.wire import RawConnection, send_request

INVALID_REQUEST = 42


class ReloadBroker(BrokerProcess):
    def __init__(self, data_dir: Path, props: Path, port: int) -> None:
        super().__init__(data_dir, port=port)
        self.props = props

    def command(self) -> list[str]:
        return [sys.executable, "-m", "broker", "serve", str(self.props)]


class Setup:
    def __init__(self, broker: ReloadBroker, certs: Certs, ssl_port: int, relaxed: int) -> None:
        self.broker, self.certs, self.ssl_port, self.relaxed = broker, certs, ssl_port, relaxed

    def client_config(self) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(self.certs.ca), "ssl.certificate.location": str(self.certs.client_cert),
                "ssl.key.location": str(self.certs.client_key), "ssl.endpoint.identification.algorithm": "https"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls_reload")
    certs = make_certs(tmp / "certs", server_key_password="keypass")
    ssl_port, relaxed, plain = free_port(), free_port(), free_port()
    props = tmp / "server.properties"
    props.write_text("\n".join([
        f"listeners=SSL://127.0.0.1:{ssl_port},RELAXED://127.0.0.1:{relaxed},PLAINTEXT://127.0.0.1:{plain}",
        f"advertised.listeners=SSL://127.0.0.1:{ssl_port},RELAXED://127.0.0.1:{relaxed},"
        f"PLAINTEXT://127.0.0.1:{plain}",
        "listener.security.protocol.map=SSL:SSL,RELAXED:SSL,PLAINTEXT:PLAINTEXT",
        f"log.dirs={tmp / 'data'}",
        "num.partitions=1",
        "group.initial.rebalance.delay.ms=0",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs.server_keystore}",
        "ssl.key.password=keypass",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs.ca}",
        "listener.name.ssl.ssl.client.auth=required",
        "listener.name.relaxed.ssl.allow.dn.changes=true",
    ]) + "\n")
    broker = ReloadBroker(tmp / "data", props, plain)
    broker.start(timeout=60)
    try:
        yield Setup(broker, certs, ssl_port, relaxed)
    finally:
        broker.stop()
        broker.kill()
    assert "Traceback" not in broker.log_text(), broker.log_tail()


def _fingerprint_of_file(path: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(path.read_text())).hexdigest()


def _tls_connect(setup: Setup, port: int) -> tuple[RawConnection, str]:
    """A TLS connection (client certificate, server verified against the test CA); returns it and the
    SHA-256 fingerprint of the certificate the broker presented."""
    ctx = ssl.create_default_context(cafile=str(setup.certs.ca))
    ctx.load_cert_chain(str(setup.certs.client_cert), str(setup.certs.client_key))
    conn = RawConnection(f"127.0.0.1:{port}", timeout=15)
    conn.sock = ctx.wrap_socket(conn.sock, server_hostname="localhost")
    assert isinstance(conn.sock, ssl.SSLSocket)
    return conn, hashlib.sha256(conn.sock.getpeercert(binary_form=True) or b"").hexdigest()


def _served(setup: Setup, port: int | None = None) -> str:
    conn, fingerprint = _tls_connect(setup, port or setup.ssl_port)
    with conn:
        assert conn.request(ApiVersionsRequest(), 2).error_code == 0
    return fingerprint


def _alter(setup: Setup, entries: dict[str, str], resource: str = "1") -> tuple[int, str | None]:
    res_cls = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(version=1, validate_only=False, resources=[res_cls(
        version=1, resource_type=4, resource_name=resource, configs=[
            res_cls.AlterableConfig(version=1, name=k, config_operation=0, value=v) for k, v in entries.items()])])
    (result,) = send_request(setup.broker.bootstrap, req, 1).responses
    return result.error_code, result.error_message


def _described(setup: Setup, name: str) -> str | None:
    req = DescribeConfigsRequest(version=4, resources=[DescribeConfigsRequest.DescribeConfigsResource(
        version=4, resource_type=4, resource_name="1", configuration_keys=[name])],
        include_synonyms=False, include_documentation=False)
    (result,) = send_request(setup.broker.bootstrap, req, 4).results
    return {c.name: c.value for c in result.configs}.get(name)


def _produce_and_consume(setup: Setup) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"t-{uuid.uuid4().hex[:10]}"
    producer = Producer({**setup.client_config(), "acks": "all"})
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    del producer
    consumer = Consumer({**setup.client_config(), "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == 5:
                break
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(5)]


KEYSTORE = "listener.name.ssl.ssl.keystore.location"


def test_new_connections_get_the_reloaded_certificate_and_open_ones_keep_working(setup):
    a = _fingerprint_of_file(setup.certs.dir / "server.pem")
    old, fingerprint = _tls_connect(setup, setup.ssl_port)
    assert fingerprint == a
    b_store = make_server_keystore(setup.certs, "b", key_type="ec")  # same DN and SANs, another key type
    b = _fingerprint_of_file(setup.certs.dir / "b.pem")
    assert _alter(setup, {KEYSTORE: str(b_store)}) == (0, None)
    assert _served(setup) == b
    assert _served(setup, setup.relaxed) == a  # only the listener named was reloaded
    with old:  # the connection opened before the reload carries on with its own session
        assert old.request(ApiVersionsRequest(), 2).error_code == 0
        assert old.sock.getpeercert(binary_form=True) is not None
    _produce_and_consume(setup)  # mTLS still verifies client certificates on the new context
    assert _described(setup, KEYSTORE) == str(b_store)


def test_invalid_keystores_are_refused_and_the_current_certificate_stays(setup):
    b = _fingerprint_of_file(setup.certs.dir / "b.pem")
    d = setup.certs.dir
    garbage = d / "garbage.pem"
    garbage.write_text("not a PEM file\n")
    mismatched = d / "mismatched.pem"  # the key of one certificate with another certificate
    mismatched.write_text((d / "server.key").read_text() + (d / "b.pem").read_text())
    for bad in (garbage, mismatched, d / "missing.pem"):
        code, message = _alter(setup, {KEYSTORE: str(bad)})
        assert code == INVALID_REQUEST, (bad, message)
        assert message and "Validation of dynamic config update of SSLFactory failed" in message, message
        assert _served(setup) == b
    # The encrypted key of the first keystore with a wrong password.
    code, message = _alter(setup, {KEYSTORE: str(setup.certs.server_keystore),
                                   "listener.name.ssl.ssl.key.password": "wrong"})
    assert code == INVALID_REQUEST, message
    assert _served(setup) == b
    assert _described(setup, KEYSTORE) == str(d / "b.keystore.pem")  # nothing stored either


def test_a_dn_or_san_change_is_refused_unless_allowed(setup):
    b = _fingerprint_of_file(setup.certs.dir / "b.pem")
    other = make_server_keystore(setup.certs, "other-dn", subject="/CN=localhost/O=another")
    code, message = _alter(setup, {KEYSTORE: str(other)})
    assert code == INVALID_REQUEST and "DistinguishedName does not match" in (message or ""), message
    fewer = make_server_keystore(setup.certs, "fewer-san", san="DNS:localhost")
    code, message = _alter(setup, {KEYSTORE: str(fewer)})
    assert code == INVALID_REQUEST and "SubjectAltNames do not match" in (message or ""), message
    assert _served(setup) == b
    # More SANs are fine (Kafka: the new set must contain the old one).
    more = make_server_keystore(setup.certs, "more-san", san="IP:127.0.0.1,DNS:localhost,DNS:kbroker.test")
    assert _alter(setup, {KEYSTORE: str(more)}) == (0, None)
    assert _served(setup) == _fingerprint_of_file(setup.certs.dir / "more-san.pem")
    # listener.name.relaxed.ssl.allow.dn.changes=true: that listener takes the new subject.
    assert _alter(setup, {"listener.name.relaxed.ssl.keystore.location": str(other)}) == (0, None)
    assert _served(setup, setup.relaxed) == _fingerprint_of_file(setup.certs.dir / "other-dn.pem")


def test_listener_prefixed_names_are_per_broker_and_checked(setup):
    b_store = str(setup.certs.dir / "b.keystore.pem")
    code, message = _alter(setup, {KEYSTORE: b_store}, resource="")
    assert code == INVALID_REQUEST and "broker id must be specified" in (message or ""), message
    code, message = _alter(setup, {"listener.name.nosuch.ssl.keystore.location": b_store})
    assert code == 40, message  # INVALID_CONFIG: no such listener (kbroker refuses typos)
    code, message = _alter(setup, {"listener.name.ssl.ssl.allow.dn.changes": "true"})
    assert code == INVALID_REQUEST and "Cannot update these configs dynamically" in (message or ""), message


def test_setting_the_same_path_again_reloads_its_new_content(setup):
    path = setup.certs.dir / "renewed.keystore.pem"
    sans = "IP:127.0.0.1,DNS:localhost,DNS:kbroker.test"  # those of the certificate served now
    first = make_server_keystore(setup.certs, "renew1", san=sans)
    path.write_text(first.read_text())
    assert _alter(setup, {KEYSTORE: str(path)}) == (0, None)
    assert _served(setup) == _fingerprint_of_file(setup.certs.dir / "renew1.pem")
    second = make_server_keystore(setup.certs, "renew2", san=sans)  # the certificate renewed in place
    path.write_text(second.read_text())
    assert _served(setup) == _fingerprint_of_file(setup.certs.dir / "renew1.pem")  # not before the alter
    assert _alter(setup, {KEYSTORE: str(path)}) == (0, None)
    assert _served(setup) == _fingerprint_of_file(setup.certs.dir / "renew2.pem")


def test_the_reloaded_keystore_is_kept_across_a_restart(setup):
    expected = _fingerprint_of_file(setup.certs.dir / "renew2.pem")
    setup.broker.restart(timeout=60)
    assert _served(setup) == expected
