"""Produce acks=all for 60 s on a disk-backed log dir, second by second (issue 32, item 4).

    .venv/bin/python benchmarks/disk_steady_bench.py [--before /work/main] [--rounds 3] [--seconds 60]
        [--null-seconds 30] [--data-dir /var/tmp] [--out benchmarks/results]

One producer (confluent-kafka, acks=all, 1 KiB random values, linger.ms=5, batch.size=1 MiB, 4
partitions: bench.py's produce settings) writes to a fresh kbroker for ``--seconds`` (and at most
``--max-records``), then flushes. A sampler thread records, every second:

- the records acknowledged in that second (``produced - len(producer)``: with
  delivery.report.only.error nothing else is queued, so this is exact without a Python callback
  per record), as MB/s of values;
- the broker's CPU (cores), the whole machine's busy CPU (cores) and the 1-minute load average, so
  a dip caused by the other processes on a shared machine shows as such;
- the broker's event-loop lag (kbroker_event_loop_lag_seconds from its Prometheus endpoint: how late
  a 0.5 s timer fired, last sample; a stall of the loop shows here, a busy machine less so);
- the disk: MB written by the device (/proc/diskstats, the whole device, neighbours included), cache
  flush requests to it (fsyncs and journal commits), the broker's own write_bytes (/proc/PID/io), and
  the machine's Dirty and Writeback pages (/proc/meminfo);
- the segment files of the log dir: rolls (a new ``.log``), retention deletes (a ``.deleted`` rename)
  and unlinks (a ``.deleted`` gone).

With ``--before TREE`` every round runs the broker of that tree ("before", read-only, e.g. /work/main)
and of this tree ("after") in an order that flips every round; the first round is a warm-up. The
null broker (null_broker.py, stores nothing) is measured with the same client first, as the ceiling.

Disk use is bounded: the topic keeps ``--retention-bytes`` per partition (retention checked every
``--retention-check-ms``, deleted files removed after ``--delete-delay-ms``), so a 60 s run at
~700 MB/s holds ~15 GB at most; every data dir is removed after its run. Writes a Markdown report,
a PNG chart and the raw samples (JSON) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import confluent_kafka  # noqa: E402
import lib_workloads as wl  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from consume_paired import TreeBroker  # noqa: E402
from lib_meter import machine_busy, process_cpu  # noqa: E402
from lib_workloads import PARTITIONS, WorkloadError, unique  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402

from tests.helpers.broker_proc import free_port  # noqa: E402

MB = 1e6
SECTOR = 512
_TICK = os.sysconf("SC_CLK_TCK")


# -- machine and process counters ---------------------------------------------------------------------
def fs_type(path: Path) -> tuple[str, str]:
    """(filesystem type, source device) of the mount holding ``path``."""
    path = path.resolve()
    best = ("", "?", "?")
    with open("/proc/mounts") as f:
        for line in f:
            src, mnt, typ = line.split()[:3]
            if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[0]):
                best = (mnt, typ, src)
    return best[1], best[2]


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("Dirty", "Writeback", "MemFree", "Cached"):
                out[k] = int(v.split()[0]) * 1024
    return out


def diskstats(dev: tuple[int, int]) -> tuple[int, int]:
    """(bytes written, cache flush requests completed) of the block device ``dev`` (major, minor)."""
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if (int(p[0]), int(p[1])) == dev:
                flushes = int(p[17]) if len(p) > 17 else 0
                return int(p[9]) * SECTOR, flushes
    return 0, 0


def proc_write_bytes(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def loop_lag(url: str | None) -> float | None:
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=0.5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("kbroker_event_loop_lag_seconds "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def segment_files(data: Path | None) -> tuple[set[str], set[str]]:
    """(``.log`` files, ``.deleted`` files) of the benchmark topic's partition dirs, as 'dir/name'."""
    logs: set[str] = set()
    deleted: set[str] = set()
    if data is None:
        return logs, deleted
    try:
        dirs = [e for e in os.scandir(data) if e.is_dir() and e.name.startswith("steady-")]
        for d in dirs:
            for e in os.scandir(d.path):
                if e.name.endswith(".log"):
                    logs.add(f"{d.name}/{e.name}")
                elif e.name.endswith(".log.deleted"):  # one per segment (its indexes are renamed too)
                    deleted.add(f"{d.name}/{e.name}")
    except OSError:
        pass
    return logs, deleted


