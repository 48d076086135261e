"""The floor of replication's CPU cost on this machine: what moving the bytes costs the kernel, with
no broker around it (issue 31's "brokers' CPU per MB, RF=3 / single node" target).

    .venv/bin/python benchmarks/replication_floor.py [--mb 2000] [--rounds 3] [--dir /tmp]
        [--single-ms 0.9] [--out benchmarks/results]

A replicated write costs, whatever broker does it:
- **receive + write** (a single node's floor, and each follower's): ``recv_into`` 1 MiB frames
  from a loopback TCP socket into a fresh buffer, check a CRC-32C over it (Kafka's followers check
  every batch's CRC), ``write`` it to a log file on ``--dir``'s file system;
- **send** (the leader's extra per follower): ``sendfile`` of 1 MiB pieces of a page-cached file to a
  loopback TCP socket, as the leader serves a follower's fetch.

The receiver deletes its file every 256 MiB and writes the next into the pages just freed. A broker
keeps its log, so its writes take pages the kernel has not used lately; on this VM such a page can
be one the host has taken back (free page reporting, benchmarks/lib_page_cache.py), and faulting it
in again costs far more than the copy. ``--page-cache-mb`` measures that apart: the CPU of writing
that many MB to a new file right after deleting one as large (pages reused), and again after the
guest has had ``--settle-s`` seconds to hand the freed pages back (pages new to the VM).

Two processes, a sender and a receiver, move ``--mb`` MB; each one's user+system CPU is divided by
the MB moved. The floor of the RF=3 / single-node ratio is then
``(S + 2 x send + 2 x receive) / S`` where S is the single node's measured CPU per MB
(``--single-ms``, from cluster_bench / profile_broker): RF=3 receives and writes every byte three
times, and the leader sends it twice. Bounded in bytes and in time (60 s per round at most).
The figures are printed and written to ``replication_floor.md`` / ``.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from multiprocessing import Process, Queue
from pathlib import Path

import crc32c

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib_page_cache import mem_free_mb, reported_mb  # noqa: E402

CHUNK = 1 << 20
SEGMENT = 256 << 20  # the receiver starts a new file after this much, so the disk use stays bounded
ROUND_LIMIT_S = 60.0


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _receiver(port_q: Queue, out_q: Queue, directory: str, total: int) -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    c0 = _cpu()
    got = written = 0
    path = Path(directory) / "floor.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    deadline = time.monotonic() + ROUND_LIMIT_S
    while got < total and time.monotonic() < deadline:
        buf = bytearray(CHUNK)  # a broker reads each frame into a new buffer
        view = memoryview(buf)
        n = 0
        while n < CHUNK:
            k = conn.recv_into(view[n:])
            if not k:
                break
            n += k
        if not n:
            break
        crc32c.crc32c(view[:n])
        os.write(fd, view[:n])
        got += n
        written += n
        if written >= SEGMENT:  # roll: a fresh file, the old one deleted (bounded disk use)
            os.close(fd)
            os.unlink(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            written = 0
    cpu = _cpu() - c0
    os.close(fd)
    os.unlink(path)
    conn.close()
    out_q.put(("receive", got, cpu))


def _sender(port: int, out_q: Queue, directory: str, total: int) -> None:
    src = Path(directory) / "floor.src"
    src.write_bytes(os.urandom(64 * CHUNK))  # 64 MiB, page-cached: the leader's recent log
    fd = os.open(src, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    c0 = _cpu()
    sent = 0
    deadline = time.monotonic() + ROUND_LIMIT_S
    while sent < total and time.monotonic() < deadline:
        offset = sent % (64 * CHUNK)
        n = 0
        while n < CHUNK:
            n += os.sendfile(sock.fileno(), fd, offset + n, CHUNK - n)
        sent += n
    cpu = _cpu() - c0
    sock.shutdown(socket.SHUT_WR)
    sock.close()
    os.close(fd)
    src.unlink()
    out_q.put(("send", sent, cpu))


def _write_new_file(path: Path, mb: int) -> float:
    """CPU seconds to write ``mb`` MiB to a new file (not synced: the page-cache copy only)."""
    zeros = bytes(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    c0 = _cpu()
    try:
        for _ in range(mb):
            os.write(fd, zeros)
        return _cpu() - c0
    finally:
        os.close(fd)


def page_cache_write_cost(directory: str, mb: int, settle_s: float) -> dict[str, float]:
    """CPU-ms per MB of page-cache writes into pages just freed, and into pages left free long
    enough for the guest to return them to the host."""
    path = Path(directory) / "page-cache.probe"
    free = mem_free_mb()
    _write_new_file(path, mb)
    path.unlink()
    reused = _write_new_file(path, mb)
    path.unlink()
    before = reported_mb()
    time.sleep(settle_s)
    reported = reported_mb()
    new = _write_new_file(path, mb)
    path.unlink()
    mb_ = mb * CHUNK / 1e6
    return {"reused": reused * 1000 / mb_, "new": new * 1000 / mb_, "mem_free_mb": free,
            "reported_mb": (reported - before) if reported is not None and before is not None else -1}


def one_round(directory: str, total: int) -> dict[str, float]:
    port_q: Queue = Queue()
    out_q: Queue = Queue()
    recv = Process(target=_receiver, args=(port_q, out_q, directory, total))
    recv.start()
    port = port_q.get(timeout=30)
    send = Process(target=_sender, args=(port, out_q, directory, total))
    t0 = time.monotonic()
    send.start()
    results = {}
    for _ in range(2):
        kind, nbytes, cpu = out_q.get(timeout=ROUND_LIMIT_S + 60)
        results[kind] = cpu * 1000 / (nbytes / 1e6)
        results[f"{kind}_mb"] = nbytes / 1e6
    results["mb_s"] = results["receive_mb"] / (time.monotonic() - t0)
    send.join(30)
    recv.join(30)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=2000, help="MB moved per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the receiver writes (the log dirs' file system)")
    ap.add_argument("--single-ms", type=float, default=None,
                    help="a single node's broker CPU-ms per MB, to print the RF=3 / single floor")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--page-cache-mb", type=int, default=1000,
                    help="MB written to measure the page cache's first-write cost (0: skip)")
    ap.add_argument("--settle-s", type=float, default=8.0,
                    help="seconds left to the guest to hand freed pages back to the host")
    args = ap.parse_args()
    rounds = []
    cache: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kbroker-floor-", dir=args.dir) as tmp:
        if args.page_cache_mb:
            cache = page_cache_write_cost(tmp, args.page_cache_mb, args.settle_s)
            print(f"page cache, {args.page_cache_mb} MB: reused pages {cache['reused']:.3f} CPU-ms/MB, pages new to "
                  f"the VM {cache['new']:.3f} (MemFree {cache['mem_free_mb']} MB, handed back to the host meanwhile "
                  f"{cache['reported_mb']} MB)")
        for i in range(args.rounds):
            r = one_round(tmp, args.mb * 1_000_000)
            r["load"] = os.getloadavg()[0]
            rounds.append(r)
            print(f"round {i + 1}: {r['mb_s']:.0f} MB/s; receive+crc+write {r['receive']:.3f} CPU-ms/MB, "
                  f"sendfile {r['send']:.3f} CPU-ms/MB (load {r['load']:.2f})")
    recv = statistics.median(r["receive"] for r in rounds)
    send = statistics.median(r["send"] for r in rounds)
    lines = ["# replication_floor: what moving replicated bytes costs the kernel on this machine\n",
             f"`benchmarks/replication_floor.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} CPUs, {args.rounds} rounds of {args.mb} MB, receiver writing to {args.dir}.\n",
             "| round | MB/s | receive + CRC-32C + write, CPU-ms/MB | sendfile, CPU-ms/MB | load |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {i + 1} | {r['mb_s']:.0f} | {r['receive']:.3f} | {r['send']:.3f} | {r['load']:.2f} |"
              for i, r in enumerate(rounds)]
    lines.append(f"\nMedians: receive + CRC + write **{recv:.3f}**, send **{send:.3f}** CPU-ms per MB.")
    out = {"rounds": rounds, "receive_ms_per_mb": recv, "send_ms_per_mb": send, "page_cache": cache}
    if cache:
        lines.append(f"\nPage cache, writing {args.page_cache_mb} MB to a new file (MemFree {cache['mem_free_mb']} MB at "
                     f"the start): into pages just freed **{cache['reused']:.3f}** CPU-ms per MB; after "
                     f"{args.settle_s:.0f} s idle, in which the guest handed {cache['reported_mb']} MB back to the "
                     f"host, **{cache['new']:.3f}**. The rounds above reuse their pages; a broker's log on a VM "
                     "with memory free pays the second figure for each byte each replica writes.")
    print(f"medians: receive+crc+write {recv:.3f}, send {send:.3f} CPU-ms per MB")
    if args.single_ms:
        s = args.single_ms
        floor = (s + 2 * send + 2 * recv) / s
        out |= {"single_ms_per_mb": s, "rf3_floor_ms_per_mb": s + 2 * send + 2 * recv, "ratio_floor": floor}
        text = (f"With a single node at {s:.2f} CPU-ms per MB (given), RF=3 costs at least "
                f"{s:.2f} + 2 x {send:.3f} + 2 x {recv:.3f} = {s + 2 * send + 2 * recv:.2f} CPU-ms per MB: "
                f"a floor of **{floor:.2f}** for the RF=3 / single-node ratio.")
        print(text)
        lines.append("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replication_floor.md").write_text("\n".join(lines) + "\n")
    (args.out / "replication_floor.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
