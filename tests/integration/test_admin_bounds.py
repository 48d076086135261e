"""Admin requests are bounded, partition creation never starves other clients, and SIGTERM stops
the broker whatever creation is in flight (issue 22, item 1).

Kafka's controller refuses, with POLICY_VIOLATION for every topic, a CreateTopics over 10,000
partitions or 10,000 metadata records and (here) a CreatePartitions adding over 10,000
partitions; ``kbroker.max.partitions`` bounds one broker's total.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from kafka.protocol.admin import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest

from protocol.errors import ErrorCode
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.wire import RawConnection, decode_response, read_frame

# The fuzzer's reproducer, verbatim: CreateTopics v7, topic "hang-topic", 1,000,000 partitions.
REPRODUCER = bytes.fromhex(
    "0000002a0013000700000001000468616e6700020b68616e672d746f706963000f42400001010100000013880000")

TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


def _create_topics(topics: list[tuple[str, int]], *, validate_only: bool = False,
                   configs: tuple[tuple[str, str], ...] = ()) -> CreateTopicsRequest:
    T = CreateTopicsRequest.CreatableTopic
    cfgs = [T.CreatableTopicConfig(version=7, name=k, value=v) for k, v in configs]
    return CreateTopicsRequest(version=7, topics=[
        T(version=7, name=name, num_partitions=n, replication_factor=-1, assignments=[], configs=cfgs)
        for name, n in topics], timeout_ms=120000, validate_only=validate_only)


def _create_partitions(topic: str, count: int) -> CreatePartitionsRequest:
    T = CreatePartitionsRequest.CreatePartitionsTopic
    return CreatePartitionsRequest(version=3, topics=[T(version=3, name=topic, count=count, assignments=None)],
                                   timeout_ms=30000, validate_only=False)


def _long_poll(topic: str) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(version=11, replica_id=-1, max_wait_ms=60000, min_bytes=1, max_bytes=1 << 20,
                        isolation_level=0, session_id=0, session_epoch=-1, topics=[
                            T(version=11, topic=topic, partitions=[T.FetchPartition(
                                version=11, partition=0, current_leader_epoch=-1, fetch_offset=0,
                                log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")


def _partition_dirs(data_dir: Path, topic: str) -> list[Path]:
    return [p for p in data_dir.iterdir() if p.is_dir() and p.name.rpartition("-")[0] == topic]


def _partition_count(bootstrap: str, topic: str) -> int | None:
    with RawConnection(bootstrap, timeout=30) as conn:
        resp = conn.request(MetadataRequest(version=12, topics=[
            MetadataRequest.MetadataRequestTopic(version=12, topic_id=None, name=topic)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12)
    t = resp.topics[0]
    return None if t.error_code else len(t.partitions)


def _api_versions_ok(bootstrap: str) -> None:
    with RawConnection(bootstrap, timeout=5) as conn:
        assert conn.request(ApiVersionsRequest(version=0), 0).error_code == 0


def test_reproducer_is_refused_whole_and_creates_nothing(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(REPRODUCER)
        payload = read_frame(sock)  # 10 s socket timeout: the old broker never answered
    resp = decode_response(_create_topics([]), 7, payload)
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("hang-topic", ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)]
    assert _partition_dirs(broker.data_dir, "hang-topic") == []
    assert _partition_count(broker.bootstrap, "hang-topic") is None
    _api_versions_ok(broker.bootstrap)


def test_kafka_record_bound_fails_the_whole_request(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        # 9,999 partitions + 1 topic record = 10,000 records: the largest creation Kafka accepts.
        ok = conn.request(_create_topics([("big", 9999)], validate_only=True), 7)
        assert [(t.name, t.error_code) for t in ok.topics] == [("big", 0)]
        # 10,000 partitions pass the partition pre-check but make 10,001 records; a config record
        # tips 9,999 over too. Every topic of the request gets the error, the valid small one too.
        for topics, configs in (([("big", 10000)], ()), ([("big", 9999)], (("retention.ms", "1000"),)),
                                ([("small", 1), ("big", 9998)], ())):
            resp = conn.request(_create_topics(topics, configs=configs), 7)
            assert [(t.error_code, t.error_message) for t in resp.topics] == \
                [(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)] * len(topics), topics
        # A topic that fails its own checks writes no records, so it does not count there...
        resp = conn.request(_create_topics([("bad name!", 1), ("big", 9999)], validate_only=True), 7)
        assert [t.error_code for t in resp.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION, 0]
        # ...but the partition pre-check counts what every topic asks for, before any other check.
        resp = conn.request(_create_topics([("bad name!", 5000), ("big", 5001)], validate_only=True), 7)
        assert [(t.error_code, t.error_message) for t in resp.topics] == \
            [(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)] * 2
    assert _partition_dirs(broker.data_dir, "big") == []
    assert _partition_dirs(broker.data_dir, "small") == []


def test_create_partitions_of_8_4_million_is_refused(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        assert conn.request(_create_topics([("grow", 1)]), 7).topics[0].error_code == 0
        resp = conn.request(_create_partitions("grow", 8_400_000), 3)
        assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [
            ("grow", ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)]
        ok = conn.request(_create_partitions("grow", 3), 3)
        assert ok.results[0].error_code == 0
    assert _partition_count(broker.bootstrap, "grow") == 3
    assert len(_partition_dirs(broker.data_dir, "grow")) == 3


def _answers_while(bootstrap: str, call):
    """Run ``call()`` while another connection sends ApiVersions in a loop (each answer within
    5 s); returns (call's result, how many answers arrived before it returned). The old broker
    answered only during the metadata write (one or two), not during the partition work."""
    done = threading.Event()
    answers: list[int] = []
    errors: list[BaseException] = []

    def liveness() -> None:
        try:
            with RawConnection(bootstrap, timeout=5) as conn:
                for _ in range(100_000):
                    if done.is_set():
                        return
                    assert conn.request(ApiVersionsRequest(version=0), 0).error_code == 0
                    if not done.is_set():
                        answers.append(1)
                    time.sleep(0.02)
        except BaseException as e:  # reported by the caller
            errors.append(e)

    thread = threading.Thread(target=liveness, daemon=True)
    thread.start()
    try:
        result = call()
    finally:
        done.set()
        thread.join(30)
    assert not errors, errors
    return result, len(answers)


def test_largest_creation_and_its_deletion_run_while_other_clients_are_served(broker_factory) -> None:
    """kbroker.max.partitions lowered to 2,000 keeps the test short; the old broker created (and
    deleted) them in one go on the event loop, so no ApiVersions got an answer meanwhile."""
    limit = 2000
    broker = broker_factory({"kbroker.max.partitions": str(limit)})
    with RawConnection(broker.bootstrap, timeout=300) as conn:
        resp, answers = _answers_while(broker.bootstrap, lambda: conn.request(_create_topics([("wide", limit)]), 7))
        assert resp.topics[0].error_code == 0, resp.topics[0].error_message
        print(f"{answers} ApiVersions answered while {limit} partitions were created")
        assert answers >= 10, "ApiVersions was not answered while the partitions were created"
        assert len(_partition_dirs(broker.data_dir, "wide")) == limit
        assert _partition_count(broker.bootstrap, "wide") == limit
        # now at the limit: one more partition anywhere is refused, before anything is created
        more = conn.request(_create_topics([("one-more", 1)]), 7)
        assert more.topics[0].error_code == ErrorCode.POLICY_VIOLATION
        assert "kbroker.max.partitions=2000" in more.topics[0].error_message
        assert _partition_dirs(broker.data_dir, "one-more") == []
        grow = conn.request(_create_partitions("wide", limit + 1), 3)
        assert grow.results[0].error_code == ErrorCode.POLICY_VIOLATION
        # internal topics are not counted against the limit: consumer groups still work
        for _ in range(600):
            found = conn.request(FindCoordinatorRequest(version=1, key="g", key_type=0), 1)
            if found.error_code == 0:
                break
            time.sleep(0.1)
        assert found.error_code == 0

        resp, answers = _answers_while(broker.bootstrap, lambda: conn.request(
            DeleteTopicsRequest(version=4, topic_names=["wide"], timeout_ms=120000), 4))
        assert resp.responses[0].error_code == 0
        print(f"{answers} ApiVersions answered while {limit} partitions were deleted")
        assert answers >= 10, "ApiVersions was not answered while the partitions were deleted"
        assert _partition_dirs(broker.data_dir, "wide") == []
        # the name is free again, and the new topic starts empty
        again = conn.request(_create_topics([("wide", 2)]), 7)
        assert again.topics[0].error_code == 0
    assert _partition_count(broker.bootstrap, "wide") == 2
    assert len(_partition_dirs(broker.data_dir, "wide")) == 2


def test_sigterm_during_a_long_creation_stops_and_restart_is_consistent(broker_factory) -> None:
    # A long deadline: what stops the broker here must be the stop itself, not the deadline.
    broker = broker_factory({"kbroker.max.partitions": "20000", "kbroker.shutdown.timeout.ms": "300000"})
    n = 9999  # the largest single creation Kafka allows
    conn = RawConnection(broker.bootstrap, timeout=300)
    fetcher = RawConnection(broker.bootstrap, timeout=300)
    try:
        # a fetch parked for a minute must not hold the stop up either
        assert conn.request(_create_topics([("parked", 1)]), 7).topics[0].error_code == 0
        fetcher.send(_long_poll("parked"), 11)
        conn.send(_create_topics([("long", n)]), 7)
        deadline = time.monotonic() + 120
        while len(_partition_dirs(broker.data_dir, "long")) < 50:
            assert time.monotonic() < deadline, "the creation did not start"
            assert broker.running
            time.sleep(0.05)
        started = time.monotonic()
        broker.proc.send_signal(15)
        code = broker.proc.wait(timeout=10)  # the old broker ignored SIGTERM until done creating
        stopped_after = time.monotonic() - started
    finally:
        conn.close()
        fetcher.close()
    assert code == 0, broker.log_tail()
    print(f"stopped {stopped_after:.2f}s after SIGTERM with "
          f"{len(_partition_dirs(broker.data_dir, 'long'))} of {n} partition dirs")
    broker.start(timeout=180)
    # The topic is registered atomically: either absent, or present with every partition (the
    # missing ones are created in the background after the restart).
    count = _partition_count(broker.bootstrap, "long")
    assert count in (None, n), count
    expected = 0 if count is None else n
    deadline = time.monotonic() + 300
    while (dirs := len(_partition_dirs(broker.data_dir, "long"))) != expected:
        assert time.monotonic() < deadline, (count, dirs)
        time.sleep(0.2)
    _api_versions_ok(broker.bootstrap)
    assert "Traceback" not in broker.log_text()
    assert broker.stop(timeout=300) == 0  # a clean stop of 9,999 partitions, before the fixture's 30 s
