"""The compiled record walk (storage/_recwalk.c) and the pure-Python fallback give exactly the
verdicts and error messages of the record walk as it was before (tests/unit/record_walk_reference.py).

Corpus: valid batches of every codec with keys, headers and multi-byte varints (long values,
timestamp deltas of every width, > 64 and > 8,192 records); the fuzzer's malformed batch kinds
(tests/fuzz/batches.py); and thousands of seeded mutations of valid records sections (bit flips,
byte sets, truncations, insertions, deletions, over-long and huge varints, splices). Every case is
checked with and without the compacted-topic key rule, and both through `validate_records` (the
produce path) and the raw walks.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from storage import batch as B
from storage import record_validation as RV
from tests.fuzz import batches as FB
from tests.unit import record_walk_reference as REF

try:
    from storage import _recwalk
except ImportError:  # built without a compiler: the Python fallback is still checked below
    _recwalk = None
compiled = pytest.mark.skipif(_recwalk is None, reason="the optional compiled walk is not built")

_EDGE_VARINTS = [b"\xff\xff\xff\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
                 b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\xfe\xff\xff\xff\x0f", b"\x01", b"\x03", b"\x00",
                 b"\x7f", b"\x80\x01", b"\xff\x7f", b"\x81\x80\x80\x80\x00"]


def _records(rng: random.Random, n: int) -> bytes:
    out = []
    for i in range(n):
        key = rng.choice([None, b"", b"k%d" % i, b"K" * rng.randrange(60, 200)])
        value = rng.choice([None, b"", b"v" * rng.randrange(0, 70), b"w" * rng.randrange(8_000, 9_000)
                            if rng.random() < 0.05 else b"x" * rng.randrange(100, 300)])
        headers = [(b"h%d" % j, rng.choice([None, b"", b"y" * rng.randrange(0, 150)]))
                   for j in range(rng.choice([0, 0, 0, 1, 2, 70]))]
        ts = rng.choice([0, 1, 63, 64, 8191, 8192, 1 << 20, 1 << 27, 1 << 40, -1, -(1 << 33)])
        out.append(FB.record(i, key, value, ts_delta=ts, headers=headers))
    return b"".join(out)


def _outcome(fn, *args, **kw) -> tuple[str, object]:
    try:
        return "ok", fn(*args, **kw)
    except RV.InvalidRecordError as e:
        return "invalid", (str(e), e.record_errors)
    except B.InvalidBatchError as e:
        return type(e).__name__, str(e)


def _same_walk(section: bytes, count: int) -> None:
    """Raw walks: compiled verdict == reference verdict, Python walk == reference (messages too)."""
    for need_keys in (False, True):
        ref = _outcome(REF.walk_records, section, 0, len(section), count, need_keys)
        assert _outcome(RV.walk_records, section, 0, len(section), count, need_keys) == ref
        if _recwalk is None:
            continue
        compiled = _recwalk.walk(section, 0, len(section), count, need_keys)
        if ref[0] == "ok":
            assert compiled == ref[1], (section.hex(), count, need_keys)
        else:
            assert compiled is None, (section.hex(), count, need_keys, ref)
        # in place inside a larger buffer, as the produce path calls it
        padded = b"\x05" * 7 + section + b"\xff" * 5
        assert _recwalk.walk(memoryview(bytearray(padded)), 7, 7 + len(section), count, need_keys) == compiled


def _same_validate(batch: bytes) -> None:
    """validate_records (compiled, then forced pure Python) == the reference, for a whole batch."""
    try:
        h = B.parse_header(batch)
    except B.InvalidBatchError:
        return
    view = memoryview(bytearray(batch))
    for tp in (None, "t-0"):
        ref = _outcome(REF.validate_records, view, h, compacted_tp=tp, max_decompressed=1 << 22)
        assert _outcome(RV.validate_records, view, h, compacted_tp=tp, max_decompressed=1 << 22) == ref
        saved, RV._recwalk = RV._recwalk, None
        try:
            assert _outcome(RV.validate_records, view, h, compacted_tp=tp, max_decompressed=1 << 22) == ref
        finally:
            RV._recwalk = saved


@compiled
def test_compiled_walk_is_in_use():
    assert RV._recwalk is _recwalk


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_valid_batches(codec):
    rng = random.Random(codec)
    for n in (1, 2, 5, 63, 64, 65, 300):
        section = _records(rng, n)
        _same_walk(section, n)
        batch = FB.assemble(FB.compress(codec, section), n, attributes=codec)
        _same_validate(batch)
        assert RV.validate_records(batch, B.parse_header(batch)) is None


def test_many_records_three_byte_offset_deltas():
    n = 9_000
    section = b"".join(FB.record(i, None, b"v") for i in range(n))
    _same_walk(section, n)
    _same_walk(section, n - 1)
    _same_walk(section, n + 1)


@pytest.mark.parametrize("kind", FB.BAD_KINDS)
def test_fuzzer_bad_batch_kinds(kind):
    rng = random.Random(kind)
    for _ in range(1 if kind.endswith("_bomb") else 8):
        _same_validate(FB.bad_batch(kind, rng))


def _mutate(section: bytes, rng: random.Random) -> bytes:
    data = bytearray(section)
    op = rng.randrange(8)
    pos = rng.randrange(len(data) + 1)
    if op == 0 and data:
        data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
    elif op == 1 and data:
        data[min(pos, len(data) - 1)] = rng.choice([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0xFE, rng.getrandbits(8)])
    elif op == 2:
        del data[pos:]
    elif op == 3:
        data[pos:pos] = rng.choice(_EDGE_VARINTS)
    elif op == 4:
        data[pos:pos + rng.randrange(1, 3)] = rng.choice(_EDGE_VARINTS)
    elif op == 5:
        del data[pos:pos + rng.randrange(1, 4)]
    elif op == 6:
        other = rng.randrange(len(data) + 1)
        data[pos:pos] = data[other:other + rng.randrange(1, 12)]
    else:
        data += bytes(rng.randrange(1, 4))
    return bytes(data)


def test_mutated_sections():
    rng = random.Random(20)
    for round_ in range(2_500):
        n = rng.randrange(1, 6)
        section = b"".join(FB.record(i, rng.choice([None, b"k"]), b"v" * rng.randrange(0, 40),
                                     ts_delta=rng.choice([0, 300, 1 << 22]),
                                     headers=[(b"h", rng.choice([None, b"x"]))] * rng.randrange(0, 3))
                           for i in range(n))
        for _ in range(rng.choice([1, 1, 2, 3])):
            section = _mutate(section, rng)
        count = n if round_ % 5 else rng.choice([0, n - 1, n + 1, 1 << 30])
        _same_walk(section, count)
        if round_ % 10 == 0:
            codec = rng.choice([0, 0, 3, 4])
            _same_validate(FB.assemble(FB.compress(codec, section), count, attributes=codec))


def test_batch_shorter_than_its_header_claims():
    """dump-log may hand over a buffer that ends early: the compiled walk is skipped, same error."""
    section = b"".join(FB.record(i, None, b"v" * 20) for i in range(3))
    batch = FB.assemble(section, 3)
    h = B.parse_header(batch)
    cut = batch[:-10]
    assert _outcome(RV.validate_records, cut, h) == _outcome(REF.validate_records, cut, h)
    assert _outcome(RV.validate_records, cut, h)[0] == "invalid"


@compiled
def test_bad_range_is_refused():
    with pytest.raises(ValueError):
        _recwalk.walk(b"abc", 2, 1, 1, False)
    with pytest.raises(ValueError):
        _recwalk.walk(b"abc", 0, 4, 1, False)


@compiled
def test_env_switch_forces_the_python_walk():
    code = "from storage import record_validation as RV; print(RV._recwalk is None)"
    env = dict(os.environ, KBROKERTEST_PURE_PYTHON_WALK="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "True", out.stderr


@compiled
def test_large_section_walked_without_the_gil_reports_keyless_records():
    """From 64 KiB on the compiled walk releases the GIL; the keyless indexes come from a second pass."""
    n = 800
    section = b"".join(FB.record(i, None if i % 3 else b"k", b"v" * 100) for i in range(n))
    assert len(section) >= 64 * 1024
    assert _recwalk.walk(section, 0, len(section), n, True) == [i for i in range(n) if i % 3]
    _same_walk(section, n)


# --- the streaming walk (compressed batches are walked chunk by chunk as they decompress) ---------


def _fed(section: bytes, count: int, need_keys: bool, cuts: list[int]):
    w = _recwalk.Walker(count, need_keys)
    prev = 0
    for c in [*sorted(cuts), len(section)]:
        w.feed(section[prev:c])
        prev = c
    return w.finish()


@compiled
def test_streaming_walk_has_the_whole_buffer_verdict_wherever_the_chunks_are_cut():
    """Records straddling chunk boundaries: every single cut, byte-by-byte feeding and random cuts
    of valid and mutated sections give walk()'s verdict and keyless records."""
    rng = random.Random(32)
    for round_ in range(600):
        n = rng.randrange(1, 5)
        section = b"".join(FB.record(i, rng.choice([None, b"k"]), b"v" * rng.randrange(0, 30),
                                     ts_delta=rng.choice([0, 300, 1 << 22, 1 << 40]),
                                     headers=[(b"h", rng.choice([None, b"", b"x"]))] * rng.randrange(0, 3))
                           for i in range(n))
        for _ in range(rng.choice([0, 0, 1, 2])):
            section = _mutate(section, rng)
        count = n if round_ % 5 else rng.choice([0, n - 1, n + 1, 1 << 30])
        for need_keys in (False, True):
            ref = _recwalk.walk(section, 0, len(section), count, need_keys)
            for cut in range(len(section) + 1):
                assert _fed(section, count, need_keys, [cut]) == ref, (section.hex(), count, need_keys, cut)
            assert _fed(section, count, need_keys, list(range(len(section)))) == ref, (section.hex(), count)
            cuts = rng.sample(range(len(section) + 1), min(len(section) + 1, 4))
            assert _fed(section, count, need_keys, cuts) == ref, (section.hex(), count, cuts)


