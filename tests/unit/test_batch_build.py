"""storage.batch.build_batch's hand-written path (uncompressed, no headers: every coordinator
write) gives exactly the bytes of kafka-python's builder, which it replaced there."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage import batch as B


def _reference(records, ts, *, transactional=False, control=False, producer_id=-1, producer_epoch=-1,
               base_sequence=-1, base_offset=0, partition_leader_epoch=-1) -> bytes:  # noqa: ANN001
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 30)
    for i, (k, v) in enumerate(records):
        builder.append(i, timestamp=ts, key=k, value=v, headers=[])
    data = bytearray(builder.build())
    if control:
        attrs = struct.unpack_from(">h", data, B.ATTRIBUTES_OFFSET)[0] | B.CONTROL_MASK
        struct.pack_into(">h", data, B.ATTRIBUTES_OFFSET, attrs)
        struct.pack_into(">I", data, B.CRC_OFFSET, crc32c.crc32c(memoryview(data)[B.ATTRIBUTES_OFFSET:]))
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, B.PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    return bytes(data)


@pytest.mark.parametrize("seed", range(20))
def test_plain_path_matches_kafka_python(seed: int) -> None:
    rng = random.Random(seed)
    records = [(None if rng.random() < 0.2 else bytes(rng.randrange(256) for _ in range(rng.choice((0, 3, 200)))),
                None if rng.random() < 0.2 else bytes(rng.randrange(256) for _ in range(rng.choice((0, 5, 70, 300)))))
               for _ in range(rng.randint(1, 70))]
    kw = dict(transactional=rng.random() < 0.5, control=rng.random() < 0.3, producer_id=rng.choice((-1, 4242)),
              producer_epoch=rng.choice((-1, 3)), base_sequence=rng.choice((-1, 0, 77)),
              base_offset=rng.choice((0, 1234)), partition_leader_epoch=rng.choice((-1, 5)))
    ts = 1_700_000_000_000 + seed
    ours = B.build_batch(records, timestamp_ms=ts, **kw)
    assert ours == _reference(records, ts, **kw)
    if not kw["control"]:  # (kafka-python reads control records as markers: 4-byte keys)
        assert [(r.key, r.value) for r in DefaultRecordBatch(ours)] == records


def test_marker_and_single_record_helpers_unchanged() -> None:
    ts = 1_700_000_000_123
    assert B.one_record_batch(b"k", None, ts) == _reference([(b"k", None)], ts)
    assert B.build_control_batch(1, producer_id=9, producer_epoch=2, coordinator_epoch=4, timestamp_ms=ts) == \
        _reference([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 4))], ts, transactional=True, control=True,
                   producer_id=9, producer_epoch=2)
