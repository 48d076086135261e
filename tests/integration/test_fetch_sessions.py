"""Incremental fetch sessions (KIP-227) on the leader: a follower fetch (replica id >= 0) with epoch 0
opens a session; incremental fetches name only what changed and are answered only with the partitions
that have news (records, a moved high watermark or log start offset, an error); forgotten partitions
leave the session; wrong epochs and unknown ids get Kafka's errors; consumers get no session.

One real broker; raw Fetch v12 requests over a socket, records written with confluent-kafka.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest

from protocol.errors import ErrorCode
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.wire import RawConnection

V = 12
T = FetchRequest.FetchTopic
P = FetchRequest.FetchTopic.FetchPartition
F = FetchRequest.ForgottenTopic
TOPIC = "sessions"
PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory):  # noqa: ANN201
    b = BrokerProcess(tmp_path_factory.mktemp("fetch_sessions"))
    b.start(60)
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(30)
        yield b
    finally:
        b.stop()
        b.kill()
    assert "Traceback" not in b.log_text(), b.log_tail()


def produce(b: BrokerProcess, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(TOPIC, f"v{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def fetch(conn: RawConnection, *, session_id: int, epoch: int, offsets: dict[int, int], replica: int = 1,
          forgotten: list[int] | None = None, max_wait_ms: int = 0, min_bytes: int = 0):  # noqa: ANN201
    req = FetchRequest(
        version=V, replica_id=replica, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
        isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
        forgotten_topics_data=[F(version=V, topic=TOPIC, partitions=forgotten)] if forgotten else [],
        topics=[T(version=V, topic=TOPIC, partitions=[
            P(version=V, partition=p, current_leader_epoch=-1, fetch_offset=off, last_fetched_epoch=-1,
              log_start_offset=-1, partition_max_bytes=1 << 20) for p, off in offsets.items()])] if offsets else [])
    return conn.request(req, V)


def answered(resp) -> dict[int, tuple[int, int, int]]:  # noqa: ANN001
    """partition -> (error, high watermark, record bytes)"""
    return {p.partition_index: (p.error_code, p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


def test_session_lifecycle(broker: BrokerProcess) -> None:
    produce(broker, 0, 3)
    with RawConnection(broker.bootstrap) as conn:
        full = fetch(conn, session_id=0, epoch=0, offsets={p: 0 for p in range(PARTITIONS)})
        assert full.error_code == 0 and full.session_id != 0
        sid = full.session_id
        got = answered(full)
        assert sorted(got) == list(range(PARTITIONS))  # the full fetch answers every partition
        assert got[0][1] == 3 and got[0][2] > 0
        hw0 = got[0][1]

        # Epoch 1, the follower moved to the end of partition 0: the watermark is unchanged, so
        # nothing has news and the answer names no partition.
        r = fetch(conn, session_id=sid, epoch=1, offsets={0: hw0})
        assert r.error_code == 0 and r.session_id == sid and answered(r) == {}

        # Records on partition 2 (a partition the request does not name): only it is answered.
        produce(broker, 2, 2)
        r = fetch(conn, session_id=sid, epoch=2, offsets={})
        got = answered(r)
        assert list(got) == [2] and got[2][1] == 2 and got[2][2] > 0

        # The long poll covers the whole session: a record on partition 3 ends it early.
        produce(broker, 3, 1)
        r = fetch(conn, session_id=sid, epoch=3, offsets={2: 2}, max_wait_ms=20_000, min_bytes=1)
        got = answered(r)
        assert list(got) == [3] and got[3][2] > 0

        # Forgotten partitions leave the session: new records on 1 are no longer served.
        produce(broker, 1, 1)
        r = fetch(conn, session_id=sid, epoch=4, offsets={3: 1}, forgotten=[1])
        assert answered(r) == {}

        # A replayed epoch, a session id that does not exist, session id 0 with an epoch.
        r = fetch(conn, session_id=sid, epoch=4, offsets={})
        assert r.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        r = fetch(conn, session_id=sid + 1 if sid < 2**31 - 1 else 1, epoch=5, offsets={})
        assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        r = fetch(conn, session_id=0, epoch=3, offsets={})
        assert r.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        # The session survives a rejected request: epoch 5 is still the next one.
        r = fetch(conn, session_id=sid, epoch=5, offsets={})
        assert r.error_code == 0 and r.session_id == sid

        # Another replica cannot use the session.
        r = fetch(conn, session_id=sid, epoch=6, offsets={}, replica=2)
        assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

        # Epoch -1 closes the session: a sessionless full fetch, then the id is gone.
        r = fetch(conn, session_id=sid, epoch=-1, offsets={0: 0})
        assert r.error_code == 0 and r.session_id == 0 and list(answered(r)) == [0]
        r = fetch(conn, session_id=sid, epoch=6, offsets={})
        assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_unknown_partition_error_is_answered_every_time(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as conn:
        full = fetch(conn, session_id=0, epoch=0, offsets={0: 0, 99: 0})
        sid = full.session_id
        assert answered(full)[99][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        end = answered(full)[0][1]
        r = fetch(conn, session_id=sid, epoch=1, offsets={0: end})  # partition 0 has no news now
        # Errors are always re-sent (Kafka caches an invalid watermark for them).
        assert answered(r) == {99: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, 0)}
        r = fetch(conn, session_id=sid, epoch=2, offsets={})
        assert answered(r) == {99: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, 0)}


def test_consumers_get_no_session(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as conn:
        r = fetch(conn, session_id=0, epoch=0, offsets={0: 0}, replica=-1)
        assert r.error_code == 0 and r.session_id == 0
        r = fetch(conn, session_id=0, epoch=1, offsets={0: 0}, replica=-1)
        assert r.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_a_partition_named_before_it_existed_wakes_the_parked_fetch(broker: BrokerProcess) -> None:
    """A follower can name a partition before its leader has it (it applied the new topic's metadata
    first): the session keeps it, answered with an error. Once the broker leads it, an append must
    end a fetch of that session parked here, as for any session partition; the session used to
    watch it only after the next answer, so that one long poll ran to its end (500 ms by default,
    and a new topic's first acks=all write waited for it)."""
    topic = "named-early"
    req_topic = [T(version=V, topic=topic, partitions=[
        P(version=V, partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
          log_start_offset=-1, partition_max_bytes=1 << 20)])]
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        full = conn.request(FetchRequest(
            version=V, replica_id=1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=0, rack_id="", forgotten_topics_data=[], topics=req_topic), V)
        sid = full.session_id
        assert sid != 0
        assert [p.error_code for t in full.responses for p in t.partitions] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)

        # A long poll naming nothing (the follower's fetch state did not change): the session's
        # partition, led here now, has no records yet, so the fetch parks until one is appended.
        result: list[object] = []

        def long_poll() -> None:
            try:
                result.append(conn.request(FetchRequest(
                    version=V, replica_id=1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                    session_id=sid, session_epoch=1, rack_id="", forgotten_topics_data=[], topics=[]), V))
            except Exception as e:  # the 30 s socket timeout: the append did not end the long poll
                result.append(e)

        t = threading.Thread(target=long_poll)
        t.start()
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        p.produce(topic, b"v", partition=0)
        assert p.flush(30) == 0
        t.join(60)
        assert not t.is_alive()
        (r,) = result
        assert not isinstance(r, Exception), f"the long poll was not ended by the append: {r!r}"
        got = {(t.topic, p.partition_index): (p.error_code, len(p.records or b"")) for t in r.responses
               for p in t.partitions}
        assert got[(topic, 0)][0] == 0 and got[(topic, 0)][1] > 0
