"""Share-group (KIP-932) workloads for tests and benchmarks, driven by confluent-kafka's ShareConsumer.

``ShareWorker`` consumes in a thread and records every delivery (partition, offset, value,
delivery count) and every acknowledgement the broker confirmed (the acknowledgement-commit
callback without error: what counts as "acknowledged"). Run as a module it is a worker process
(``python -m tests.helpers.share_clients worker ...``) that appends the same facts to a file, one
line each, flushed as they happen, so a test can kill -9 it and still know what it had:
``R <partition> <offset> <value> <delivery count> <time>`` and ``A <partition> <offset> <time>``
(time.time() when the record came back from poll / when the broker's confirmation was handed
over), so that "nothing acknowledged is delivered again" can be checked across processes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

# Broker settings that make share groups react in about a second (Kafka's minimums are 15 s for
# the lock, 45 s for the session and 5 s for the heartbeat interval).
SHARE_OVERRIDES: dict[str, str] = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "8000",
    "group.share.min.session.timeout.ms": "2000",
    "group.share.record.lock.duration.ms": "15000",
    "group.share.min.record.lock.duration.ms": "1000",
}


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("group", group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def produce_values(bootstrap: str, topic: str, values: range | list[int], partitions: int, **conf: Any) -> None:
    """One record per value (its decimal text), value v to partition v % partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf})
    for i, v in enumerate(values):
        p.produce(topic, value=str(v).encode(), partition=v % partitions)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def consumer_config(bootstrap: str, group: str, explicit: bool = False, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    conf.update(extra)
    return conf


class ShareWorker(threading.Thread):
    """Consume until stopped; ``decide(message) -> AcknowledgeType`` in explicit mode (default
    ACCEPT). Acknowledgements are committed after every poll."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], *, explicit: bool = False,
                 decide: Callable[[Any], AcknowledgeType] | None = None, name: str = "worker",
                 poll_s: float = 0.5, hold: threading.Event | None = None, **extra: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.conf = consumer_config(bootstrap, group, explicit, **extra)
        self.topics = topics
        self.explicit = explicit
        self.decide = decide or (lambda _m: AcknowledgeType.ACCEPT)
        self.poll_s = poll_s
        self.hold = hold  # while set, the worker neither polls nor acknowledges
        self.stop_event = threading.Event()
        self.received: list[tuple[int, int, int, int]] = []  # (partition, offset, value, delivery count)
        self.acked: set[tuple[int, int]] = set()
        self.ack_errors: list[str] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def _on_commit(self, offsets: dict[Any, set[int]], exc: Any) -> None:
        with self.lock:
            if exc is not None:
                self.ack_errors.append(str(exc))
                return
            for tp, offs in offsets.items():
                self.acked.update((tp.partition, o) for o in offs)

    def values(self) -> list[int]:
        with self.lock:
            return [v for _, _, v, _ in self.received]

    def run(self) -> None:
        c = ShareConsumer(self.conf)
        c.set_acknowledgement_commit_callback(self._on_commit)
        c.subscribe(self.topics)
        try:
            while not self.stop_event.is_set():
                if self.hold is not None and self.hold.is_set():
                    time.sleep(0.05)
                    continue
                batch = c.poll(self.poll_s)
                for m in batch:
                    if m.error() is not None:
                        self.errors.append(str(m.error()))
                        continue
                    with self.lock:
                        self.received.append((m.partition(), m.offset(), int(m.value()), m.delivery_count() or 0))
                    if self.explicit:
                        c.acknowledge(m, self.decide(m))
                if len(batch):
                    c.commit_sync(30)
            c.commit_sync(30)
        except Exception as e:  # noqa: BLE001 - reported to the test
            self.errors.append(repr(e))
        finally:
            c.close()

    def stop(self, timeout: float = 60) -> None:
        self.stop_event.set()
        self.join(timeout)


def _worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stall-after", type=int, default=-1,
                    help="after receiving this many records stop acknowledging (and polling): hold the locks")
    ap.add_argument("--max-records", type=int, default=500, help="max.poll.records")
    ap.add_argument("--batch-delay", type=float, default=0.0, help="seconds of 'work' per polled batch")
    args = ap.parse_args(argv)
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 - one line per fact, flushed

    def on_commit(offsets: dict[Any, set[int]], exc: Any) -> None:
        if exc is None:
            now = time.time()
            for tp, offs in offsets.items():
                for o in sorted(offs):
                    out.write(f"A {tp.partition} {o} {now:.6f}\n")

    c = ShareConsumer(consumer_config(args.bootstrap, args.group, explicit=True,
                                      **{"max.poll.records": args.max_records}))
    c.set_acknowledgement_commit_callback(on_commit)
    c.subscribe([args.topic])
    received = 0
    while True:
        batch = c.poll(0.5)
        for m in batch:
            if m.error() is not None:
                continue
            out.write(f"R {m.partition()} {m.offset()} {int(m.value())} {m.delivery_count() or 0} {time.time():.6f}\n")
            received += 1
        if 0 <= args.stall_after <= received:
            out.write("STALL\n")
            while True:  # holds its acquired records until killed
                time.sleep(1)
        if len(batch) and args.batch_delay:
            time.sleep(args.batch_delay)
        for m in batch:
            if m.error() is None:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        if len(batch):
            try:
                c.commit_sync(30)
            except Exception as e:  # noqa: BLE001 - e.g. the broker restarting: the records come back
                out.write(f"E {e!r}\n")


def read_worker_file(path: Any) -> tuple[list[tuple[int, int, int, int, float]], dict[tuple[int, int], float], bool]:
    """(received (partition, offset, value, delivery count, time), acknowledged (partition, offset)
    -> time, stalled) from a worker's file; a line cut by a kill is ignored."""
    received, acked, stalled = [], {}, False
    try:
        text = open(path).read()
    except FileNotFoundError:
        return received, acked, stalled
    for line in text.splitlines():
        f = line.split()
        try:
            if f[0] == "R" and len(f) == 6:
                received.append((int(f[1]), int(f[2]), int(f[3]), int(f[4]), float(f[5])))
            elif f[0] == "A" and len(f) == 4:
                acked.setdefault((int(f[1]), int(f[2])), float(f[3]))
            elif f[0] == "STALL":
                stalled = True
        except (IndexError, ValueError):
            continue
    return received, acked, stalled


def start_worker(bootstrap: str, group: str, topic: str, out: Any, *, max_records: int = 50,
                 batch_delay: float = 0.05) -> subprocess.Popen:
    """A share consumer process acknowledging explicitly after every poll (_worker_main). By
    default 50 records per poll and 50 ms of "work" each: about 1,000 records/s, so a broker
    killed mid-way dies while records are acquired, acknowledged and in flight."""
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.share_clients", "worker", "--bootstrap", bootstrap,
                             "--group", group, "--topic", topic, "--out", str(out), "--max-records", str(max_records),
                             "--batch-delay", str(batch_delay)], cwd=Path(__file__).resolve().parents[2])


