"""Inter-broker security: followers and inter-broker requests connect as clients of the other
brokers' ``inter.broker.listener.name`` with that listener's security protocol (real etcd, three
real brokers, certificates from the test CA of tests/helpers/tls_certs.py).

Each broker has a PLAINTEXT ``CLIENT`` listener (the test's clients) and a ``REPLICATION`` listener,
the inter-broker one:
- SASL_SSL with SCRAM-SHA-512: the brokers' user is written to etcd with ``kbroker users bootstrap``
  before any broker starts (as Kafka needs the inter-broker SCRAM user before the brokers fetch); an
  RF=3 topic gets a full ISR, acks=all produce succeeds, and the replicas are identical batch by batch;
  a transaction over partitions led by different brokers commits (markers between brokers);
- SSL with ``ssl.client.auth=required``: the same (mTLS: the broker's keystore is its client
  certificate, the principal of its fetches its subject, here ``User:CN=localhost``);
- a wrong inter-broker password: the followers stay out of the ISR (acks=all then NOT_ENOUGH_REPLICAS),
  each broker logs the authentication failure without a traceback and retries at the fetch backoff;
  once the stored credential is changed to the password the brokers use, they join the ISR.
- start-up refusals: GSSAPI (Kafka's default mechanism) and a missing JAAS username/password stop a
  broker with one error naming the setting.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from storage import batch as rb
from tests.helpers.broker_proc import REPO_ROOT, BrokerError, BrokerProcess, free_port
from tests.helpers.cluster_proc import CLUSTER_OVERRIDES
from tests.helpers.cluster_state import (
    assert_partition_replicas_identical,
    produce_raw,
    stop_and_check,
    view,
    wait_full_isr,
    wait_until,
)
from tests.helpers.coord_cluster import read_all
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.tls_certs import Certs, make_certs, make_server_keystore

TIMEOUT = 90
BROKER_USER, BROKER_PW = "kbroker-inter", "inter-secret"
BACKOFF_MS = 300
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


class SecureBroker(BrokerProcess):
    """A cluster broker with a PLAINTEXT client listener and a secured REPLICATION listener."""

    def __init__(self, etcd: EtcdProcess, base: Path, node_id: int, protocol: str, **overrides: str) -> None:
        self.node_id = node_id
        self.replication_port = free_port()
        self.protocol = protocol
        settings = {**CLUSTER_OVERRIDES, "kbroker.etcd.endpoints": etcd.endpoints, "node.id": str(node_id),
                    "replica.fetch.backoff.ms": str(BACKOFF_MS), "replica.lag.time.max.ms": "3000", **overrides}
        super().__init__(base / f"node-{node_id}", overrides=settings)

    def command(self) -> list[str]:
        settings = {
            **self.overrides,
            "listeners": f"CLIENT://127.0.0.1:{self.port},REPLICATION://127.0.0.1:{self.replication_port}",
            "listener.security.protocol.map": f"CLIENT:PLAINTEXT,REPLICATION:{self.protocol}",
            "inter.broker.listener.name": "REPLICATION",
            "log.dirs": str(self.data_dir),
        }
        cmd = [self.python, "-m", "broker", "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd


class Cluster:
    def __init__(self, brokers: dict[int, SecureBroker]) -> None:
        self.brokers = brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())


def tls_settings(certs: Certs) -> dict[str, str]:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}


def sasl_settings(password: str) -> dict[str, str]:
    return {"listener.name.replication.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.replication.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format(BROKER_USER, password)}


def bootstrap_user(etcd: EtcdProcess, tmp: Path, password: str) -> None:
    """The inter-broker SCRAM user, written to etcd before the brokers start (``kbroker users bootstrap``)."""
    props = tmp / "bootstrap.properties"
    props.write_text(f"kbroker.etcd.endpoints={etcd.endpoints}\nnode.id=1\nlog.dirs={tmp / 'bootstrap-data'}\n")
    out = subprocess.run([sys.executable, "-m", "cli", "users", "bootstrap", "--config", str(props),
                          "--user", BROKER_USER, "--password", password, "--mechanism", "SCRAM-SHA-512"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("inter_broker_certs"))


@pytest.fixture
def make_cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator:
    made: list[Cluster] = []

    def make(protocol: str, **overrides: str) -> Cluster:
        c = Cluster({i: SecureBroker(etcd, tmp_path, i, protocol, **overrides) for i in (1, 2, 3)})
        made.append(c)
        for b in c.brokers.values():
            b.start(timeout=60)
        return c

    yield make
    problems = []
    for c in made:
        problems += stop_and_check(c)  # type: ignore[arg-type]  (duck-typed: .brokers)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def create(cluster: Cluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})],
                             operation_timeout=60, request_timeout=60)
    fs[topic].result(TIMEOUT)


def produce_all(cluster: Cluster, topic: str, partition: int, prefix: str, n: int) -> tuple[int, int]:
    leader = cluster.brokers[view(cluster, topic)[partition].leader]  # type: ignore[arg-type]
    records = [(f"{prefix}-{i}".encode(), f"{prefix}-value-{i}".encode() * 10) for i in range(n)]
    return produce_raw(leader, topic, partition, rb.build_batch(records), acks=-1, timeout_ms=30_000)


def replicate_and_compare(cluster: Cluster, topic: str, partitions: int) -> None:
    """Full ISR everywhere, acks=all batches accepted, then the replicas equal up to the high watermark."""
    wait_full_isr(cluster, topic, partitions, 3, timeout=TIMEOUT)  # type: ignore[arg-type]
    for p in range(partitions):
        for round_ in range(5):
            err, _ = produce_all(cluster, topic, p, f"p{p}r{round_}", 50)
            assert err == 0, f"acks=all produce to {topic}-{p}: {ErrorCode(err).name}"
    for p in range(partitions):
        def caught_up(p: int = p) -> bool:
            try:
                hw, batches = assert_partition_replicas_identical(cluster, topic, p)  # type: ignore[arg-type]
            except AssertionError:
                return False
            return hw == 250 and batches == 5
        wait_until(caught_up, f"{topic}-{p}: 250 records on all three replicas, identical", TIMEOUT)
    wait_full_isr(cluster, topic, partitions, 3, timeout=TIMEOUT)  # type: ignore[arg-type]


def test_sasl_ssl_scram_sha_512_replicates(make_cluster, etcd: EtcdProcess, certs: Certs, tmp_path: Path) -> None:
    bootstrap_user(etcd, tmp_path, BROKER_PW)
    c = make_cluster("SASL_SSL", **tls_settings(certs), **sasl_settings(BROKER_PW),
                     **{"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"})
    create(c, "secure-sasl", 3)
    replicate_and_compare(c, "secure-sasl", 3)

    # A transaction over partitions led by all three brokers: the coordinator's WriteTxnMarkers to
    # the other leaders (and their KIP-890 verification asked of it) use the inter-broker listener.
    leaders = {info.leader for info in view(c, "secure-sasl").values()}  # type: ignore[arg-type]
    producer = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "secure-tx",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for p in range(3):
        for i in range(10):
            producer.produce("secure-sasl", value=f"tx-{p}-{i}".encode(), partition=p)
    producer.commit_transaction(TIMEOUT)
    got = read_all(c.bootstrap, "secure-sasl", range(3), 250 * 3 + 30)  # type: ignore[arg-type]
    assert sorted(v for recs in got.values() for _, v in recs if v.startswith(b"tx-")) == \
        sorted(f"tx-{p}-{i}".encode() for p in range(3) for i in range(10))
    assert len(leaders) > 1, f"all partitions led by {leaders}: no marker crossed brokers"
    for b in c.brokers.values():
        assert "inter-broker authentication" not in b.log_text(), b.log_tail()


def test_ssl_with_client_auth_replicates(make_cluster, certs: Certs) -> None:
    # ssl.client.auth=required: a follower without a client certificate gets no connection at all,
    # so the full ISR below shows each broker presenting its keystore as its client certificate.
    c = make_cluster("SSL", **tls_settings(certs), **{"listener.name.replication.ssl.client.auth": "required"})
    create(c, "secure-mtls", 1)
    replicate_and_compare(c, "secure-mtls", 1)


@pytest.mark.parametrize("algorithm", [None, ""])
def test_hostname_verification_of_the_peer(make_cluster, certs: Certs, algorithm: str | None) -> None:
    """Brokers whose certificate does not name 127.0.0.1 (the advertised host): with Kafka's default
    ssl.endpoint.identification.algorithm=https the followers refuse the leader (TLS handshake
    failure logged, out of the ISR); with it empty, the certificate chain alone is checked."""
    keystore = make_server_keystore(certs, "other-name", subject="/CN=kafka.invalid", san="DNS:kafka.invalid")
    settings = {**tls_settings(certs), "ssl.keystore.location": str(keystore)}
    if algorithm is not None:
        settings["ssl.endpoint.identification.algorithm"] = algorithm
    c = make_cluster("SSL", **settings)
    topic = "secure-hostname"
    create(c, topic, 1)
    if algorithm == "":
        replicate_and_compare(c, topic, 1)
        return
    info = wait_until(lambda: (i := view(c, topic)[0]).leader >= 0 and i.isr == (i.leader,) and i,  # type: ignore[arg-type]
                      f"{topic}: the ISR shrunk to the leader", TIMEOUT)
    for n in info.replicas:
        if n != info.leader:
            b = c.brokers[n]
            wait_until(lambda b=b: re.search(r"WARNING.*inter-broker TLS handshake with 127\.0\.0\.1:\d+ failed: "
                                             r".*(Hostname mismatch|IP address mismatch)", b.log_text()),
                       f"broker {n} logs the hostname mismatch", TIMEOUT)


def test_wrong_password_keeps_followers_out_of_the_isr(make_cluster, etcd: EtcdProcess, certs: Certs,
                                                        tmp_path: Path) -> None:
    bootstrap_user(etcd, tmp_path, BROKER_PW)
    cluster_started = time.monotonic()
    c = make_cluster("SASL_SSL", **tls_settings(certs), **sasl_settings("not-the-password"))
    topic = "secure-denied"
    create(c, topic, 1)
    # The ISR starts as the live replicas; the followers never fetch, so the lag rule drops them.
    info = wait_until(lambda: (i := view(c, topic)[0]).leader >= 0 and i.isr == (i.leader,) and i,  # type: ignore[arg-type]
                      f"{topic}: the ISR shrunk to the leader", TIMEOUT)
    err, _ = produce_all(c, topic, 0, "denied", 5)
    assert err == ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode(err).name

    # Every follower logs the failure, without a traceback, and retries at the fetch backoff: over
    # a window, at most about one attempt per backoff (an upper bound only; slowness lowers it).
    followers = [c.brokers[n] for n in info.replicas if n != info.leader]
    for b in followers:
        wait_until(lambda b=b: re.search(r"WARNING.*inter-broker authentication with 127\.0\.0\.1:\d+ failed: "
                                         r".*SASL_AUTHENTICATION_FAILED", b.log_text()),
                   f"{b.bootstrap} logs the authentication failure", TIMEOUT)
    before = {b.bootstrap: _retries(b) for b in followers}
    t0 = time.monotonic()
    wait_until(lambda: all(_retries(b) >= before[b.bootstrap] + 5 for b in followers), "five more retries each",
               TIMEOUT)
    window = time.monotonic() - t0
    for b in followers:
        retries = _retries(b) - before[b.bootstrap]  # one fetcher per follower: one leader, num.replica.fetchers=1
        assert retries <= 2 * window / (BACKOFF_MS / 1000) + 5, f"{b.bootstrap}: {retries} retries in {window:.1f} s"
        warnings = len(re.findall(r"inter-broker authentication with", b.log_text()))
        assert warnings <= (time.monotonic() - cluster_started) / 30 + 2, f"{b.bootstrap}: {warnings} warnings"
    assert view(c, topic)[0].isr == (info.leader,)  # type: ignore[arg-type]

    # The stored credential changed to what the brokers send: the next retry authenticates.
    out = subprocess.run([sys.executable, "-m", "cli", "users", "-b", c.bootstrap, "add", "--user", BROKER_USER,
                          "--password", "not-the-password"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    wait_full_isr(c, topic, 1, 3, timeout=TIMEOUT)  # type: ignore[arg-type]
    err, _ = produce_all(c, topic, 0, "allowed", 5)
    assert err == 0, ErrorCode(err).name


def _retries(b: BrokerProcess) -> int:
    """Fetch attempts the broker's fetchers logged as failed on authentication."""
    return b.log_text().count("failed (SaslAuthenticationError")


