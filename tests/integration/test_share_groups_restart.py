"""Share groups survive a broker kill -9 and restart (issue 27, acceptance 4, one node): the share
coordinator's state (__share_group_state) and the group (__consumer_offsets) are replayed, so no
record the broker confirmed as acknowledged is delivered again and none is lost: every record is
eventually acknowledged. Two share consumer processes acknowledge explicitly after every poll."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.share_clients import (
    SHARE_OVERRIDES,
    check_outcome,
    produce_values,
    read_worker_file,
    set_group_configs,
    start_worker,
)
from tests.helpers.waiting import wait_for

N, PARTS = 6000, 3


def test_broker_kill_and_restart_loses_and_repeats_nothing_acknowledged(broker_factory, tmp_path: Path) -> None:
    b = broker_factory({**SHARE_OVERRIDES, "group.share.record.lock.duration.ms": "3000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=PARTS)])["orders"].result(30)
    set_group_configs(b.bootstrap, "billing", {"share.auto.offset.reset": "earliest"})
    # Batches of 50: an acquisition takes whole batches, so the workers' 50 records per poll (and
    # 50 ms of "work" each) keep the pace slow enough for the kill to land mid-way.
    produce_values(b.bootstrap, "orders", range(N), PARTS, **{"batch.num.messages": 50})
    files = [tmp_path / f"w{i}.txt" for i in range(2)]
    workers = [start_worker(b.bootstrap, "billing", "orders", f) for f in files]
    try:
        wait_for(lambda: sum(len(read_worker_file(f)[1]) for f in files) >= N // 3, "a third acknowledged",
                 timeout=90)
        b.kill()
        assert sum(len(read_worker_file(f)[1]) for f in files) < N  # still mid-way when it died
        b.start()
        t0 = time.monotonic()
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
