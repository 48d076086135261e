"""Property tests: random batches across many tiny segments; read and timestamp lookups match a model."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from storage import batch as rb
from storage.log import Log
from storage.log_config import LogConfig

record = st.tuples(st.integers(0, 2000), st.integers(0, 300))  # (timestamp, value size)
batch_st = st.lists(record, min_size=1, max_size=5)


def build(records: list[tuple[int, int]]) -> bytearray:
    """A batch whose records carry their own timestamps (build_batch uses one for all)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (ts, size) in enumerate(records):
        b.append(i, timestamp=ts, key=None, value=b"x" * size, headers=[])
    return bytearray(b.build())


def check_log(lg: Log, model: list[tuple[int, int, int]], batches: list[tuple[int, int]], max_bytes: int) -> None:
    """model: (offset, timestamp, batch index) per record; batches: (base, last) per batch."""
    leo = lg.log_end_offset
    assert leo == len(model)
    for off in range(leo):
        res = lg.read(off, max_bytes)
        data = b"".join(bytes(c) for c in res.chunks)
        hs = list(rb.iter_headers(data, check=True))
        assert hs, off
        assert hs[0].base_offset <= off <= hs[0].last_offset
        assert res.first_offset == hs[0].base_offset
        assert len(hs) == 1 or res.size <= max_bytes
        idx = model[off][2]
        assert [(h.base_offset, h.last_offset) for h in hs] == batches[idx : idx + len(hs)]
    assert lg.read(leo, max_bytes).size == 0

    stamps = sorted({ts for _, ts, _ in model})
    probes = {-1, 0} | set(stamps) | {t + 1 for t in stamps} | {t - 1 for t in stamps}
    for t in sorted(probes):
        expected = next(((o, ts) for o, ts, _ in model if ts >= t), None)
        assert lg.offset_for_timestamp(t) == expected, t
    if model:
        top = max(ts for _, ts, _ in model)
        assert lg.latest_timestamp() == (top, next(o for o, ts, _ in model if ts == top))
    else:
        assert lg.latest_timestamp() is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(batch_st, min_size=0, max_size=40),
    segment_bytes=st.integers(200, 3000),
    index_interval=st.integers(1, 600),
    index_bytes=st.sampled_from([24, 48, 4096, 10485760]),
    max_bytes=st.integers(1, 3000),
    reopen=st.sampled_from(["none", "clean", "unclean"]),
)
def test_read_and_timestamp_lookup_match_model(batches: list[list[tuple[int, int]]], segment_bytes: int,
                                               index_interval: int, index_bytes: int, max_bytes: int,
                                               reopen: str) -> None:
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval,
                    segment_index_bytes=index_bytes, segment_ms=10**12)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "prop.topic-7"
        lg = Log.open(d, cfg)
        model: list[tuple[int, int, int]] = []
        spans: list[tuple[int, int]] = []
        for i, recs in enumerate(batches):
            buf = build(recs)
            res = lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=0)
            assert res.first_offset == len(model)
            spans.append((res.first_offset, res.last_offset))
            model.extend((len(model), ts, i) for ts, _ in recs)
        for seg in lg.segments:
            assert seg.size <= segment_bytes or _single_batch(seg)
        if reopen != "none":
            lg.close()
            lg = Log.open(d, cfg, clean_shutdown=reopen == "clean", recovery_point=0)
        check_log(lg, model, spans, max_bytes)
        lg.close()


def _single_batch(seg) -> bool:  # noqa: ANN001
    """An oversize segment is only allowed when it holds one batch larger than segment.bytes."""
    headers = [h for h, _ in seg.iter_from(seg.base_offset)]
    return len(headers) == 1


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.integers(1, 4), min_size=2, max_size=30),
    cut=st.integers(0, 10**6),
)
def test_truncate_then_append_keeps_offsets_dense(batches: list[int], cut: int) -> None:
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=50)
    with tempfile.TemporaryDirectory() as tmp:
        lg = Log.open(Path(tmp) / "t-0", cfg)
        bases = []
        for n in batches:
            buf = bytearray(rb.build_batch([(b"k", b"v" * 20)] * n, timestamp_ms=1))
            bases.append(lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=1).first_offset)
        target = bases[cut % len(bases)]
        lg.truncate_to(target)
        assert lg.log_end_offset == target
        buf = bytearray(rb.build_batch([(b"k", b"v")], timestamp_ms=1))
        assert lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=1, now_ms=1).first_offset == target
        got = [h.base_offset for h, _ in lg.iter_batches(0)]
        assert got == [b for b in bases if b < target] + [target]
        lg.close()