@compiled
def test_streaming_walk_refuses_bytes_after_the_last_record_and_stays_failed():
    section = b"".join(FB.record(i, b"k", b"v") for i in range(3))
    w = _recwalk.Walker(3, False)
    assert w.feed(section) is True
    assert w.feed(b"\x00") is False
    assert w.feed(b"") is False
    assert w.finish() is None
    w = _recwalk.Walker(4, False)  # one record short
    assert w.feed(section) is True
    assert w.finish() is None


@compiled
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_records_straddling_chunks_validate_without_the_one_buffer_path(codec, monkeypatch):
    """Record sizes that drift against the 64 KiB streaming step put chunk boundaries in every field
    of some record (lengths, keys, values, headers); large values span several chunks. The batch
    validates, keyless records are found, and the one-buffer path (decompress + join) is not used."""
    rng = random.Random(codec)
    recs = []
    for i in range(700):
        big = i % 97 == 5
        key = None if i % 7 == 3 else b"key-%d" % i
        value = rng.randbytes(150_000) if big else (b"%06d" % i) * rng.randrange(1, 60)
        headers = [(b"trace", b"t" * rng.randrange(0, 40))] * (i % 3)
        recs.append(FB.record(i, key, value, ts_delta=i * 37, headers=headers))
    section = b"".join(recs)
    assert len(section) > 6 * 65536
    batch = FB.assemble(FB.compress(codec, section), len(recs), attributes=codec)
    _same_validate(batch)
    if RV._recwalk is None:  # KBROKERTEST_PURE_PYTHON_WALK=1: the one-buffer path is the only one
        return

    def one_buffer(*_a, **_k):
        raise AssertionError("the one-buffer path ran for a valid batch")

    monkeypatch.setattr(RV, "decompress", one_buffer)
    h = B.parse_header(batch)
    assert RV.validate_records(batch, h) is None
    with pytest.raises(RV.InvalidRecordError) as e:
        RV.validate_records(batch, h, compacted_tp="t-0")
    assert [i for i, _ in e.value.record_errors] == [i for i in range(700) if i % 7 == 3]