def check_outcome(files: list[Any], n: int, unconfirmed: int = 0) -> tuple[int, int]:
    """Nothing delivered after its acknowledgement was confirmed (the acknowledgement-commit
    callback without error); every value 0..n-1 acknowledged. ``unconfirmed``: up to this many
    values may lack a confirmed acknowledgement if they were delivered, for a caller that has
    checked the broker's side (a broker killed after storing an acknowledgement and before
    answering it leaves the record acknowledged while its consumer never hears so: Kafka's
    clients report such a commit as failed, and the record is not delivered again). Returns
    (deliveries, redeliveries)."""
    received: list[tuple[int, int, int, int, float]] = []
    acked: dict[tuple[int, int], float] = {}
    for f in files:
        r, a, _ = read_worker_file(f)
        received += r
        for key, t in a.items():
            acked[key] = min(t, acked.get(key, t))
    by_key: dict[tuple[int, int], int] = {}
    for p, o, v, _dc, t in received:
        by_key[(p, o)] = v
        if (p, o) in acked:
            assert t <= acked[(p, o)] + 0.001, f"{p}-{o} delivered again {t - acked[(p, o)]:.3f} s after its ack"
    missing = set(range(n)) - {by_key[k] for k in acked}
    never_delivered = missing - set(by_key.values())
    assert not never_delivered, f"{len(never_delivered)} records never delivered (e.g. {sorted(never_delivered)[:10]})"
    assert len(missing) <= unconfirmed, f"{len(missing)} records never acknowledged (e.g. {sorted(missing)[:10]})"
    return len(received), len(received) - len(by_key)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        _worker_main(sys.argv[2:])
