"""The benchmark ceiling (benchmarks/null_broker.py, run as bench.py runs it: null_txn_broker.py,
which adds groups and transactions) speaks enough Kafka for the benchmark clients.

`make bench` reports kbroker as a fraction of the null broker's figures, so the null broker must
run the same workloads honestly: confluent-kafka produce (acks=all, idempotent) and an assign()
consumer that checks CRCs and gets every offset below the end exactly once, with values of the size
produced; txn_bench's commits and consume-transform-produce phases (whose end check needs the
group's committed offsets to cover every input record); and librdkafka's rdkafka_performance when
make bench has built it. Several null brokers posing as one cluster (multiprocess_bench's ceiling)
advertise each other and lead their share of the partitions; replicating ones
(replication_ceiling's) answer acks=all only once every follower has the bytes. With `--validate`
(validation_ceiling's) it refuses what kbroker's record validation refuses, and counts only what
passes. Also: a `--quick` run must not write its report over the committed one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.errors import ErrorCode
from storage import batch as B
from tests.helpers.wire import RawConnection
from tests.integration.test_produce_validation import bad_length, produce

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

import bench  # noqa: E402
import lib_cclient  # noqa: E402
import lib_txn  # noqa: E402
import lib_workloads as wl  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402

VALUE_SIZE = 300


@pytest.fixture(scope="module")
def null_broker():
    b = NullBrokerProcess(value_size=VALUE_SIZE, script=bench.NULL_SCRIPT)
    b.start(60)
    yield b
    b.stop()


def test_produce_then_consume_every_offset_once(null_broker) -> None:
    topic = wl.unique("nb")
    wl.create_topic(null_broker.bootstrap, topic)
    errors: list[str] = []
    p = Producer({"bootstrap.servers": null_broker.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "on_delivery": lambda err, _m: err and errors.append(str(err))})
    n = 5000
    for i in range(n):
        p.produce(topic, b"x" * 10, partition=i % wl.PARTITIONS)
    assert p.flush(60) == 0 and not errors
    c = Consumer({"bootstrap.servers": null_broker.bootstrap, "group.id": wl.unique("nb"), "check.crcs": True,
                  "enable.auto.commit": False, "message.max.bytes": 100_000, "fetch.max.bytes": 200_000,
                  "max.partition.fetch.bytes": 50_000})
    c.assign([TopicPartition(topic, part, 0) for part in range(wl.PARTITIONS)])
    seen: dict[int, list[int]] = {part: [] for part in range(wl.PARTITIONS)}
    deadline = time.monotonic() + 120
    got = 0
    try:
        while got < n and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                assert len(m.value()) == 10  # served at the size produced, not --value-size
                seen[m.partition()].append(m.offset())
                got += 1
    finally:
        c.close()
    # The null broker does not keep what was produced: it serves its own records, but at exactly the
    # offsets produced, so each partition yields 0..end-1 once.
    assert got == n
    for part, offsets in seen.items():
        assert offsets == list(range(n // wl.PARTITIONS)), part


def test_bench_produce_and_consume_workloads_run(null_broker) -> None:
    r = wl.produce(null_broker.bootstrap, null_broker.pid, records=2000, size=VALUE_SIZE, acks="all")
    c = wl.consume(null_broker.bootstrap, null_broker.pid, topic=r["topic"], expected=r["records_total"],
                   size=VALUE_SIZE)
    assert c["records"] == r["records_total"]


def test_bench_txn_and_ctp_workloads_run(null_broker) -> None:
    t = lib_txn.transactions(null_broker.bootstrap, null_broker.pid, count=50, seconds=1, size=VALUE_SIZE)
    assert t["commits"] == 50 and t["commits_per_s"] > 0
    # bench_ctp fails unless the group's committed offsets (TxnOffsetCommit, made visible by EndTxn,
    # read back by OffsetFetch) add up to every input record.
    r = lib_txn.consume_transform_produce(null_broker.bootstrap, null_broker.pid, records=5000, batch=500,
                                          size=VALUE_SIZE)
    assert r["records"] == 5000 and r["commits"] >= 10


@pytest.mark.skipif(not lib_cclient.available(), reason="rdkafka_performance not built (make bench builds it)")
def test_rdkafka_performance_runs_against_the_null_broker(null_broker) -> None:
    out = lib_cclient.produce_consume(null_broker.bootstrap, null_broker.pid, records=20_000, size=VALUE_SIZE)
    assert out["c_produce"]["records"] == 20_000
    assert out["c_consume"]["records"] >= 20_000
    assert out["c_produce"]["mb_per_s"] > 0 and out["c_consume"]["mb_per_s"] > 0


@pytest.mark.skipif(not lib_cclient.available(), reason="rdkafka_performance not built (make bench builds it)")
def test_rdkafka_performance_uses_the_python_clients_librdkafka() -> None:
    # Built against the wheel's library (not Debian 12's 2.0.2, which cannot talk to Tansu 0.6), and the
    # report names that version.
    import confluent_kafka

    assert lib_cclient.library_version() == confluent_kafka.libversion()[0]


def test_summary_lines_parse() -> None:
    text = ("% 1000 messages produced (1024000 bytes), 500 delivered (offset 10, 0 failed) in 900ms: 555 msgs/s "
            "and 0.57 MB/s, 0 produce failures, 500 in queue, none compression\n"
            "% 30000 messages produced (30720000 bytes), 30000 delivered (offset 29999, 0 failed) in 103ms: "
            "288933 msgs/s and 295.87 MB/s, 0 produce failures, 0 in queue, none compression\n")
    m = lib_cclient._last(lib_cclient._PRODUCED, text)
    assert m is not None and m.group(3) == "30000" and m.group(7) == "295.87"
    m = lib_cclient._last(lib_cclient._CONSUMED, "% 30000 messages (30720000 bytes) consumed in 46ms: "
                          "644426 msgs/s (659.89 MB/s)\n")
    assert m is not None and m.group(1) == "30000" and m.group(5) == "659.89"


def test_quick_run_does_not_write_the_committed_report() -> None:
    committed = ROOT / "benchmarks" / "results"
    assert bench.parse_args(["--quick"]).out != committed
    assert bench.parse_args([]).out == committed
    assert bench.parse_args(["--quick", "--out", str(committed)]).out == committed  # only when asked


def test_null_brokers_pose_as_a_cluster_of_partition_leaders() -> None:
    # multiprocess_bench's ceiling: two null brokers, partition p led by node p % 2. Clients must see
    # both nodes, send each partition to its leader, and get NOT_LEADER_OR_FOLLOWER elsewhere.
    from confluent_kafka.admin import AdminClient
    from kafka.protocol.consumer import FetchRequest
    from null_broker import start_cluster

    from tests.helpers.wire import send_request

    nodes = start_cluster(2, value_size=VALUE_SIZE, partitions=4)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        topic = wl.unique("nbc")
        wl.create_topic(nodes[0].bootstrap, topic)
        md = AdminClient({"bootstrap.servers": nodes[1].bootstrap}).list_topics(topic, timeout=10)
        assert sorted(md.brokers) == [0, 1] and md.controller_id == 0
        assert {p.id: (p.leader, p.isrs) for p in md.topics[topic].partitions.values()} == {
            0: (0, [0]), 1: (1, [1]), 2: (0, [0]), 3: (1, [1])}
        r = wl.produce(bootstrap, None, records=2000, size=VALUE_SIZE, acks="all")
        c = wl.consume(bootstrap, None, topic=r["topic"], expected=r["records_total"], size=VALUE_SIZE)
        assert c["records"] == r["records_total"]
        T = FetchRequest.FetchTopic
        fetch = FetchRequest(version=11, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                             isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                             topics=[T(version=11, topic=r["topic"], partitions=[
                                 T.FetchPartition(version=11, partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                  log_start_offset=-1, partition_max_bytes=1 << 20)
                                 for p in range(4)])])
        errors = {p.partition_index: p.error_code
                  for p in send_request(nodes[1].bootstrap, fetch, 11).responses[0].partitions}
        assert errors == {0: 6, 1: 0, 2: 6, 3: 0}
    finally:
        for n in nodes:
            n.stop()


def test_replicating_null_brokers_answer_acks_all_only_once_every_follower_has_the_bytes() -> None:
    # replication_ceiling's RF=3 ceiling: three null brokers, partition p led by node p % 3 with the
    # next two nodes as its followers. Metadata names all three; an acks=all produce is answered only
    # when both followers have received it (a stopped follower holds it back, acks=1 is not held),
    # and the Python and C clients' produce workloads run against them.
    import os
    import signal

    from confluent_kafka.admin import AdminClient
    from null_replicating_broker import start_cluster

    nodes = start_cluster(3, 3, value_size=VALUE_SIZE, partitions=4)
    stopped: int | None = None
    all_p = one_p = None
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        topic = wl.unique("nbr")
        wl.create_topic(nodes[0].bootstrap, topic, 4)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(topic, timeout=10)
        del admin
        assert {p.id: (p.leader, p.replicas, p.isrs) for p in md.topics[topic].partitions.values()} == {
            0: (0, [0, 1, 2], [0, 1, 2]), 1: (1, [1, 2, 0], [1, 2, 0]), 2: (2, [2, 0, 1], [2, 0, 1]),
            3: (0, [0, 1, 2], [0, 1, 2])}

        def producer(acks: str) -> tuple[Producer, list]:
            done: list = []
            p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                          "on_delivery": lambda err, msg: done.append(err)})
            p.produce(topic, b"warm-up", partition=0)  # connections and metadata before the follower stops
            assert p.flush(30) == 0 and done == [None]
            done.clear()
            return p, done

        all_p, all_done = producer("all")
        one_p, one_done = producer("1")
        stopped = nodes[2].pid
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)  # node 2 follows partition 0
        all_p.produce(topic, b"x" * VALUE_SIZE, partition=0)
        one_p.produce(topic, b"x" * VALUE_SIZE, partition=0)
        deadline = time.monotonic() + 30
        while not one_done and time.monotonic() < deadline:
            one_p.poll(0.1)
            all_p.poll(0)
        assert one_done == [None], "acks=1 must not wait for the followers"
        held = time.monotonic() + 1  # and acks=all, sent first, is still held a while after it
        while not all_done and time.monotonic() < held:
            all_p.poll(0.1)
        assert all_done == [], "acks=all was answered while a follower was stopped"
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        assert all_p.flush(30) == 0 and all_done == [None]

        r = wl.produce(bootstrap, None, records=2000, size=VALUE_SIZE, acks="all")
        assert r["records"] == 2000
        if lib_cclient.available():
            assert lib_cclient.produce(bootstrap, None, records=5000, size=VALUE_SIZE)["records"] == 5000
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        all_p = one_p = None  # closed before their brokers go
        for n in nodes:
            n.stop()


def test_replicating_null_brokers_with_transactions_run_the_txn_phases() -> None:
    # replication_ceiling's transactional rows: three replicating null brokers with groups and
    # transactions (node 0 the coordinator) run txn_bench's commits and consume-transform-produce
    # phases, whose end check needs the group's committed offsets to cover every input record.
    import os

    import txn_bench
    from null_replicating_broker import start_cluster

    traces = [Path(f"/tmp/null-broker-trace-{os.getpid()}-{wl.unique('n')}") for _ in range(3)]
    nodes = start_cluster(3, 3, value_size=100, partitions=txn_bench.PARTITIONS, transactions=True,
                          envs=[{"NULL_BROKER_TRACE": str(t)} for t in traces])
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        topic = wl.unique("nbrt")
        txn_bench.create_topics(bootstrap, topic, f"{topic}-in", f"{topic}-out")
        assert txn_bench.bench_commits(bootstrap, topic, 30, None).transactions == 30
        ctp = txn_bench.bench_ctp(bootstrap, f"{topic}-in", f"{topic}-out", 3000, 500, None)
        assert ctp.records == 3000
        # Every node follows the others' partitions, and nodes 1 and 2 lead some of every
        # transaction's partitions: each got replicated bytes, and 1 and 2 markers (api keys -1, -2).
        keys = [{line.split()[1] for line in t.read_text().splitlines()} for t in traces]
        assert all("-1" in k for k in keys), keys
        assert "-2" in keys[1] and "-2" in keys[2], keys
    finally:
        for n in nodes:
            n.stop()
        for t in traces:
            t.unlink(missing_ok=True)


@pytest.mark.parametrize("validate", [False, True], ids=["plain", "validate"])
def test_a_validating_null_broker_refuses_what_kbroker_refuses(validate: bool) -> None:
    b = NullBrokerProcess(value_size=VALUE_SIZE, args=["--validate"] if validate else [])
    b.start(60)
    try:
        topic = wl.unique("nbv")
        wl.create_topic(b.bootstrap, topic)
        good = B.build_batch([(None, b"v%d" % i) for i in range(100)], compression=3)  # lz4
        with RawConnection(b.bootstrap) as conn:  # Produce v8: the null broker serves v3-8
            r = produce(conn, topic, bad_length(), version=8)
            # The plain null broker reads only batch headers; the validating one runs kbroker's checks.
            assert r.error_code == (ErrorCode.INVALID_RECORD if validate else ErrorCode.NONE)
            r = produce(conn, topic, good, version=8)
        assert (r.error_code, r.base_offset) == (ErrorCode.NONE, 0 if validate else 2)  # a refused batch is not counted
        res = wl.produce(b.bootstrap, b.pid, records=2000, size=VALUE_SIZE, compression="zstd")
        assert res["records"] == 2000
    finally:
        b.stop()