@compiled
def test_lz4_context_reused_after_a_truncated_frame():
    """The thread's lz4 context is reset per batch: a frame cut short does not poison the next one."""
    section = b"".join(FB.record(i, b"k", b"v" * 2000) for i in range(100))
    good = FB.compress(3, section)
    bad = FB.assemble(good[:-40], 100, attributes=3)
    assert _outcome(RV.validate_records, bad, B.parse_header(bad)) == \
        _outcome(REF.validate_records, bad, B.parse_header(bad))
    ok = FB.assemble(good, 100, attributes=3)
    assert RV.validate_records(ok, B.parse_header(ok)) is None


@pytest.mark.parametrize("checksum", [True, False])
def test_whole_zstd_frame_is_recognised_from_its_block_headers(checksum):
    """Only a payload that is exactly one complete frame takes read_to_iter; cut, doubled or padded
    payloads go to the slice-by-slice decoder, with its truncation and next-frame handling."""
    import zstandard

    for level in (1, 19):
        for data in (b"", b"a" * 1_000_000, bytes(range(256)) * 4000, random.Random(level).randbytes(300_000)):
            c = zstandard.ZstdCompressor(level=level, write_checksum=checksum,
                                         write_content_size=checksum).compress(data)
            assert RV._one_whole_zstd_frame(memoryview(c))
            assert b"".join(RV._zstd_chunks(memoryview(c), 1 << 30)) == data
            for other in (c[:-1], c + c, c + b"\x00", c[:5]):
                assert not RV._one_whole_zstd_frame(memoryview(other))
    section = b"".join(FB.record(i, None, b"v" * 500) for i in range(300))
    frame = FB.compress(4, section)
    for payload in (frame + frame[:-3], frame[:-3], frame + b"\x00\x01"):
        _same_validate(FB.assemble(payload, 300, attributes=4))


