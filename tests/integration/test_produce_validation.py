"""Produce validates records before appending (issue 22 item 2, issue 21 item 1).

CRC-valid batches whose records cannot be decoded are refused and nothing is stored; a poisoned
log already on disk does not make ListOffsets MAX_TIMESTAMP raise; compacted topics refuse
keyless records from every producer kind (plain, idempotent, transactional).
"""

from __future__ import annotations

import random
import struct
import time
import uuid

import crc32c
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest

from protocol.errors import ErrorCode
from storage import batch as B
from tests.helpers.wire import RawConnection

LATEST, MAX_TIMESTAMP = -1, -3


# --- batches ---------------------------------------------------------------------------------------


def _recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, B.CRC_OFFSET, crc32c.crc32c(bytes(data[B.ATTRIBUTES_OFFSET:])))
    return bytes(data)


def gzip_corrupt(ts: int | None = None) -> bytes:
    """A gzip batch with one byte of its compressed payload changed, CRC recomputed."""
    data = bytearray(B.build_batch([(b"k", b"value-%d" % i) for i in range(20)], compression=1, timestamp_ms=ts))
    data[B.HEADER_SIZE + 15] ^= 0x5A
    return _recrc(data)


def codec5(ts: int | None = None) -> bytes:
    """A batch whose attributes name compression codec 5 (no such codec)."""
    data = bytearray(B.build_batch([(b"k", b"v")], timestamp_ms=ts))
    struct.pack_into(">h", data, B.ATTRIBUTES_OFFSET, 5)
    return _recrc(data)


def bad_length(ts: int | None = None) -> bytes:
    """An uncompressed batch whose first record's length varint is wrong."""
    data = bytearray(B.build_batch([(b"k", b"value-a"), (b"k", b"value-b")], timestamp_ms=ts))
    data[B.HEADER_SIZE] += 2  # zigzag: one byte longer than the record
    return _recrc(data)


GARBAGE = {"gzip_corrupt": (gzip_corrupt, ErrorCode.CORRUPT_MESSAGE),
           "codec5": (codec5, ErrorCode.CORRUPT_MESSAGE),
           "bad_length": (bad_length, ErrorCode.INVALID_RECORD)}


# --- requests ------------------------------------------------------------------------------------


def produce(conn: RawConnection, topic: str, records: bytes, version: int = 9):
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=version, transactional_id=None, acks=1, timeout_ms=5000,
                         topic_data=[P(version=version, name=topic, partition_data=[
                             P.PartitionProduceData(version=version, index=0, records=records)])])
    return conn.request(req, version).responses[0].partition_responses[0]


def list_offset(conn: RawConnection, topic: str, timestamp: int):
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(version=7, replica_id=-1, isolation_level=0, topics=[
        T(version=7, name=topic, partitions=[T.ListOffsetsPartition(version=7, partition_index=0,
                                                                     current_leader_epoch=-1, timestamp=timestamp)])])
    return conn.request(req, 7).topics[0].partitions[0]


def create_topic(bootstrap: str, topic: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config or {})])[topic].result(30)


