"""In-process throughput of produce-path record validation (storage.record_validation).

    .venv/bin/python benchmarks/validation_bench.py [--seconds 1.0] [--rounds 5] [--batch-kib 16,1024]
        [--out FILE]

For each codec (none, lz4, zstd, plus gzip and snappy for reference), record size (100 B and
1 KiB values, no key, no headers: what a librdkafka producer sends) and batch size (``--batch-kib``,
uncompressed: 16 KiB, and 1 MiB = the batch.size of `make bench`'s producers), builds one batch of
distinct JSON-like text values, compressed as librdkafka frames them (`librdkafka_frame`) (`benchmarks/lib_workloads.record_values`, the values of the
compressed `make bench` workloads: about 2x with lz4, 3.5x with zstd), and times `validate_records`
on it for about ``--seconds`` (interleaved rounds, fastest round counts, so other load on a shared
machine disturbs less). For compressed batches it also times the one-buffer path (decompress the
whole section, join, then the compiled walk: what validation did before issue 32's streaming walk),
and the decoder alone (`--codec-only`: the codec library's one-shot decompression into a new
buffer, the floor any validation pays). Prints batches/s, µs per batch and MB/s of record values
(MB = 10^6 bytes) and writes a small markdown report (default benchmarks/results/validation.md).
Numbers are single-core and include decompression.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lib_workloads import record_values  # noqa: E402

from storage import batch as B  # noqa: E402
from storage import record_validation as RV  # noqa: E402
from storage.record_validation import validate_records  # noqa: E402
from tests.fuzz import batches as FB  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RESULTS = ROOT / "benchmarks" / "results" / "validation.md"


def librdkafka_frame(codec: str, section: bytes) -> bytes:
    """The records section compressed as librdkafka (2.x) frames it: lz4 frames of independent
    64 KiB blocks with no content size, zstd frames with no content size (a streaming compressor),
    gzip one member, snappy raw. Frames that declare their size let a decoder allocate the output
    once; these do not, which is what a broker receives."""
    if codec == "lz4":
        import lz4.frame
        return lz4.frame.compress(section, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                  store_size=False)
    if codec == "zstd":
        import zstandard
        return zstandard.ZstdCompressor(write_content_size=False).compress(section)
    if codec == "gzip":
        import gzip
        return gzip.compress(section)
    import snappy
    return snappy.compress(section)


def make_batch(codec: str, size: int, batch_bytes: int) -> tuple[memoryview, B.BatchHeader, int]:
    n = max(1, batch_bytes // (size + 12))  # ~12 bytes of record framing per record
    values = record_values(size, "text", count=n)  # any codec name but "none": distinct text values
    data = B.build_batch([(None, v) for v in values])
    if codec != "none":
        section = bytes(data[B.HEADER_SIZE:])
        data = FB.assemble(librdkafka_frame(codec, section), n, attributes=CODECS[codec])
    view = memoryview(bytearray(data))  # the produce path validates a writable view of the request
    return view, B.parse_header(view), n


def one_buffer(view: memoryview, header: B.BatchHeader) -> None:
    """Validation as it was before the streaming walk: the whole section decompressed and joined
    into one new buffer, then walked (compiled walk when built)."""
    codec = header.attributes & B.COMPRESSION_MASK
    data = RV.decompress(codec, view[B.HEADER_SIZE:header.size], RV.MIN_DECOMPRESSED_CAP)
    if RV._recwalk is None or RV._recwalk.walk(data, 0, len(data), header.records_count, False) is None:
        RV.walk_records(data, 0, len(data), header.records_count, False)


def codec_only(view: memoryview, header: B.BatchHeader) -> None:
    """The codec library's one-shot decompression (no cap, no walk): the floor."""
    payload = view[B.HEADER_SIZE:header.size]
    codec = header.attributes & B.COMPRESSION_MASK
    if codec == CODECS["lz4"]:
        import lz4.frame
        lz4.frame.decompress(payload)
    elif codec == CODECS["zstd"]:
        import zstandard
        zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    elif codec == CODECS["gzip"]:
        import zlib
        zlib.decompress(payload, 16 + zlib.MAX_WBITS)
    elif codec == CODECS["snappy"]:  # python-snappy per block (the batch may use xerial framing)
        RV._unsnappy(payload, RV.MIN_DECOMPRESSED_CAP)


PATHS = {"validate": lambda view, header: validate_records(view, header), "one_buffer": one_buffer,
         "codec_only": codec_only}


