"""`kbroker dump-log --deep-verify`: finds batches whose records cannot be decoded (issue 22 item 5)."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from storage import batch as B
from storage import dump

ROOT = Path(__file__).resolve().parents[2]


def _poisoned(base_offset: int) -> bytes:
    """A gzip batch with a byte of its payload changed and the CRC recomputed (stored by old brokers)."""
    data = bytearray(B.build_batch([(b"k", b"value-%d" % i) for i in range(20)], compression=1,
                                   base_offset=base_offset))
    data[B.HEADER_SIZE + 15] ^= 0x5A
    struct.pack_into(">I", data, B.CRC_OFFSET, crc32c.crc32c(bytes(data[B.ATTRIBUTES_OFFSET:])))
    return bytes(data)


def _segment(tmp_path: Path, batches: list[bytes]) -> Path:
    part = tmp_path / "data" / "events-0"
    part.mkdir(parents=True)
    (part / ("0" * 20 + ".log")).write_bytes(b"".join(batches))
    return part


def _good(base_offset: int, codec: int = 0) -> bytes:
    return B.build_batch([(b"k", b"v1"), (None, b"v2")], base_offset=base_offset, compression=codec)


def test_clean_log_passes(tmp_path):
    part = _segment(tmp_path, [_good(0), _good(2, codec=4), _good(4, codec=3)])
    out = io.StringIO()
    assert dump.deep_verify([str(tmp_path / "data")], out) == 0
    assert "Checked 1 segment(s): 0 undecodable batch(es)" in out.getvalue()
    assert dump.main(["--deep-verify", str(part / ("0" * 20 + ".log"))]) == 0


def test_poisoned_batch_is_reported_with_its_position_and_offsets(tmp_path, capsys):
    first = _good(0)
    part = _segment(tmp_path, [first, _poisoned(2), _good(22)])
    assert dump.main(["--deep-verify", str(tmp_path / "data")]) == 2
    text = capsys.readouterr().out
    bad = [line for line in text.splitlines() if line.startswith("BAD ")]
    assert len(bad) == 1
    assert f"position: {len(first)} baseOffset: 2 lastOffset: 21" in bad[0]
    assert "compresscodec: gzip" in bad[0]
    assert "events-0: delete records before offset 22" in text
    # through the kbroker command line as well
    proc = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--deep-verify", str(part)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "baseOffset: 2" in proc.stdout


@pytest.mark.parametrize("codec", [5, 7])
def test_unknown_codec_is_reported(tmp_path, codec):
    data = bytearray(_good(0))
    struct.pack_into(">h", data, B.ATTRIBUTES_OFFSET, codec)
    struct.pack_into(">I", data, B.CRC_OFFSET, crc32c.crc32c(bytes(data[B.ATTRIBUTES_OFFSET:])))
    _segment(tmp_path, [bytes(data)])
    out = io.StringIO()
    assert dump.deep_verify([str(tmp_path / "data")], out) == 2
    assert f"Unknown compression type id: {codec}" in out.getvalue()
