"""In-process throughput of produce-path record validation (storage.record_validation).

    .venv/bin/python benchmarks/validation_bench.py [--seconds 1.0] [--rounds 5] [--out FILE]

For each codec (none, lz4, zstd, plus gzip and snappy for reference) and record size (100 B and
1 KiB values, no key, no headers: what a librdkafka producer sends), builds one ~16 KiB batch (the
uncompressed size) of distinct JSON-like text values (`benchmarks/lib_workloads.record_values`, the
values of the compressed `make bench` workloads: about 2x with lz4, 3.5x with zstd),
and times `validate_records` on it for about ``--seconds`` (interleaved rounds, fastest round
counts, so other load on a shared machine disturbs less). Prints batches/s, µs per batch and MB/s
of record values (MB = 10^6 bytes) and writes a small markdown report (default
benchmarks/results/validation.md). Numbers are single-core and include decompression.
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
from storage.record_validation import validate_records  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BATCH_BYTES = 16 * 1024
RESULTS = ROOT / "benchmarks" / "results" / "validation.md"


def make_batch(codec: str, size: int) -> tuple[memoryview, B.BatchHeader, int]:
    n = max(1, BATCH_BYTES // (size + 12))  # ~12 bytes of record framing per record
    values = record_values(size, "text", count=n)  # any codec name but "none": distinct text values
    data = B.build_batch([(None, v) for v in values], compression=CODECS[codec])
    view = memoryview(bytearray(data))  # the produce path validates a writable view of the request
    return view, B.parse_header(view), n


def time_batch(view: memoryview, header: B.BatchHeader, seconds: float) -> float:
    """Seconds per validation of one batch, over about ``seconds``."""
    loops, elapsed, step = 0, 0.0, 20
    t0 = time.perf_counter()
    while elapsed < seconds:
        for _ in range(step):
            validate_records(view, header)
        loops += step
        elapsed = time.perf_counter() - t0
    return elapsed / loops


def measure_all(cases: list[tuple[str, int]], seconds: float, rounds: int) -> dict[tuple[str, int], dict[str, float]]:
    """Cases are timed in interleaved rounds and the fastest round counts: on a shared machine,
    load from other processes only ever slows a round down."""
    batches = {case: make_batch(*case) for case in cases}
    for view, header, _ in batches.values():
        validate_records(view, header)  # warm-up, and proof the batch is valid
    best = {case: float("inf") for case in cases}
    for _ in range(rounds):
        for case in cases:
            view, header, _ = batches[case]
            best[case] = min(best[case], time_batch(view, header, seconds / rounds))
    out = {}
    for (codec, size), per_batch in best.items():
        _, header, n = batches[(codec, size)]
        out[(codec, size)] = {"records": n, "batch_bytes": header.size, "us_per_batch": per_batch * 1e6,
                              "batches_per_s": 1 / per_batch, "mb_per_s": n * size / per_batch / 1e6,
                              "records_per_s": n / per_batch}
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
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args()
    cases = [(codec, size) for size in (100, 1024) for codec in args.codecs.split(",")]
    measured = measure_all(cases, args.seconds, args.rounds)
    rows = []
    for codec, size in cases:
        r = measured[(codec, size)]
        rows.append((codec, size, r))
        print(f"{codec:<6} {size:>5} B values x {r['records']:>3} ({r['batch_bytes']:>6} B batch): "
              f"{r['us_per_batch']:8.1f} us/batch {r['batches_per_s']:9,.0f} batches/s "
              f"{r['records_per_s']:11,.0f} records/s {r['mb_per_s']:7.0f} MB/s", flush=True)
    if not args.no_record:
        host = f"{platform.machine()} {os.cpu_count()} cpu, py{platform.python_version()}"
        lines = [f"# validation_bench ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, commit {commit()}, "
                 f"{host})", "",
                 "`benchmarks/validation_bench.py`: `storage.record_validation.validate_records` on one ~16 KiB "
                 "(uncompressed) batch of JSON-like values, no keys, in process, one core; includes "
                 "decompression. MB = 10^6 bytes of record values. Fastest of interleaved rounds; the machine may "
                 "be shared: compare rows of one run, not runs.", "",
                 "| codec | value size | records/batch | batch bytes | µs/batch | batches/s | records/s | MB/s |",
                 "|---|---|---|---|---|---|---|---|"]
        for codec, size, r in rows:
            lines.append(f"| {codec} | {size} B | {r['records']} | {r['batch_bytes']} | {r['us_per_batch']:.1f} | "
                         f"{r['batches_per_s']:,.0f} | {r['records_per_s']:,.0f} | {r['mb_per_s']:.0f} |")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