def thread_sys(pid: int | None) -> float:
    """System (kernel) CPU seconds of the thread ``pid``: write() copying into the page cache,
    allocating its pages and blocks, the network stack ..."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{os.getpid() if pid == threading.get_native_id() else pid}/task/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[12]) / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


def machine_steal() -> float:
    """CPU seconds the hypervisor gave to others (steal) since boot, all cores."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    return int(parts[8]) / _TICK if len(parts) > 8 else 0.0


def schedstat(pid: int | None) -> tuple[float, float]:
    """(seconds on CPU, seconds runnable but waiting for a CPU) of the thread ``pid`` (the broker's
    event loop is its main thread, tid = pid)."""
    if pid is None:
        return 0.0, 0.0
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


class BlockProbe(threading.Thread):
    """20 times a second: is the broker's event-loop thread in uninterruptible sleep (state D: blocked
    in the kernel, on disk I/O, a page lock, the journal ...) and where (its wchan). Per second it
    gives the fraction of samples blocked and the most frequent wait channel."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.lock = threading.Lock()
        self.samples = 0
        self.blocked: dict[str, int] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        if self.pid is None:
            return
        stat, wchan = f"/proc/{self.pid}/task/{self.pid}/stat", f"/proc/{self.pid}/task/{self.pid}/wchan"
        while not self.stop_event.wait(0.05):
            try:
                with open(stat) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                where = ""
                if state == "D":
                    with open(wchan) as f:
                        where = f.read().strip() or "?"
            except OSError:
                return
            with self.lock:
                self.samples += 1
                if where:
                    self.blocked[where] = self.blocked.get(where, 0) + 1

    def take(self) -> tuple[float, str]:
        with self.lock:
            n, blocked = self.samples, self.blocked
            self.samples, self.blocked = 0, {}
        if not n:
            return 0.0, ""
        top = max(blocked, key=blocked.__getitem__) if blocked else ""
        return sum(blocked.values()) / n, top


class Sampler(threading.Thread):
    """Once a second: acknowledged records and the machine/broker/disk counters (see the module doc)."""

    def __init__(self, producer: Producer, counter: list[int], size: int, broker_pid: int | None,
                 metrics_url: str | None, data: Path | None, dev: tuple[int, int]) -> None:
        super().__init__(daemon=True)
        self.producer, self.counter, self.size = producer, counter, size
        self.pid, self.url, self.data, self.dev = broker_pid, metrics_url, data, dev
        self.samples: list[dict[str, Any]] = []
        self.stop_event = threading.Event()
        self.probe = BlockProbe(broker_pid)
        self.t0 = time.monotonic()

    def snapshot(self) -> dict[str, Any]:
        dw, fl = diskstats(self.dev)
        logs, deleted = segment_files(self.data)
        run, wait = schedstat(self.pid)
        return {"t": time.monotonic(), "acked": self.counter[0] - len(self.producer), "loop_run": run,
                "loop_wait": wait, "loop_sys": thread_sys(self.pid), "steal": machine_steal(),
                "broker_cpu": process_cpu(self.pid) or 0.0, "machine_cpu": machine_busy(),
                "disk_bytes": dw, "disk_flushes": fl, "broker_write": proc_write_bytes(self.pid),
                "logs": logs, "deleted": deleted}

    def run(self) -> None:
        self.probe.start()
        try:
            self._run()
        finally:
            self.probe.stop_event.set()

    def _run(self) -> None:
        prev = self.snapshot()
        self.probe.take()
        k = 1
        while not self.stop_event.wait(max(0.0, self.t0 + k - time.monotonic())):
            cur = self.snapshot()
            dt = cur["t"] - prev["t"]
            mem = meminfo()
            new_logs = cur["logs"] - prev["logs"]
            blocked, wchan = self.probe.take()
            self.samples.append({
                "second": k,
                "mb_per_s": (cur["acked"] - prev["acked"]) * self.size / dt / MB,
                "broker_cores": (cur["broker_cpu"] - prev["broker_cpu"]) / dt,
                "machine_cores": (cur["machine_cpu"] - prev["machine_cpu"]) / dt,
                "load1": os.getloadavg()[0],
                # the event-loop thread: on CPU, waiting for a CPU (neighbours), blocked in the kernel
                "loop_on_cpu": (cur["loop_run"] - prev["loop_run"]) / dt,
                "loop_cpu_wait": (cur["loop_wait"] - prev["loop_wait"]) / dt,
                "loop_sys": (cur["loop_sys"] - prev["loop_sys"]) / dt,
                "steal_cores": (cur["steal"] - prev["steal"]) / dt,
                "loop_blocked": blocked, "loop_wchan": wchan,
                "loop_lag_ms": None if (lag := loop_lag(self.url)) is None else lag * 1e3,
                "disk_write_mb_s": (cur["disk_bytes"] - prev["disk_bytes"]) / dt / MB,
                "disk_flushes": cur["disk_flushes"] - prev["disk_flushes"],
                "broker_write_mb_s": (cur["broker_write"] - prev["broker_write"]) / dt / MB,
                "dirty_mb": mem.get("Dirty", 0) / MB,
                "writeback_mb": mem.get("Writeback", 0) / MB,
                "free_mb": mem.get("MemFree", 0) / MB,
                # the first .log of each partition is its creation, not a roll
                "rolls": sum(1 for n in new_logs if not n.endswith("/" + "0" * 20 + ".log")),
                "deletes": len(cur["deleted"] - prev["deleted"]),
                "unlinks": len(prev["deleted"] - cur["deleted"]),
            })
            prev = cur
            k += 1


def create_topic(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    """lib_workloads.create_topic with topic configs: create, then wait for every partition's leader."""
    wl.create_topic(bootstrap, topic, PARTITIONS, config)