def read_partition(bootstrap: str, topic: str, end: int, isolation: str = "read_uncommitted") -> list:
    """Every record of partition 0 up to ``end`` with librdkafka; fails on any consumer error."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation})
    got: list = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and msg.offset() >= end:
                    return got
                if err.code() != KafkaError._PARTITION_EOF:
                    pytest.fail(f"consumer error: {err}")
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
        pytest.fail(f"partition not read to {end} in time: {got[-3:]}")
    finally:
        c.close()
    return got


# --- garbage batches are refused -------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_undecodable_batch_is_refused_and_nothing_stored(broker, kind):
    make, code = GARBAGE[kind]
    topic = f"garbage-{kind}"
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, B.build_batch([(b"k", b"before")])).error_code == 0
        hw = list_offset(conn, topic, LATEST).offset
        assert hw == 1
        resp = produce(conn, topic, make())
        assert resp.error_code == code, resp
        assert resp.base_offset == -1
        assert list_offset(conn, topic, LATEST).offset == hw  # nothing appended
        assert produce(conn, topic, B.build_batch([(b"k", b"after")])).error_code == 0
        assert list_offset(conn, topic, MAX_TIMESTAMP).error_code == 0
    values = [v for _, _, v in read_partition(broker.bootstrap, topic, 2)]
    assert values == [b"before", b"after"]
    # the fixture fails the test if the broker logged a traceback


def test_offset_delta_and_count_mismatch_are_invalid_record(broker):
    topic = "garbage-deltas"
    create_topic(broker.bootstrap, topic)
    data = bytearray(B.build_batch([(b"k", b"a"), (b"k", b"b")]))
    # second record's offset delta 1 -> 3 (record: length, attributes, timestamp delta, offset delta)
    second = B.HEADER_SIZE + 1 + (data[B.HEADER_SIZE] >> 1)
    assert data[second + 3] == 2  # zigzag(1)
    data[second + 3] = 6
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, _recrc(data)).error_code == ErrorCode.INVALID_RECORD
        assert list_offset(conn, topic, LATEST).offset == 0


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_batches_of_every_codec_are_accepted(broker, codec):
    """What a stock client sends passes validation: keys, null keys, null values, headers."""
    topic = f"codec-{codec}"
    create_topic(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
    errors: list = []
    sent = []
    for i in range(300):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 7 == 0 else b"value-%d-" % i * (i % 50)
        sent.append((key, value))
        p.produce(topic, key=key, value=value, partition=0, headers=[("h", b"%d" % i), ("n", None)],
                  on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert p.flush(60) == 0
    assert errors == []
    assert [(k, v) for _, k, v in read_partition(broker.bootstrap, topic, 300)] == sent


# --- large compressed batches: validated on the loop while cheap, else on an executor thread --------

def _big_compressed(kind: str) -> tuple[bytes, list[bytes]]:
    """A >= 64 KiB compressed batch (broker.append_path.OFFLOAD_VALIDATION_BYTES) that takes each
    validation path: ``inline`` (ordinary lz4), ``past_budget`` (decompresses past
    INLINE_VALIDATION_BUDGET), ``many_records`` (more than INLINE_MAX_RECORDS records)."""
    import lz4.frame
    import zstandard

    from tests.unit.test_record_validation import record, wrap

    if kind == "inline":
        values = [random.Random(i).randbytes(2000) for i in range(200)]  # incompressible: >= 64 KiB
        raw = b"".join(record(i, b"k", v) for i, v in enumerate(values))
        batch = wrap(lz4.frame.compress(raw, store_size=False), len(values), attributes=3)
    elif kind == "past_budget":
        values = [bytes([65 + i]) * (3 << 20) for i in range(4)]
        raw = b"".join(record(i, b"k", v) for i, v in enumerate(values))
        batch = wrap(zstandard.ZstdCompressor().compress(raw) + bytes(0), len(values), attributes=4)
    else:
        values = [b"v%d" % (i % 10) for i in range(70_000)]
        raw = b"".join(record(i, b"k", v) for i, v in enumerate(values))
        batch = wrap(zstandard.ZstdCompressor(level=1).compress(raw), len(values), attributes=4)
    return batch, values


@pytest.mark.parametrize("kind", ["inline", "past_budget", "many_records"])
def test_large_compressed_batches_are_accepted_on_every_validation_path(broker, kind):
    batch, values = _big_compressed(kind)
    if len(batch) < 64 * 1024:  # zstd packs the repetitive ones tightly: pad with a skippable frame
        batch, values = _padded(batch), values
    assert 64 * 1024 <= len(batch) < 1_000_000
    topic = f"big-compressed-{kind.replace('_', '-')}"
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap, timeout=60) as conn:
        resp = produce(conn, topic, batch)
        assert resp.error_code == 0, resp
        assert list_offset(conn, topic, LATEST).offset == len(values)
    got = read_partition(broker.bootstrap, topic, len(values))
    assert len(got) == len(values) and got[0][2] == values[0] and got[-1][2] == values[-1]


def _padded(batch: bytes) -> bytes:
    """The batch with a zstd skippable frame (magic 0x184D2A50, ignored by every decoder) appended
    to its records section, so it reaches the offload size; the CRC is recomputed."""
    pad = struct.pack("<II", 0x184D2A50, 70_000) + bytes(70_000)
    data = bytearray(batch + pad)
    struct.pack_into(">i", data, 8, len(data) - 12)
    return _recrc(data)


def test_a_large_compressed_batch_with_invalid_records_gets_the_exact_error(broker):
    """Found invalid on the loop, the batch is validated again on the executor for Kafka's error."""
    import lz4.frame

    from tests.unit.test_record_validation import record, wrap

    raw = b"".join(record(i, b"k", random.Random(i).randbytes(2000)) for i in range(200))
    batch = wrap(lz4.frame.compress(raw, store_size=False), 199, attributes=3)  # 200 records, 199 declared
    assert len(batch) >= 64 * 1024
    topic = "big-compressed-invalid"
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap, timeout=60) as conn:
        resp = produce(conn, topic, batch)
        assert resp.error_code == ErrorCode.INVALID_RECORD, resp
        assert list_offset(conn, topic, LATEST).offset == 0


# --- compacted topics need keys --------------------------------------------------------------------


def test_compacted_topic_raw_produce_gets_record_errors(broker):
    topic = "compacted-raw"
    create_topic(broker.bootstrap, topic, {"cleanup.policy": "compact"})
    batch = B.build_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")])
    with RawConnection(broker.bootstrap) as conn:
        resp = produce(conn, topic, batch)
        assert resp.error_code == ErrorCode.INVALID_RECORD
        msg = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
        assert [(e.batch_index, e.batch_index_error_message) for e in resp.record_errors] == [(1, msg), (3, msg)]
        assert list_offset(conn, topic, LATEST).offset == 0
        assert produce(conn, topic, B.build_batch([(b"a", b"1"), (b"b", None)])).error_code == 0  # tombstone ok


