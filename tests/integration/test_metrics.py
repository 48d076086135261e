"""Prometheus endpoint (issue 18, item 1, acceptance 1): scraped with urllib from a real broker
while confluent-kafka producers and consumers run.

Messages-in rises by the records sent and bytes-in by the growth of the partition's log (the
stored batch sizes); bytes-out by at least that once a consumer read it back; consumer lag is
reported per group and partition and falls to 0 once the consumer has caught up and committed;
per-API latency histograms exist for Produce and Fetch; every metric selector in the shipped
Grafana dashboard matches a served series; ``promtool check metrics`` accepts the output;
transaction coordinator gauges see an open transaction and its age; the ``process_*`` families
(CPU seconds, resident memory, open fds, start time) describe the broker's own process; share-group
(KIP-932) acknowledgement, delivery, request and lag series follow a share consumer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
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


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing (make tools installs Debian's prometheus package)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return promtool


def test_promtool_accepts_the_output(mb) -> None:
    promtool = _promtool()
    _, url = mb
    text = scrape_text(url)
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


# Two brokers' latency buckets as kbroker serves them (bounds 10, 25, 100, 250 ms shown; le written
# as the collector writes it), increments per minute: broker a answers 60 Produce (54 within 10 ms,
# all within 25 ms; 600 ms in total) and 60 Fetch (all within 10 ms), broker b 120 Produce (60 within
# 100 ms, all within 250 ms; 12,000 ms in total).
_SERIES = {("a", "Produce"): ([54, 60, 60, 60, 60], 600), ("a", "Fetch"): ([60, 60, 60, 60, 60], 60),
           ("b", "Produce"): ([0, 0, 60, 120, 120], 12000)}
_EXPECTED = [  # per query of the docs' promql block, in order: (labels, value) rounded to 0.001
    [('{instance="a"}', 23.5), ('{instance="b"}', 247)],  # 10 + 15 * 0.9; 100 + 150 * 0.98
    [('{request="Produce"}', 245.5), ('{request="Fetch"}', 9.9)],  # buckets summed over a and b
    [("{}", 70)],  # (600 + 12000) / (60 + 120)
    [("{}", 0.667)],  # (60 + 60) / 180 within 100 ms
]


def test_documented_latency_queries_compute_what_the_docs_say(tmp_path: Path) -> None:
    """The PromQL of docs/operations.md ("Request latency"), evaluated by Prometheus' own engine
    (``promtool test rules``) over bucket series shaped as kbroker serves them: each documented
    query parses and gives the percentile, mean and SLO ratio worked out by hand."""
    promtool = _promtool()
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = doc.split("```promql\n", 1)[1].split("```", 1)[0]
    queries = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(queries) == len(_EXPECTED), queries
    series = []
    for (inst, api), (buckets, total_ms) in _SERIES.items():
        lbl = f'request="{api}",instance="{inst}"'
        for le, n in zip(("10.0", "25.0", "100.0", "250.0", "+Inf"), buckets, strict=True):
            series.append({"series": f'kafka_network_requestmetrics_totaltimems_bucket{{{lbl},le="{le}"}}',
                           "values": f"0+{n}x10"})
        series.append({"series": f"kafka_network_requestmetrics_totaltimems_count{{{lbl}}}", "values": f"0+{buckets[-1]}x10"})
        series.append({"series": f"kafka_network_requestmetrics_totaltimems_sum{{{lbl}}}", "values": f"0+{total_ms}x10"})
    tests = [{"expr": f"round({q}, 0.001)", "eval_time": "10m",
              "exp_samples": [{"labels": lb, "value": v} for lb, v in exp]}
             for q, exp in zip(queries, _EXPECTED, strict=True)]
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}
    path = tmp_path / "latency-queries.yml"
    path.write_text(json.dumps(spec))  # YAML is a superset of JSON
    r = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


def _proc_stat(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (field 3, state, is index 0)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2:].split()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process metrics are read from /proc (Linux)")
def test_process_metrics_describe_the_broker_process(mb) -> None:
    """prometheus-client's ProcessCollector families, as Kafka-on-JVM exporters and every Python
    exporter serve them, measured for the broker's pid (not the scraper's): its start time, its
    CPU seconds as the kernel counts them, its resident memory, and open fds that follow the
    connections a client opens and closes."""
    b, url = mb
    assert b.proc is not None
    pid = b.proc.pid
    m = scrape(url)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                 "process_open_fds", "process_max_fds", "process_start_time_seconds"):
        assert (name, frozenset()) in m, name

    # Start time: the kernel's start of the broker pid (clock ticks after boot), to the second.
    ticks = os.sysconf("SC_CLK_TCK")
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    started = btime + int(_proc_stat(pid)[19]) / ticks
    assert abs(value(m, "process_start_time_seconds") - started) < 2
    assert value(m, "process_start_time_seconds") <= time.time()

    # CPU: between two readings of the broker's own utime+stime taken around the scrape.
    def kernel_cpu() -> float:
        f = _proc_stat(pid)
        return (int(f[11]) + int(f[12])) / ticks
    produce(b.bootstrap, "m-proc", 200)  # some CPU to count
    lo = kernel_cpu()
    cpu = value(scrape(url), "process_cpu_seconds_total")
    hi = kernel_cpu()
    # (prometheus-client adds utime and stime as floats: allow one clock tick of rounding)
    assert 0 < lo - 1 / ticks <= cpu <= hi + 1 / ticks, (lo, cpu, hi)

    # Resident memory: the broker's VmRSS, give or take what a scrape allocates.
    rss_kb = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if line.startswith("VmRSS:"))
    rss = value(scrape(url), "process_resident_memory_bytes")
    assert 0.5 * rss_kb * 1024 < rss < 2 * rss_kb * 1024, (rss, rss_kb)
    assert value(m, "process_max_fds") >= value(m, "process_open_fds") > 0

    # Open fds: 20 more connections to the broker show up as 20 more fds, and go away on close.
    base = len(os.listdir(f"/proc/{pid}/fd"))
    socks = [socket.create_connection(("127.0.0.1", b.port), timeout=10) for _ in range(20)]
    try:
        scrape_when(url, lambda s: value(s, "process_open_fds") >= base + 20, "20 more open fds")
    finally:
        for s_ in socks:
            s_.close()
    scrape_when(url, lambda s: value(s, "process_open_fds") < base + 20, "the fds to close")


def test_no_endpoint_unless_configured(tmp_path: Path) -> None:
    """Off by default: the broker binds nothing but its Kafka listener."""
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        assert "prometheus metrics on" not in b.log_text()
    finally:
        b.stop()
