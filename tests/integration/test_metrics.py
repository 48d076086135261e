"""Prometheus endpoint (issue 18, item 1, acceptance 1): scraped with urllib from a real broker
while confluent-kafka producers and consumers run.

Messages-in rises by the records sent and bytes-in by the growth of the partition's log (the
stored batch sizes); bytes-out by at least that once a consumer read it back; consumer lag is
reported per group and partition and falls to 0 once the consumer has caught up and committed;
per-API latency histograms exist for Produce and Fetch; every metric selector in the shipped
Grafana dashboard matches a served series; ``promtool check metrics`` accepts the output;
transaction coordinator gauges see an open transaction and its age; share-group (KIP-932)
acknowledgement, delivery, request and lag series follow a share consumer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.broker_proc import BrokerProcess, free_port
from tests.helpers.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kbroker-dashboard.json"
DEADLINE_S = 30


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    port = free_port()
    d = tmp_path_factory.mktemp("metrics") / "data"
    b = BrokerProcess(d, overrides={"kbroker.prometheus.listener": f"http://127.0.0.1:{port}",
                                    "offsets.topic.num.partitions": "2",
                                    "transaction.state.log.num.partitions": "2"})
    b.start()
    try:
        yield b, f"http://127.0.0.1:{port}/metrics"
    finally:
        b.stop()


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(scrape_text(url)):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(m: dict, name: str, **labels: str) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)



def scrape_when(url: str, pred, what: str) -> dict:
    """Scrape until ``pred(scrape)`` holds; returns that scrape."""
    def attempt():
        m = scrape(url)
        return m if pred(m) else None
    return wait_for(attempt, what, DEADLINE_S, interval=0.2)


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 25})
    for i in range(n):
        p.produce(topic, f"value-{i}".encode() * 3, key=str(i).encode(), partition=0)
    assert p.flush(30) == 0


def test_messages_and_bytes_in_follow_the_log(mb) -> None:
    b, url = mb
    create_topic(b.bootstrap, "m-in")
    before = scrape(url)
    produce(b.bootstrap, "m-in", 200)
    after = scrape(url)
    lbl = {"topic": "m-in", "partition": "0"}
    assert value(after, "kafka_log_log_logendoffset", **lbl) == 200
    grown = value(after, "kafka_log_log_size", **lbl) - value(before, "kafka_log_log_size", **lbl)
    assert grown > 0
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="m-in") == 200
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="m-in") == grown
    # The all-topics series (no topic label) rises by the same amounts.
    for name, delta in (("kafka_server_brokertopicmetrics_messagesin_total", 200),
                        ("kafka_server_brokertopicmetrics_bytesin_total", grown)):
        assert value(after, name) - value(before, name) == delta
    assert value(after, "kafka_log_log_numlogsegments", **lbl) == 1
    assert value(after, "kafka_log_log_logstartoffset", **lbl) == 0
    # Single node: nothing under-replicated, one active controller.
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_server_replicamanager_partitioncount") >= 1


def test_consumer_lag_falls_to_zero_and_bytes_out(mb) -> None:
    b, url = mb
    create_topic(b.bootstrap, "m-lag")
    produce(b.bootstrap, "m-lag", 100)
    size = value(scrape(url), "kafka_log_log_size", topic="m-lag", partition="0")
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "m-lag-group", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("m-lag", 0, 0)])
        c.commit(offsets=[TopicPartition("m-lag", 0, 40)], asynchronous=False)
        lbl = {"consumergroup": "m-lag-group", "topic": "m-lag", "partition": "0"}
        m = scrape(url)
        assert value(m, "kafka_consumergroup_current_offset", **lbl) == 40
        assert value(m, "kafka_consumergroup_lag", **lbl) == 60
        assert value(m, "kafka_topic_partition_current_offset", topic="m-lag", partition="0") == 100
        got, end = 0, time.monotonic() + DEADLINE_S
        last = None
        while got < 100 and time.monotonic() < end:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
                last = msg
        assert got == 100 and last is not None
        c.commit(message=last, asynchronous=False)
    finally:
        c.close()
    key = ("kafka_consumergroup_lag", frozenset(lbl.items()))
    m = scrape_when(url, lambda s: key in s and s[key] == 0, "lag 0")
    assert value(m, "kafka_consumergroup_current_offset", **lbl) == 100
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="m-lag") >= size
    assert value(m, "kafka_coordinator_group_groupmetadatamanager_numoffsets") >= 1


def test_request_latency_histograms(mb) -> None:
    b, url = mb
    produce(b.bootstrap, "m-hist", 10)  # auto-created
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "m-hist-group", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["m-hist"])
        wait_for(lambda: (msg := c.poll(0.5)) is not None and not msg.error(), "a record")
    finally:
        c.close()
    m = scrape(url)
    for api in ("Produce", "Fetch", "Metadata", "JoinGroup"):
        count = value(m, "kafka_network_requestmetrics_totaltimems_count", request=api)
        assert count >= 1, api
        assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request=api, le="+Inf") == count
        assert sum(v for (n, lb), v in m.items() if n == "kafka_network_requestmetrics_requests_total"
                   and dict(lb)["request"] == api) >= count
    # A JoinGroup without a member id is answered MEMBER_ID_REQUIRED first (KIP-394): an error.
    assert value(m, "kafka_network_requestmetrics_errors_total", request="JoinGroup", error="MEMBER_ID_REQUIRED") >= 1


def test_transaction_coordinator_sees_an_open_transaction(mb) -> None:
    b, url = mb
    create_topic(b.bootstrap, "m-txn")
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "m-txn-id"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("m-txn", b"x", partition=0)
    assert p.flush(30) == 0
    m = scrape_when(url, lambda s: value(s, "kbroker_transaction_coordinator_transactions", state="Ongoing") >= 1,
                    "an ongoing transaction")
    assert value(m, "kbroker_transaction_coordinator_oldest_ongoing_transaction_age_seconds") >= 0
    wait_for(lambda: value(scrape(url), "kbroker_transaction_coordinator_oldest_ongoing_transaction_age_seconds")
             > 0, "the transaction to age")
    p.commit_transaction(30)
    wait_for(lambda: value(scrape(url), "kbroker_transaction_coordinator_transactions", state="Ongoing") == 0,
             "the transaction to end")


_SELECTOR = re.compile(r"\b((?:kafka|kbroker)_[a-z0-9_]+)(\{[^}]*\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!=|=)\s*"([^"]*)"')


def dashboard_selectors() -> list[tuple[str, list[tuple[str, str, str]]]]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs
    out = []
    for e in exprs:
        for name, body in _SELECTOR.findall(e):
            matchers = [(k, op, v) for k, op, v in _MATCHER.findall(body or "") if k != "instance"]
            out.append((name, matchers))
    return out


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for k, op, v in matchers:
        have = labels.get(k, "")
        if (op == "=" and have != v) or (op == "!=" and have == v) or (op == "=~" and not re.fullmatch(v, have)):
            return False
    return True


def test_share_group_metrics(mb) -> None:
    """A share consumer (KIP-932) that accepts, releases (once) and rejects: the acknowledgement
    meter per type, acquisitions and redeliveries, the share-request meters per topic, the share
    group's members and state, and its lag falling to 0."""
    from confluent_kafka import AcknowledgeType

    from tests.helpers.share_clients import ShareWorker, produce_values, set_group_configs

    b, url = mb
    create_topic(b.bootstrap, "m-share")
    set_group_configs(b.bootstrap, "m-sg", {"share.auto.offset.reset": "earliest"})
    produce_values(b.bootstrap, "m-share", range(30), 1)

    def decide(m):
        v = int(m.value())
        if v % 3 == 1 and m.delivery_count() == 1:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.REJECT if v % 3 == 2 else AcknowledgeType.ACCEPT

    w = ShareWorker(b.bootstrap, "m-sg", ["m-share"], explicit=True, decide=decide)
    w.start()
    try:
        m = scrape_when(url, lambda m: value(m, "kbroker_share_group_lag", sharegroup="m-sg", topic="m-share",
                                             partition="0") == 0 and value(
            m, "kafka_server_sharegroupmetrics_recordacknowledgements_total", acktype="Accept") == 20,
            "the share group done with the topic")
        assert value(m, "kbroker_share_group_members", sharegroup="m-sg") == 1
        assert value(m, "kafka_coordinator_group_groupmetadatamanager_numsharegroupsstable") >= 1
    finally:
        w.stop_event.set()
        w.join(60)
    assert not w.errors, w.errors
    assert value(m, "kafka_server_sharegroupmetrics_recordacknowledgements_total", acktype="Release") == 10
    assert value(m, "kafka_server_sharegroupmetrics_recordacknowledgements_total", acktype="Reject") == 10
    assert value(m, "kbroker_share_acquired_records_total") == 40
    assert value(m, "kbroker_share_redelivered_records_total") == 10
    assert value(m, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", topic="m-share") >= 1
    assert value(m, "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total", topic="m-share") >= 1
    assert value(m, "kafka_server_brokertopicmetrics_failedsharefetchrequests_total", topic="m-share") == 0
    assert value(m, "kbroker_share_partitions") >= 1
    assert value(m, "kbroker_share_inflight_records", state="Acquired") == 0
    assert value(m, "kafka_server_group_coordinator_metrics_sharegrouprebalance_total") >= 1


def test_every_dashboard_query_has_data(mb) -> None:
    """After the traffic of the other tests (run alone it makes its own), each metric selector of
    the dashboard (name and label matchers; ``instance`` is Prometheus's own label) matches a
    served series."""
    b, url = mb
    produce(b.bootstrap, "m-dash", 5)
    m = scrape(url)
    missing = [(name, matchers) for name, matchers in dashboard_selectors()
               if not any(n == name and _matches(dict(lb), matchers) for (n, lb) in m)]
    assert not missing, missing


def test_promtool_accepts_the_output(mb) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing (make tools installs Debian's prometheus package)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    _, url = mb
    text = scrape_text(url)
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


def test_no_endpoint_unless_configured(tmp_path: Path) -> None:
    """Off by default: the broker binds nothing but its Kafka listener."""
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        assert "prometheus metrics on" not in b.log_text()
    finally:
        b.stop()