def time_batch(fn, view: memoryview, header: B.BatchHeader, seconds: float) -> float:
    """Seconds per call of ``fn`` on one batch, over about ``seconds``."""
    loops, elapsed, step = 0, 0.0, 5
    t0 = time.perf_counter()
    while elapsed < seconds:
        for _ in range(step):
            fn(view, header)
        loops += step
        elapsed = time.perf_counter() - t0
    return elapsed / loops


def measure_all(cases: list[tuple[str, int, int]], seconds: float, rounds: int
                ) -> dict[tuple[str, int, int], dict[str, float]]:
    """Cases are timed in interleaved rounds and the fastest round counts: on a shared machine,
    load from other processes only ever slows a round down."""
    batches = {case: make_batch(*case) for case in cases}
    for view, header, _ in batches.values():
        validate_records(view, header)  # warm-up, and proof the batch is valid
    paths = {case: ["validate"] if case[0] == "none" else list(PATHS) for case in cases}
    best = {(case, path): float("inf") for case in cases for path in paths[case]}
    for _ in range(rounds):
        for case in cases:
            view, header, _ = batches[case]
            for path in paths[case]:
                per = time_batch(PATHS[path], view, header, seconds / rounds / len(paths[case]))
                best[(case, path)] = min(best[(case, path)], per)
    out = {}
    for case in cases:
        codec, size, _ = case
        _, header, n = batches[case]
        per_batch = best[(case, "validate")]
        out[case] = {"records": n, "batch_bytes": header.size, "us_per_batch": per_batch * 1e6,
                     "batches_per_s": 1 / per_batch, "mb_per_s": n * size / per_batch / 1e6,
                     "records_per_s": n / per_batch,
                     "one_buffer_us": best.get((case, "one_buffer"), float("nan")) * 1e6,
                     "codec_only_us": best.get((case, "codec_only"), float("nan")) * 1e6}
    return out


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "-"
    except OSError:
        return "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per case, split over the rounds")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the fastest counts")
    ap.add_argument("--codecs", default="none,lz4,zstd,gzip,snappy")
    ap.add_argument("--batch-kib", default="16,1024", help="uncompressed batch sizes, KiB")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args()
    cases = [(codec, size, int(kib) * 1024) for kib in args.batch_kib.split(",") for size in (100, 1024)
             for codec in args.codecs.split(",")]
    measured = measure_all(cases, args.seconds, args.rounds)
    rows = []
    load = os.getloadavg()
    for case in cases:
        codec, size, _ = case
        r = measured[case]
        rows.append((codec, size, r))
        print(f"{codec:<6} {size:>5} B values x {r['records']:>5} ({r['batch_bytes']:>7} B batch): "
              f"{r['us_per_batch']:8.1f} us/batch {r['batches_per_s']:9,.0f} batches/s "
              f"{r['records_per_s']:11,.0f} records/s {r['mb_per_s']:7.0f} MB/s  "
              f"one-buffer {r['one_buffer_us']:8.1f} us  codec alone {r['codec_only_us']:8.1f} us", flush=True)
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if not args.no_record:
        host = f"{platform.machine()} {os.cpu_count()} cpu, py{platform.python_version()}"
        lines = [f"# validation_bench ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, commit {commit()}, "
                 f"{host}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})", "",
                 "`benchmarks/validation_bench.py`: `storage.record_validation.validate_records` on one batch of "
                 "JSON-like values (16 KiB and 1 MiB uncompressed), no keys, in process, one core; includes "
                 "decompression. MB = 10^6 bytes of record values. *one-buffer*: the whole section decompressed "
                 "into one new buffer, joined, then walked (validation before the streaming walk); *codec alone*: "
                 "the codec library's one-shot decompression, no walk. Fastest of interleaved rounds; the machine "
                 "may be shared: compare rows of one run, not runs.", "",
                 "| codec | value size | records/batch | batch bytes | µs/batch | batches/s | records/s | MB/s "
                 "| one-buffer µs | codec alone µs |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for codec, size, r in rows:
            extra = ("– | – |" if codec == "none" else
                     f"{r['one_buffer_us']:.1f} | {r['codec_only_us']:.1f} |")
            lines.append(f"| {codec} | {size} B | {r['records']} | {r['batch_bytes']} | {r['us_per_batch']:.1f} | "
                         f"{r['batches_per_s']:,.0f} | {r['records_per_s']:,.0f} | {r['mb_per_s']:.0f} | {extra}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