def _xerial(blocks: list[bytes]) -> bytes:
    import snappy

    out = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
    for b in blocks:
        c = snappy.compress(b)
        out += len(c).to_bytes(4, "big") + c
    return out


def test_streamed_pieces_join_to_the_one_buffer_output():
    """The streaming decoders alone (no fallback to hide a mistake) give decompress()'s bytes, or
    fail where it fails, for every framing: gzip members and trailing bytes, zstd frames (whole,
    several, cut), xerial and raw snappy, lz4 frames cut or followed by bytes."""
    import gzip

    import lz4.frame
    import zstandard

    rng = random.Random(7)
    data = [rng.randbytes(rng.randrange(0, 5000)) + b"x" * rng.randrange(0, 200_000) for _ in range(4)]
    a, b = data[0] + data[1], data[2] + data[3]
    z = zstandard.ZstdCompressor()
    cases = {
        1: [gzip.compress(a), gzip.compress(a) + gzip.compress(b), gzip.compress(a) + b"junk",
            gzip.compress(a)[:-9], gzip.compress(b"")],
        2: [_xerial([a, b]), _xerial([a]), FB.compress(2, b), _xerial([a])[:-3]],
        3: [lz4.frame.compress(a), lz4.frame.compress(a) + b"tail", lz4.frame.compress(a)[:-5],
            lz4.frame.compress(b, block_size=lz4.frame.BLOCKSIZE_MAX4MB)],
        4: [z.compress(a), z.compress(a) + z.compress(b), z.compress(a)[:-4], z.compress(b"")],
    }
    for codec, payloads in cases.items():
        for payload in payloads:
            view = memoryview(payload)
            try:
                want = RV.decompress(codec, view, 1 << 24)
            except B.InvalidBatchError:
                want = None
            try:
                got = b"".join(bytes(c) for c in RV._stream_chunks(codec, view, 1 << 24))
            except Exception:  # noqa: BLE001 - any failure counts as failing
                got = None
            assert got == want, (codec, len(payload))
            if want is not None and len(want) > 1:  # past the cap: both refuse
                with pytest.raises(B.InvalidBatchError):
                    RV.decompress(codec, view, len(want) - 1)
                with pytest.raises(B.InvalidBatchError):
                    b"".join(RV._stream_chunks(codec, view, len(want) - 1))


@compiled
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_output_past_the_cap_is_refused_without_a_second_decoding(codec, monkeypatch):
    """A batch whose records decompress past the cap gets the cap's CORRUPT_MESSAGE error from the
    streaming pass itself: the payload is not decoded again into one buffer of up to the cap."""
    if RV._recwalk is None:
        pytest.skip("KBROKERTEST_PURE_PYTHON_WALK=1: only the one-buffer path")
    n = 20_000
    section = b"".join(FB.record(i, None, b"v" * 100) for i in range(n))
    batch = FB.assemble(FB.compress(codec, section), n, attributes=codec)
    cap = len(section) // 3
    ref = _outcome(REF.validate_records, batch, B.parse_header(batch), max_decompressed=cap)
    assert ref == ("CorruptRecordsError", f"Decompressed records exceed {cap} bytes (the broker's limit per batch)")

    def one_buffer(*_a, **_k):
        raise AssertionError("decoded a second time")

    monkeypatch.setattr(RV, "decompress", one_buffer)
    assert _outcome(RV.validate_records, batch, B.parse_header(batch), max_decompressed=cap) == ref