# -- one run ------------------------------------------------------------------------------------------
def produce_run(bootstrap: str, pid: int | None, *, seconds: float, max_records: int, size: int,
                metrics_url: str | None, data: Path | None, dev: tuple[int, int],
                topic_config: dict[str, str]) -> dict[str, Any]:
    topic = unique("steady")
    create_topic(bootstrap, topic, config=topic_config)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
        "compression.type": "none", "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2 * 1024 * 1024, "delivery.report.only.error": True,
        "on_delivery": on_delivery,
    })
    value = os.urandom(size)
    for _ in range(100):  # warm-up outside the measurement: connections, metadata
        p.produce(topic, value)
    if p.flush(30) or errors:
        raise WorkloadError(f"warm-up failed: {errors[:3]}")
    counter = [0]
    sampler = Sampler(p, counter, size, pid, metrics_url, data, dev)
    produce, poll = p.produce, p.poll
    sampler.start()
    end = sampler.t0 + seconds
    n = 0
    mono = time.monotonic
    while n < max_records:
        try:
            produce(topic, value)
        except BufferError:
            poll(0.005)
            if mono() >= end:
                break
            continue
        n += 1
        counter[0] = n
        if n & 0x3FF == 0:
            poll(0)
            if mono() >= end:
                break
    # The sampler's last whole second ends at `seconds`; wait for it, then drain the queue.
    while len(sampler.samples) < int(seconds) and sampler.is_alive() and mono() < end + 5:
        poll(0.05)
    sampler.stop_event.set()
    sampler.join(5)
    left = p.flush(120)
    if left or errors:
        raise WorkloadError(f"{left} undelivered, errors {errors[:3]}")
    samples = sampler.samples[: int(seconds)]
    rates = [s["mb_per_s"] for s in samples]
    return {"topic": topic, "records": n, "samples": samples,
            "mb_per_s": statistics.fmean(rates) if rates else 0.0,
            "median_s": statistics.median(rates) if rates else 0.0,
            "min_s": min(rates) if rates else 0.0}


