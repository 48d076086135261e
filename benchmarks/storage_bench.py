"""Storage engine throughput: append ~N MiB of 16 KiB batches, read it all back.

    .venv/bin/python benchmarks/storage_bench.py [--mib N] [--dir PATH]

One 16-record batch of 1 KiB values is built once with storage.batch.build_batch; every append
re-patches its baseOffset/partitionLeaderEpoch in place (what the produce path does). Reads
walk the log with 1 MiB Log.read calls (what a fetch does). Also measures the per-call cost
of tiny appends, which bounds small-message produce throughput. Results go to stdout and
benchmarks/results/storage_bench.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import batch as rb  # noqa: E402
from storage.log import Log  # noqa: E402
from storage.log_config import LogConfig  # noqa: E402

MIB = 1 << 20


def bench(mib: int, root: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    buf = bytearray(rb.build_batch([(None, b"x" * 1024)] * 16, timestamp_ms=int(time.time() * 1000)))
    headers = list(rb.iter_headers(buf))
    batch_size = len(buf)
    n = mib * MIB // batch_size
    lg = Log.open(root / "bench-0", LogConfig())
    now = int(time.time() * 1000)

    t0 = time.perf_counter()
    for _ in range(n):
        lg.append(buf, headers, leader_epoch=0, now_ms=now)
    t1 = time.perf_counter()
    lg.flush()
    t2 = time.perf_counter()
    total = n * batch_size
    out["batches"] = n
    out["batch_bytes"] = batch_size
    out["append_mb_s"] = total / MIB / (t1 - t0)
    out["append_us"] = (t1 - t0) / n * 1e6
    out["flush_s"] = t2 - t1
    out["segments"] = len(lg.segments)

    t0 = time.perf_counter()
    offset, read_bytes, reads = 0, 0, 0
    leo = lg.log_end_offset
    while offset < leo:
        res = lg.read(offset, MIB)
        read_bytes += res.size
        reads += 1
        offset = res.first_offset + 16 * (res.size // batch_size)  # type: ignore[operator]
    t1 = time.perf_counter()
    assert read_bytes == total, (read_bytes, total)
    out["read_mb_s"] = read_bytes / MIB / (t1 - t0)
    out["read_us"] = (t1 - t0) / reads * 1e6

    # random-offset 1 MiB reads (index lookup + scan + pread)
    import random

    rnd = random.Random(1)
    k = 2000
    t0 = time.perf_counter()
    for _ in range(k):
        lg.read(rnd.randrange(leo), MIB)
    out["random_read_us"] = (time.perf_counter() - t0) / k * 1e6

    t0 = time.perf_counter()
    hit = lg.offset_for_timestamp(headers[0].max_timestamp)
    out["offset_for_timestamp_us"] = (time.perf_counter() - t0) * 1e6
    assert hit is not None
    lg.close()

    # tiny appends: per-call overhead of the produce path's storage step
    small = bytearray(rb.build_batch([(b"k", b"v" * 100)], timestamp_ms=now))
    sh = list(rb.iter_headers(small))
    lg = Log.open(root / "small-0", LogConfig())
    m = 200_000
    t0 = time.perf_counter()
    for _ in range(m):
        lg.append(small, sh, leader_epoch=0, now_ms=now)
    out["small_append_us"] = (time.perf_counter() - t0) / m * 1e6
    lg.close()

    t0 = time.perf_counter()
    lg = Log.open(root / "bench-0", LogConfig(), clean_shutdown=True)
    out["reopen_clean_ms"] = (time.perf_counter() - t0) * 1000
    lg.close()
    t0 = time.perf_counter()
    lg = Log.open(root / "bench-0", LogConfig(), clean_shutdown=False, recovery_point=0)
    out["recover_s"] = time.perf_counter() - t0
    assert lg.log_end_offset == leo
    lg.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=500)
    ap.add_argument("--dir", type=Path, default=None, help="parent dir for the temp log (default: system temp)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=args.dir))
    try:
        r = bench(args.mib, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [
        "# storage_bench",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        f"- data: {args.mib} MiB as {int(r['batches'])} batches of {int(r['batch_bytes'])} B "
        f"(16 x 1 KiB records), segment.bytes 1 GiB -> {int(r['segments'])} segments",
        "- reads hit the page cache (the data was just written); no fsync during appends",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| append throughput | {r['append_mb_s']:.0f} MB/s ({r['append_us']:.1f} µs per 16 KiB batch) |",
        f"| final flush (fsync) | {r['flush_s']:.2f} s |",
        f"| sequential read throughput (1 MiB reads) | {r['read_mb_s']:.0f} MB/s ({r['read_us']:.0f} µs per read) |",
        f"| random-offset 1 MiB read | {r['random_read_us']:.0f} µs |",
        f"| offset_for_timestamp | {r['offset_for_timestamp_us']:.0f} µs |",
        f"| tiny append (1 record, 100 B) | {r['small_append_us']:.1f} µs per call |",
        f"| reopen after clean shutdown | {r['reopen_clean_ms']:.1f} ms |",
        f"| reopen after a crash (CRC scan + index rebuild of all {args.mib} MiB) | {r['recover_s']:.2f} s"
        f" ({args.mib / r['recover_s']:.0f} MiB/s) |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / "storage_bench.md").write_text(text)


if __name__ == "__main__":
    main()