def test_compacted_topic_refuses_keyless_records_before_produce_v8(broker):
    # record_errors exist from Produce v8; older versions get the error code alone
    topic = "compacted-v7"
    create_topic(broker.bootstrap, topic, {"cleanup.policy": "compact"})
    with RawConnection(broker.bootstrap) as conn:
        resp = produce(conn, topic, B.build_batch([(None, b"1")]), version=7)
        assert resp.error_code == ErrorCode.INVALID_RECORD
        assert list_offset(conn, topic, LATEST).offset == 0


def _deliveries(p: Producer, sends: list[tuple[bytes | None, bytes]], topic: str) -> list:
    results: list = []
    # Queued in one call (rd_kafka_produce_batch), so they leave in one batch: queued one produce()
    # at a time, a loaded machine once let librdkafka send the first before the next was queued,
    # and the keyed records then landed in batches of their own (1 run in ~12 under a CPU burner).
    queued = p.produce_batch(topic, [{"key": key, "value": value} for key, value in sends], partition=0,
                             on_delivery=lambda err, msg: results.append((err, msg.key())))
    assert queued == len(sends)
    assert p.flush(60) == 0
    return results


@pytest.mark.parametrize("mode", ["plain", "idempotent"])
def test_compacted_topic_refuses_keyless_records_from_confluent_kafka(broker, mode):
    topic = f"compacted-{mode}"
    create_topic(broker.bootstrap, topic, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": mode == "idempotent",
                  "linger.ms": 200, "retries": 0 if mode == "plain" else 2147483647})
    # one batch: the keyless record fails the whole batch, its keyed neighbours included
    results = _deliveries(p, [(b"a", b"1"), (None, b"2"), (b"c", b"3")], topic)
    assert len(results) == 3
    assert all(err is not None and err.code() == KafkaError.INVALID_RECORD for err, _ in results), results
    ok = _deliveries(p, [(b"d", b"4")], topic)
    assert ok == [(None, b"d")]
    assert [(k, v) for _, k, v in read_partition(broker.bootstrap, topic, 1)] == [(b"d", b"4")]


def test_compacted_topic_refuses_keyless_records_in_a_transaction(broker):
    topic = "compacted-txn"
    create_topic(broker.bootstrap, topic, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-compacted", "linger.ms": 50})
    p.init_transactions(30)
    p.begin_transaction()
    results = _deliveries(p, [(b"a", b"1"), (None, b"2")], topic)
    assert all(err is not None and err.code() == KafkaError.INVALID_RECORD for err, _ in results), results
    with pytest.raises(KafkaException) as ei:
        p.commit_transaction(30)
    assert ei.value.args[0].txn_requires_abort()
    p.abort_transaction(30)
    del p
    # librdkafka numbers the refused records' sequences as sent and needs an epoch bump before it can
    # produce again (as against Kafka); a new instance of the transactional id gets one.
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-compacted", "linger.ms": 50})
    p2.init_transactions(30)
    p2.begin_transaction()
    assert _deliveries(p2, [(b"k", b"kept")], topic) == [(None, b"k")]
    p2.commit_transaction(30)
    with RawConnection(broker.bootstrap) as conn:
        end = list_offset(conn, topic, LATEST).offset
    got = read_partition(broker.bootstrap, topic, end, "read_uncommitted")
    assert [(k, v) for _, k, v in got] == [(b"k", b"kept")]  # the refused records were never stored


# --- a log poisoned before validation existed ------------------------------------------------------


def test_list_offsets_max_timestamp_survives_a_poisoned_log(broker):
    topic = "poisoned"
    create_topic(broker.bootstrap, topic)
    now = int(time.time() * 1000)
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, B.build_batch([(b"k", b"good")], timestamp_ms=now)).error_code == 0
    broker.stop()
    # Write a batch the old broker would have accepted straight into the segment: offset 1, and
    # the partition's max timestamp, so MAX_TIMESTAMP has to decode it.
    seg = broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    bad = bytearray(gzip_corrupt(ts=now + 60_000))
    struct.pack_into(">q", bad, 0, 1)
    with open(seg, "ab") as f:
        f.write(bad)
    broker.start()
    with RawConnection(broker.bootstrap) as conn:
        resp = list_offset(conn, topic, MAX_TIMESTAMP)
        assert resp.error_code == 0
        assert resp.timestamp == now + 60_000
        assert list_offset(conn, topic, MAX_TIMESTAMP).error_code == 0  # every time, not just once
        # a timestamp lookup that lands in the bad batch: its base offset, at batch granularity
        resp = list_offset(conn, topic, now + 1)
        assert (resp.error_code, resp.offset, resp.timestamp) == (0, 1, now + 60_000)
        resp = list_offset(conn, topic, now)  # the good record still answers exactly
        assert (resp.error_code, resp.offset, resp.timestamp) == (0, 0, now)
    assert "undecodable batch" in broker.log_text()