def run_kbroker(tree: Path, args: argparse.Namespace, dev: tuple[int, int]) -> dict[str, Any]:
    parent = Path(tempfile.mkdtemp(prefix="disk-steady-", dir=args.data_dir))
    data = parent / "data"
    mport = free_port()
    overrides = {
        "num.partitions": str(PARTITIONS),
        "kbroker.prometheus.listener": f"http://127.0.0.1:{mport}",
        "log.retention.check.interval.ms": str(args.retention_check_ms),
        "log.segment.delete.delay.ms": str(args.delete_delay_ms),
    }
    b = TreeBroker(tree, data, overrides=overrides)
    try:
        b.start(60)
        pid = b.proc.pid if b.proc else None
        res = produce_run(b.bootstrap, pid, seconds=args.seconds, max_records=args.max_records, size=args.size,
                          metrics_url=f"http://127.0.0.1:{mport}/metrics", data=data, dev=dev,
                          topic_config={"retention.bytes": str(args.retention_bytes)})
    finally:
        try:
            b.stop()
        finally:
            b.kill()
            subprocess.run(["rm", "-rf", str(parent)], check=False)
    return res


def run_null(args: argparse.Namespace, dev: tuple[int, int]) -> dict[str, Any]:
    n = NullBrokerProcess(value_size=args.size)
    n.start()
    try:
        return produce_run(n.bootstrap, n.pid, seconds=args.null_seconds, max_records=args.max_records,
                           size=args.size, metrics_url=None, data=None, dev=dev, topic_config={})
    finally:
        n.stop()


def line(name: str, res: dict[str, Any]) -> str:
    s = res["samples"]
    load = statistics.fmean(x["load1"] for x in s) if s else 0
    other = statistics.fmean(max(0.0, x["machine_cores"] - x["broker_cores"]) for x in s) if s else 0
    lag = max((x["loop_lag_ms"] or 0) for x in s) if s else 0
    wait = statistics.fmean(x["loop_cpu_wait"] for x in s) if s else 0
    blocked = statistics.fmean(x["loop_blocked"] for x in s) if s else 0
    return (f"{name:<7} loop waits for CPU {wait:.2f} blocked {blocked:.2f} of the time; mean {res['mb_per_s']:6.1f} MB/s  median second {res['median_s']:6.1f}  "
            f"min second {res['min_s']:6.1f}  rolls {sum(x['rolls'] for x in s)}  deletes "
            f"{sum(x['deletes'] for x in s)}  max loop lag {lag:.0f} ms  load {load:.2f}  "
            f"machine-minus-broker {other:.2f} cores")


