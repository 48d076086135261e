"""CPU and wall-clock accounting for one benchmark measurement.

On a 2-core machine the load generator, the broker and anything else running share the CPU, so a
throughput figure means little without knowing who used the cores. A :class:`Meter` snapshots, at
the start and end of a measured phase:

- wall time (``perf_counter``);
- the client process's CPU (all threads, i.e. Python plus librdkafka's threads) and the Python main
  thread's own CPU (``thread_time``): main-thread CPU ≈ wall means the Python loop is saturated;
- the CPU of extra client processes (e.g. the latency consumer) and of the broker process, from /proc;
- the whole machine's busy CPU from /proc/stat, so "other" = machine − client − broker shows
  interference from unrelated processes.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int | None) -> float | None:
    """user+system CPU seconds of a process and its reaped children (None if unknown)."""
    if pid is None:
        return None
    try:
        return _stat_cpu(Path(f"/proc/{pid}/stat"))
    except OSError:
        return None


def _stat_cpu(stat: Path) -> float:
    """utime + stime of a /proc stat file (a process's or a thread's), in seconds."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    # After the ")" the fields are numbered from 3 (state); utime/stime are 14/15 -> index 11/12.
    return (int(fields[11]) + int(fields[12])) / _TICK


def thread_cpu(pid: int | None) -> dict[int, tuple[str, float]]:
    """user+system CPU seconds of each live thread of a process: tid -> (thread name, seconds).
    The event loop's thread is the one whose tid is the pid; the rest are executor, storage and
    gRPC (etcd client) threads."""
    out: dict[int, tuple[str, float]] = {}
    if pid is None:
        return out
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            out[tid] = (Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip(),
                        _stat_cpu(Path(f"/proc/{pid}/task/{tid}/stat")))
        except OSError:
            continue
    return out


def machine_busy() -> float:
    """CPU-seconds all cores spent not idle since boot (from the aggregate line of /proc/stat)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    values = [int(v) for v in parts[:8]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return (sum(values) - idle) / _TICK


@dataclass
class Usage:
    """CPU use during one phase; every figure in CPU-seconds except ``wall``."""

    wall: float
    client_cpu: float          # client process, all threads (+ helper processes)
    client_main_cpu: float     # the Python thread that drives the client API
    broker_cpu: float | None
    machine_cpu: float         # all processes, all cores
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def other_cpu(self) -> float:
        return max(0.0, self.machine_cpu - self.client_cpu - (self.broker_cpu or 0.0))

    def share(self, cpu: float | None) -> float | None:
        """CPU-seconds as a fraction of one core over the wall time (1.0 = one core busy)."""
        return None if cpu is None or self.wall <= 0 else cpu / self.wall

    def to_dict(self) -> dict[str, float | None]:
        d = asdict(self)
        d["other_cpu"] = self.other_cpu
        return d


class Meter:
    """``with Meter(broker_pid) as m: ...`` then ``m.usage``; helper pids may be added while running."""

    def __init__(self, broker_pid: int | None, helper_pids: tuple[int, ...] = ()) -> None:
        self.broker_pid = broker_pid
        self.helper_pids = list(helper_pids)
        self.usage: Usage | None = None

    def _helpers(self) -> float:
        return sum(process_cpu(p) or 0.0 for p in self.helper_pids)

    def start(self) -> Meter:
        self._t0 = time.perf_counter()
        self._c0 = time.process_time()
        self._m0 = time.thread_time()
        self._h0 = self._helpers()
        self._b0 = process_cpu(self.broker_pid)
        self._x0 = machine_busy()
        return self

    def stop(self) -> Usage:
        wall = time.perf_counter() - self._t0
        client = time.process_time() - self._c0 + self._helpers() - self._h0
        main = time.thread_time() - self._m0
        b1 = process_cpu(self.broker_pid)
        broker = None if b1 is None or self._b0 is None else b1 - self._b0
        self.usage = Usage(wall, client, main, broker, machine_busy() - self._x0)
        return self.usage

    def __enter__(self) -> Meter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
