"""KIP-932 share groups with confluent-kafka's ShareConsumer against a real broker (issue 27,
acceptance 1, 2, 3 and 5): queue semantics, explicit acknowledgement (RELEASE, REJECT, the
delivery-count limit, lock expiry), a share consumer killed with SIGKILL, and read_committed.

"Acknowledged" is what the broker confirmed: the acknowledgement-commit callback without error.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import AcknowledgeType, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.share_group_api import DescribeShareGroupOffsetsRequest
from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.share_clients import (
    SHARE_OVERRIDES,
    ShareWorker,
    produce_values,
    read_worker_file,
    set_group_configs,
)
from tests.helpers.waiting import wait_for
from tests.helpers.wire import send_request


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(30)


def start_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    R = DescribeShareGroupOffsetsRequest
    G = R.DescribeShareGroupOffsetsRequestGroup
    resp = send_request(bootstrap, R(version=0, groups=[G(version=0, group_id=group, topics=[
        G.DescribeShareGroupOffsetsRequestTopic(version=0, topic_name=topic, partitions=list(range(partitions)))])]), 0)
    g = resp.groups[0]
    assert g.error_code == 0, g
    return {p.partition_index: p.start_offset for t in g.topics for p in t.partitions}


def stop_all(workers: list[ShareWorker]) -> None:
    for w in workers:
        w.stop_event.set()
    for w in workers:
        w.join(60)
    for w in workers:
        assert not w.errors, (w.name, w.errors[:5])


def test_queue_semantics_three_consumers_six_partitions(broker_factory) -> None:
    """30,000 records, 3 consumers, implicit acknowledgement: each record to exactly one consumer
    (none fails), every one acknowledged, and the share-partition start offsets end at the log end."""
    b = broker_factory(SHARE_OVERRIDES)
    n, parts = 30_000, 6
    create_topic(b.bootstrap, "jobs", parts)
    set_group_configs(b.bootstrap, "workers", {"share.auto.offset.reset": "earliest"})
    produce_values(b.bootstrap, "jobs", range(n), parts)
    workers = [ShareWorker(b.bootstrap, "workers", ["jobs"], name=f"w{i}") for i in range(3)]
    for w in workers:
        w.start()
    try:
        wait_for(lambda: sum(len(w.acked) for w in workers) >= n, "every record acknowledged", timeout=120)
    finally:
        stop_all(workers)
    values = [v for w in workers for v in w.values()]
    assert len(values) == n and set(values) == set(range(n)), f"{len(values)} deliveries, {len(set(values))} distinct"
    assert all(dc == 1 for w in workers for *_, dc in w.received)
    assert all(len(w.values()) > 0 for w in workers)  # the work was shared
    acked = Counter(key for w in workers for key in w.acked)
    assert len(acked) == n and set(acked.values()) == {1}
    assert start_offsets(b.bootstrap, "workers", "jobs", parts) == dict.fromkeys(range(parts), n // parts)


def test_explicit_release_reject_delivery_limit_and_lock_expiry(broker_factory) -> None:
    b = broker_factory({**SHARE_OVERRIDES, "group.share.delivery.count.limit": "3"})
    create_topic(b.bootstrap, "tasks", 1)
    set_group_configs(b.bootstrap, "g", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000"})
    produce_values(b.bootstrap, "tasks", range(30), 1)

    def decide(m):
        v = int(m.value())
        if v % 3 == 1:
            return AcknowledgeType.RELEASE if m.delivery_count() < 2 else AcknowledgeType.ACCEPT
        if v % 3 == 2:
            return AcknowledgeType.REJECT
        if v == 0:
            return AcknowledgeType.RELEASE  # released until the delivery limit archives it
        return AcknowledgeType.ACCEPT

    w = ShareWorker(b.bootstrap, "g", ["tasks"], explicit=True, decide=decide)
    w.start()
    try:
        # Value 0 is delivered 3 times (the limit) and then archived; 1, 4, ... twice; REJECTed once.
        wait_for(lambda: Counter(w.values())[0] >= 3 and len({(p, o) for p, o in w.acked}) >= 20,
                 "the delivery limit reached and the rest acknowledged", timeout=60)
        time.sleep(3)  # give an archived or rejected record every chance to come back (it must not)
    finally:
        stop_all([w])
    counts = Counter(w.values())
    dcs: dict[int, list[int]] = {}
    for _, _, v, dc in w.received:
        dcs.setdefault(v, []).append(dc)
    assert counts[0] == 3 and dcs[0] == [1, 2, 3]
    for v in range(1, 30, 3):
        assert dcs[v] == [1, 2], (v, dcs[v])  # released once: redelivered with a higher count
    for v in range(2, 30, 3):
        assert counts[v] == 1  # rejected: never again
    for v in range(3, 30, 3):
        assert counts[v] == 1
    assert start_offsets(b.bootstrap, "g", "tasks", 1) == {0: 30}



def test_lock_expiry_moves_records_to_another_member(broker_factory, tmp_path: Path) -> None:
    """A member that stops acknowledging (it stays in the group) loses its locks after the lock
    duration; the other member then gets those records, with delivery count 2."""
    b = broker_factory(SHARE_OVERRIDES)
    create_topic(b.bootstrap, "slow", 1)
    set_group_configs(b.bootstrap, "g", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000"})
    produce_values(b.bootstrap, "slow", range(20), 1)
    out = tmp_path / "stalled.txt"
    stalled = _worker(b, "g", "slow", out, stall_after=1)
    taker = None
    try:
        wait_for(lambda: _read(out)[2], "the first member to hold the records", timeout=60)
        held = {o for _, o, _, _ in _read(out)[0]}
        taker = ShareWorker(b.bootstrap, "g", ["slow"], explicit=True, name="taker")
        t0 = time.monotonic()
        taker.start()
        wait_for(lambda: held <= {o for _, o, _, _ in taker.received}, "the held records at the other member",
                 timeout=60)
        waited = time.monotonic() - t0
    finally:
        if taker is not None:
            stop_all([taker])
        stalled.kill()
        stalled.wait(10)
    assert held and waited >= 1.0  # not before the 2 s locks expired (the taker also needed to join)
    assert all(dc == 2 for _, o, _, dc in taker.received if o in held)


def _worker(b, group: str, topic: str, out: Path, stall_after: int = -1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.share_clients", "worker", "--bootstrap",
                             b.bootstrap, "--group", group, "--topic", topic, "--out", str(out),
                             "--stall-after", str(stall_after)], cwd=REPO_ROOT)


def _read(out: Path) -> tuple[list[tuple[int, int, int, int]], set[tuple[int, int]], bool]:
    received, acked, stalled = read_worker_file(out)
    return [r[:4] for r in received], set(acked), stalled


def test_killed_share_consumer_records_go_to_the_others(broker_factory, tmp_path: Path) -> None:
    """kill -9 a share consumer holding acquired records: they are redelivered to the other
    member; nothing acknowledged before the kill is delivered again."""
    b = broker_factory(SHARE_OVERRIDES)
    create_topic(b.bootstrap, "work", 2)
    set_group_configs(b.bootstrap, "crew", {"share.auto.offset.reset": "earliest",
                                            "share.record.lock.duration.ms": "3000"})
    produce_values(b.bootstrap, "work", range(2000), 2)
    victim_out, other_out = tmp_path / "victim.txt", tmp_path / "other.txt"
    victim = _worker(b, "crew", "work", victim_out, stall_after=1)  # acknowledges nothing, holds its batch
    other = None
    try:
        wait_for(lambda: _read(victim_out)[2], "the victim to hold acquired records", timeout=60)
        other = _worker(b, "crew", "work", other_out)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        wait_for(lambda: len({r[2] for r in _read(other_out)[0]}) >= 2000, "every record at the other member",
                 timeout=90)
    finally:
        for proc in (victim, other):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    v_received, v_acked, _ = _read(victim_out)
    o_received, o_acked, _ = _read(other_out)
    assert v_received and not v_acked
    held = {(p, o) for p, o, _, _ in v_received}
    redelivered = {(p, o): dc for p, o, _, dc in o_received if (p, o) in held}
    assert set(redelivered) == held and all(dc >= 2 for dc in redelivered.values())
    # Nothing the other member acknowledged came back to it.
    seen: set[tuple[int, int]] = set()
    for p, o, _, _ in o_received:
        assert (p, o) not in seen or (p, o) not in o_acked
        seen.add((p, o))
    assert {r[2] for r in o_received} == set(range(2000))


def test_read_committed_skips_aborted_and_waits_at_the_lso(broker_factory) -> None:
    b = broker_factory(SHARE_OVERRIDES)
    create_topic(b.bootstrap, "txn", 1)
    set_group_configs(b.bootstrap, "rc", {"share.auto.offset.reset": "earliest",
                                          "share.isolation.level": "read_committed"})
    tp = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "share-rc"})
    tp.init_transactions(30)
    for vals, commit in ((range(0, 10), True), (range(10, 20), False), (range(20, 30), True)):
        tp.begin_transaction()
        for v in vals:
            tp.produce("txn", value=str(v).encode(), partition=0)
        tp.commit_transaction(30) if commit else tp.abort_transaction(30)
    tp.begin_transaction()  # left open: everything after it waits at the LSO
    for v in range(30, 40):
        tp.produce("txn", value=str(v).encode(), partition=0)
    tp.flush(30)
    plain = Producer({"bootstrap.servers": b.bootstrap})
    for v in range(40, 45):
        plain.produce("txn", value=str(v).encode(), partition=0)
    plain.flush(30)
    w = ShareWorker(b.bootstrap, "rc", ["txn"])
    w.start()
    try:
        wait_for(lambda: len(w.values()) >= 20, "the committed records", timeout=60)
        time.sleep(2)
        assert sorted(w.values()) == list(range(0, 10)) + list(range(20, 30))  # nothing past the open txn
        tp.commit_transaction(30)
        wait_for(lambda: len(w.values()) >= 35, "the records after the transaction committed", timeout=60)
    finally:
        stop_all([w])
    values = sorted(w.values())
    assert values == list(range(0, 10)) + list(range(20, 45))
    assert not set(range(10, 20)) & set(values)