# -- report -------------------------------------------------------------------------------------------
def chart(results: dict[str, Any], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceiling = results["null"]["mb_per_s"] if results.get("null") else None
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    colors = {"before": "tab:red", "after": "tab:blue"}
    for rnd, runs in enumerate(results["rounds"]):
        for name, res in runs.items():
            xs = [s["second"] for s in res["samples"]]
            style = ":" if rnd == 0 else "-"
            label = f"{name} round {rnd + 1}{' (warm-up)' if rnd == 0 else ''}"
            axes[0].plot(xs, [s["mb_per_s"] for s in res["samples"]], style, color=colors.get(name, "k"),
                         alpha=0.45 + 0.5 * (rnd == len(results["rounds"]) - 1), label=label, lw=1.2)
            axes[1].plot(xs, [s["dirty_mb"] for s in res["samples"]], style, color=colors.get(name, "k"),
                         alpha=0.6, lw=1)
            axes[2].plot(xs, [s["broker_cores"] for s in res["samples"]], style, color=colors.get(name, "k"),
                         alpha=0.6, lw=1)
            axes[2].plot(xs, [s["machine_cores"] for s in res["samples"]], "--", color=colors.get(name, "k"),
                         alpha=0.3, lw=1)
    if results.get("null"):
        s = results["null"]["samples"]
        axes[0].plot([x["second"] for x in s], [x["mb_per_s"] for x in s], color="tab:gray", lw=1,
                     label="null broker (ceiling)")
    if ceiling:
        axes[0].axhline(0.7 * ceiling, color="tab:green", ls="--", lw=1, label=f"0.7 × ceiling ({0.7 * ceiling:.0f})")
    axes[0].set_ylabel("acked MB/s (values)")
    axes[0].set_title("produce acks=all, 1 KiB, 4 partitions, disk-backed: per second")
    axes[0].legend(fontsize=7, ncol=2, loc="lower left")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylabel("Dirty pages, MB (machine)")
    axes[1].set_ylim(bottom=0)
    axes[2].set_ylabel("cores: broker (solid),\nmachine (dashed)")
    axes[2].set_xlabel("second of the run")
    axes[2].set_ylim(0, (os.cpu_count() or 2) + 0.1)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    name = "disk_steady.png"
    fig.savefig(out / name, dpi=100)
    plt.close(fig)
    return name


def summary_rows(results: dict[str, Any]) -> list[str]:
    ceiling = results["null"]["mb_per_s"] if results.get("null") else None
    rows = ["| round | tree | mean MB/s | fraction of ceiling | median second | slowest second | seconds < 0.7×ceiling "
            "| rolls / deletes / unlinks | max loop lag ms | loop blocked in the kernel: mean / worst second "
            "| loop waiting for a CPU (mean) | mean load1 | mean machine cores busy |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for rnd, runs in enumerate(results["rounds"]):
        for name, res in runs.items():
            s = res["samples"]
            frac = f"{res['mb_per_s'] / ceiling:.2f}" if ceiling else "-"
            below = sum(1 for x in s if ceiling and x["mb_per_s"] < 0.7 * ceiling) if ceiling else "-"
            lag = max((x["loop_lag_ms"] or 0) for x in s) if s else 0
            rows.append(
                f"| {rnd + 1}{' (warm-up)' if rnd == 0 else ''} | {name} | {res['mb_per_s']:.0f} | {frac} | "
                f"{res['median_s']:.0f} | {res['min_s']:.0f} | {below} | "
                f"{sum(x['rolls'] for x in s)} / {sum(x['deletes'] for x in s)} / {sum(x['unlinks'] for x in s)} | "
                f"{lag:.0f} | {statistics.fmean(x['loop_blocked'] for x in s):.3f} / "
                f"{max(x['loop_blocked'] for x in s):.2f} | {statistics.fmean(x['loop_cpu_wait'] for x in s):.2f} | "
                f"{statistics.fmean(x['load1'] for x in s):.2f} | "
                f"{statistics.fmean(x['machine_cores'] for x in s):.2f} |")
    return rows


def per_second_table(res: dict[str, Any]) -> list[str]:
    rows = ["| s | MB/s | broker cores | machine cores | load1 | steal | loop on CPU (of it kernel) / waiting for CPU / blocked (wchan) "
            "| loop lag ms | disk write MB/s | broker write MB/s | Dirty MB | Writeback MB | flushes | rolls | deletes "
            "| unlinks |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in res["samples"]:
        lag = "-" if x["loop_lag_ms"] is None else f"{x['loop_lag_ms']:.0f}"
        loop = (f"{x['loop_on_cpu']:.2f} ({x.get('loop_sys', 0):.2f} sys) / {x['loop_cpu_wait']:.2f} / "
                f"{x['loop_blocked']:.2f}")
        if x["loop_wchan"]:
            loop += f" ({x['loop_wchan']})"
        rows.append(f"| {x['second']} | {x['mb_per_s']:.0f} | {x['broker_cores']:.2f} | {x['machine_cores']:.2f} | "
                    f"{x['load1']:.2f} | {x.get('steal_cores', 0):.2f} | {loop} | {lag} | {x['disk_write_mb_s']:.0f} | {x['broker_write_mb_s']:.0f} | "
                    f"{x['dirty_mb']:.0f} | {x['writeback_mb']:.0f} | {x['disk_flushes']} | {x['rolls']} | "
                    f"{x['deletes']} | {x['unlinks']} |")
    return rows


def write_report(results: dict[str, Any], out: Path, notes: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "disk_steady.json").write_text(json.dumps(results, indent=1))
    img = chart(results, out)
    m = results["meta"]
    null = results.get("null")
    lines = [
        "# Produce acks=all on a disk-backed log dir, second by second",
        "",
        f"`benchmarks/disk_steady_bench.py` — {m['date']}, commit {m['commit']}, {m['host']}, "
        f"confluent-kafka {m['confluent_kafka']} (librdkafka {m['librdkafka']}).",
        f"Log dir on `{m['fs']}` ({m['device']}); {m['seconds']} s per run, 1 KiB values, acks=all, linger.ms=5, "
        f"batch.size=1 MiB, 4 partitions; topic retention.bytes={m['retention_bytes']} per partition, "
        f"log.retention.check.interval.ms={m['retention_check_ms']}, log.segment.delete.delay.ms="
        f"{m['delete_delay_ms']}, all else Kafka's defaults (segment.bytes 1 GiB, no flush.messages/flush.ms).",
        f"Trees: before = `{m['before']}`, after = `{m['after']}`; rounds alternate the order, round 1 is a warm-up.",
        "",
    ]
    if null:
        lines.append(f"Null broker (the ceiling, same client, {len(null['samples'])} s): mean "
                     f"**{null['mb_per_s']:.0f} MB/s**, median second {null['median_s']:.0f}, slowest second "
                     f"{null['min_s']:.0f}.")
        lines.append("")
    lines += summary_rows(results)
    if results.get("write_path"):
        lines += ["", "The storage write path alone (`Log.append` of 1 MiB batches in the benchmark process, no broker, "
                  "no client; alternating runs into fresh logs):", "",
                  "| run | write-behind | MB/s | kernel ms per MB (write()) | Dirty max MB | load1 |", "|---|---|---|---|---|---|"]
        for i, r in enumerate(results["write_path"]):
            lines.append(f"| {i + 1} | {'on' if r['write_behind'] else 'off'} | {r['mb_per_s']:.0f} | "
                         f"{r['sys_ms_per_mb']:.2f} | {r['dirty_max_mb']:.0f} | {r['load1']:.2f} |")
    lines += ["", f"![per-second throughput]({img})", ""]
    if notes:
        lines += [notes, ""]
    last = results["rounds"][-1]
    for name, res in last.items():
        lines += [f"## Per second: {name}, round {len(results['rounds'])}", ""] + per_second_table(res) + [""]
    path = out / "disk_steady.md"
    path.write_text("\n".join(lines))
    return path


def write_path(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The storage write path alone, in this process, without broker or client: storage.log.Log.append
    of ~1 MiB batches (1 KiB values) for ``--write-path-seconds``, with storage.write_behind on and
    off alternately, each run into a fresh log that is deleted afterwards. Measures MB/s, and the
    kernel CPU per MB of the appending thread (write(): page-cache allocation and copy), which is
    the event loop's share of a produce that the broker cannot make cheaper by itself."""
    import shutil

    from storage import batch as rb
    from storage import write_behind
    from storage.log import Log
    from storage.log_config import LogConfig

    wb = write_behind.instance()
    available = wb.enabled
    tmpl = bytes(rb.build_batch([(None, os.urandom(args.size))] * 1000, timestamp_ms=1))
    out = []
    for i in range(2 * args.write_path_rounds):
        on = i % 2 == 1 and available
        wb.enabled = on
        d = Path(tempfile.mkdtemp(prefix="disk-steady-wp-", dir=args.data_dir)) / "wp-0"
        lg = Log.open(d, LogConfig())
        sys0, dirty = thread_sys(threading.get_native_id()), 0.0
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < args.write_path_seconds:
            buf = bytearray(tmpl)
            lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=10_000)
            n += len(tmpl)
            if n % (64 << 20) < len(tmpl):
                dirty = max(dirty, meminfo().get("Dirty", 0) / MB)
        wall = time.monotonic() - t0
        ksys = thread_sys(threading.get_native_id()) - sys0
        wb.wait_idle()
        lg.close()
        shutil.rmtree(d.parent, ignore_errors=True)
        r = {"write_behind": on, "mb_per_s": n / wall / MB, "sys_ms_per_mb": 1e3 * ksys / (n / MB),
             "dirty_max_mb": dirty, "load1": os.getloadavg()[0]}
        out.append(r)
        print(f"write path, write-behind {'on ' if on else 'off'}: {r['mb_per_s']:6.0f} MB/s  kernel "
              f"{r['sys_ms_per_mb']:.2f} ms/MB  Dirty max {dirty:.0f} MB  load {r['load1']:.2f}", flush=True)
    wb.enabled = available
    return out


def git(*cmd: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *cmd], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="baseline tree (read-only), run alternately with this tree")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the tree under test (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--null-seconds", type=float, default=30, help="null broker run (0: skip)")
    ap.add_argument("--max-records", type=int, default=100_000_000, help="bound on records per run")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--data-dir", type=Path, default=Path("/var/tmp"), help="parent of the log dirs (disk-backed)")
    ap.add_argument("--retention-bytes", type=int, default=1 << 30)
    ap.add_argument("--retention-check-ms", type=int, default=5000)
    ap.add_argument("--delete-delay-ms", type=int, default=5000)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--notes", default="", help="text (Markdown) for the report, after the chart")
    ap.add_argument("--notes-file", type=Path, help="the same, from a file")
    ap.add_argument("--allow-tmpfs", action="store_true")
    ap.add_argument("--write-path-rounds", type=int, default=3,
                    help="pairs of in-process Log.append runs, write-behind off/on (0: skip)")
    ap.add_argument("--write-path-seconds", type=float, default=8)
    ap.add_argument("--write-path-only", action="store_true", help="only the write-path runs; merged into "
                    "the JSON already in --out, report rewritten")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the JSON in --out")
    args = ap.parse_args()
    if args.notes_file:
        args.notes = args.notes_file.read_text()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    fs, src = fs_type(args.data_dir)
    if fs in ("tmpfs", "ramfs") and not args.allow_tmpfs:
        raise SystemExit(f"{args.data_dir} is on {fs}: give a disk-backed --data-dir")
    st = os.stat(args.data_dir)
    dev = (os.major(st.st_dev), os.minor(st.st_dev))
    trees = {"after": args.tree.resolve()}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    results: dict[str, Any] = {"meta": {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": git("rev-parse", "--short", "HEAD") or "-",
        "host": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
        "fs": f"{fs} on {args.data_dir}", "device": f"{src} {dev[0]}:{dev[1]}", "seconds": args.seconds,
        "retention_bytes": args.retention_bytes, "retention_check_ms": args.retention_check_ms,
        "delete_delay_ms": args.delete_delay_ms, "before": str(trees.get("before", "-")),
        "after": str(trees["after"]),
    }, "null": None, "rounds": []}
    if args.report_only or args.write_path_only:
        saved = json.loads((args.out / "disk_steady.json").read_text())
        if args.write_path_only:
            saved["write_path"] = write_path(args)
        print(f"report: {write_report(saved, args.out, args.notes or saved['meta'].get('notes', ''))}")
        return 0
    results["meta"]["notes"] = args.notes
    print(f"log dirs under {args.data_dir} ({fs} on {src}); load {os.getloadavg()}", flush=True)
    if args.write_path_rounds > 0:
        results["write_path"] = write_path(args)
    if args.null_seconds > 0:
        results["null"] = run_null(args, dev)
        print(line("null", results["null"]), flush=True)
    names = list(trees)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        runs: dict[str, Any] = {}
        for name in order:
            runs[name] = run_kbroker(trees[name], args, dev)
            print(f"round {r + 1} " + line(name, runs[name]), flush=True)
        results["rounds"].append(runs)
        write_report(results, args.out, args.notes)  # a partial report survives an interrupted run
    path = write_report(results, args.out, args.notes)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
