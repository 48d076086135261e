"""Share groups survive a broker kill -9 and restart (issue 27, acceptance 4, one node): the share
coordinator's state (__share_group_state) and the group (__consumer_offsets) are replayed, so no
record the broker confirmed as acknowledged is delivered again and none is lost: every record is
eventually acknowledged. Two share consumer processes acknowledge explicitly after every poll."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.share_clients import SHARE_OVERRIDES, produce_values, read_worker_file, set_group_configs
from tests.helpers.waiting import wait_for

N, PARTS = 6000, 3


def start_worker(bootstrap: str, group: str, topic: str, out: Path) -> subprocess.Popen:
    # 50 records per poll and 50 ms of "work" each: about 1,000 records/s per worker, so the
    # broker dies while records are acquired, acknowledged and in flight.
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.share_clients", "worker", "--bootstrap", bootstrap,
                             "--group", group, "--topic", topic, "--out", str(out), "--max-records", "50",
                             "--batch-delay", "0.05"], cwd=REPO_ROOT)


def check_outcome(files: list[Path], n: int) -> tuple[int, int]:
    """Nothing delivered after its acknowledgement was confirmed; every value acknowledged.
    Returns (deliveries, redeliveries)."""
    received, acked = [], {}
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
    assert {by_key[k] for k in acked} == set(range(n)), f"{n - len(acked)} records never acknowledged"
    return len(received), len(received) - len(by_key)


def test_broker_kill_and_restart_loses_and_repeats_nothing_acknowledged(broker_factory, tmp_path: Path) -> None:
    b = broker_factory({**SHARE_OVERRIDES, "group.share.record.lock.duration.ms": "3000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=PARTS)])["orders"].result(30)
    set_group_configs(b.bootstrap, "billing", {"share.auto.offset.reset": "earliest"})
    produce_values(b.bootstrap, "orders", range(N), PARTS)
    files = [tmp_path / f"w{i}.txt" for i in range(2)]
    workers = [start_worker(b.bootstrap, "billing", "orders", f) for f in files]
    try:
        wait_for(lambda: sum(len(read_worker_file(f)[1]) for f in files) >= N // 3, "a third acknowledged",
                 timeout=90)
        b.restart(kill=True)
        t0 = time.monotonic()
        assert sum(len(read_worker_file(f)[1]) for f in files) < N  # still mid-way when it died
        wait_for(lambda: sum(len(read_worker_file(f)[1]) for f in files) >= N, "every record acknowledged",
                 timeout=120)
        print(f"after the restart every record was acknowledged within {time.monotonic() - t0:.1f} s")
    finally:
        for w in workers:
            w.kill()
            w.wait(10)
    deliveries, redeliveries = check_outcome(files, N)
    print(f"{deliveries} deliveries, {redeliveries} redeliveries of unacknowledged records")
    assert "replayed" in b.log_text() or "loaded __share_group_state" in b.log_text()