@pytest.mark.parametrize("settings,expected", [
    ({"listener.name.replication.sasl.enabled.mechanisms": "SCRAM-SHA-512"},
     "sasl.mechanism.inter.broker.protocol=GSSAPI is not supported"),
    ({"listener.name.replication.sasl.enabled.mechanisms": "SCRAM-SHA-512",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
     "listener.name.replication.scram-sha-512.sasl.jaas.config is not set"),
    ({"listener.name.replication.sasl.enabled.mechanisms": "SCRAM-SHA-512",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
      "listener.name.replication.scram-sha-256.sasl.jaas.config": SCRAM_JAAS.format("u", "p")},
     r"sasl.mechanism.inter.broker.protocol \(SCRAM-SHA-256\) must be included in sasl.enabled.mechanisms"),
])
def test_refuses_to_start_without_usable_inter_broker_sasl(etcd: EtcdProcess, certs: Certs, tmp_path: Path,
                                                           settings: dict[str, str], expected: str) -> None:
    b = SecureBroker(etcd, tmp_path, 1, "SASL_SSL", **tls_settings(certs), **settings)
    try:
        with pytest.raises(BrokerError, match="exited with code 1"):
            b.start(timeout=60)
    finally:
        b.kill()
    errors = [line for line in b.log_text().splitlines() if "could not start" in line]
    assert len(errors) == 1 and re.search(expected, errors[0]), b.log_tail()
    assert "Traceback" not in b.log_text()
    assert not (b.data_dir / "meta.properties").exists()  # refused before the log dir was touched
