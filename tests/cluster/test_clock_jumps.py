"""Wall-clock jumps on the brokers of a cluster (issue 28): leases, fencing and the ISR run on the
monotonic clock, so a broker whose wall clock jumps keeps its etcd session (no fencing, no new
registration), keeps its followers in the ISR, and still drops a follower that stops fetching
within replica.lag.time.max.ms.

Real etcd, three real brokers, each with libfaketime preloaded (tests/helpers/fake_clock.py: only
CLOCK_REALTIME moves). An idempotent acks=all producer (min.insync.replicas=2) writes throughout.
The regression case: a follower stopped (SIGSTOP) as the leader's wall clock stepped back 10
minutes; the leader measured follower lag on the wall clock, so the follower's last catch-up looked
10 minutes in the future and it stayed in the ISR, holding the high watermark: every acks=all
produce timed out until the clock caught up (the sessions are long here, so the controller's own
removal of an expired broker does not hide it).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.helpers.cluster_state import wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fake_clock import FakeClock, library
from tests.helpers.fault_cluster import FaultCluster, create_topic, try_views

pytestmark = pytest.mark.skipif(library() is None, reason="libfaketime not installed (apt-get install faketime)")
TOPIC = "clock"
LAG_MS = 3000
# Sessions far longer than the lag: the leader's own ISR check must act, not the controller.
OVERRIDES = {"broker.session.timeout.ms": "30000", "broker.heartbeat.interval.ms": "1000",
             "replica.lag.time.max.ms": str(LAG_MS)}


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[tuple[FaultCluster, dict[int, FakeClock]]]:
    c = FaultCluster(etcd, tmp_path, 3, proxied=False, **OVERRIDES)
    clocks = {n: FakeClock(tmp_path / f"clock-{n}") for n in c.brokers}
    for n, b in c.brokers.items():
        b.env.update(clocks[n].env())
    try:
        c.start()
        yield c, clocks
    finally:
        for b in c.brokers.values():  # a paused broker ignores SIGTERM
            if b.running:
                os.kill(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        problems = c.stop()
    assert not problems, "\n\n".join(problems)


class Load:
    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "log_level": 0})
        self.acked = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, _msg) -> None:  # noqa: ANN001
        if err is None:
            self.acked += 1
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            if i - self.acked - len(self.errors) < 500:
                self.producer.produce(TOPIC, value=b"%d" % i, on_delivery=self.on_delivery)
                i += 1
            self.producer.poll(0.002)
        self.producer.flush(60)

    def progress(self, more: int, what: str, timeout: float = 60) -> None:
        target = self.acked + more
        wait_until(lambda: self.acked >= target, f"{more} more records acknowledged ({what})", timeout)


SESSION_TROUBLE = ("keepalive of lease", "expired", "registered again", "stays fenced")


def _setup(c: FaultCluster) -> tuple[int, int]:
    create_topic(c.bootstrap, TOPIC, 1, 3, {"min.insync.replicas": "2"})
    views = wait_full_isr(c, TOPIC, 1, 3)
    leader = views[0].leader
    return leader, next(n for n in views[0].replicas if n != leader)


def _check_no_session_trouble(c: FaultCluster, load: Load, paused: int | None = None) -> None:
    """``paused``: a broker stopped with SIGSTOP for a while. A keepalive it had in flight times out
    once it runs again (its deadline passed while it was stopped), which it logs as a failed
    keepalive; that is the pause, not a clock jump. Its session must still survive."""
    assert not load.errors, f"{len(load.errors)} delivery errors, e.g. {load.errors[:3]}"
    for n, b in c.brokers.items():
        text = b.log_text()
        trouble = [t for t in SESSION_TROUBLE if t in text and not (n == paused and t == "keepalive of lease")]
        lines = [line for line in text.splitlines() if any(t in line for t in trouble)]
        assert not trouble, f"broker {n}'s etcd session suffered from a clock jump: {trouble}: {lines[:5]}"


def test_a_follower_stopping_as_the_leaders_clock_steps_back_leaves_the_isr(cluster) -> None:
    c, clocks = cluster
    leader, follower = _setup(c)
    load = Load(c.bootstrap)
    load.thread.start()
    try:
        load.progress(500, "before the jump")
        os.kill(c.brokers[follower].proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        clocks[leader].set("-600")
        wait_until(lambda: (v := try_views(c.brokers[leader].bootstrap, TOPIC)) and follower not in v[0].isr,
                   f"follower {follower} out of the ISR while the leader's clock is 10 min back", timeout=20)
        load.progress(500, "without the stopped follower")
        os.kill(c.brokers[follower].proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        wait_full_isr(c, TOPIC, 1, 3)
        load.progress(500, "the follower back")
    finally:
        load.stop.set()
        load.thread.join(90)
    _check_no_session_trouble(c, load, paused=follower)


@pytest.mark.slow  # ~40 s of jumps under load
def test_wall_clock_jumps_leave_leases_and_the_isr_alone(cluster) -> None:
    c, clocks = cluster
    leader, _ = _setup(c)
    load = Load(c.bootstrap)
    load.thread.start()
    try:
        load.progress(500, "before any jump")
        for n in (leader, *(m for m in clocks if m != leader)):  # each broker's clock jumps, alone
            for offset in ("+600", "-600"):
                clocks[n].set_and_wait(offset)
                start = time.monotonic()
                while time.monotonic() - start < LAG_MS / 1000 + 1:  # a few ISR checks after the jump
                    v = try_views(c.brokers[leader].bootstrap, TOPIC)
                    assert not v or len(v[0].isr) == 3, f"the ISR shrank after a {offset} s jump of broker {n}: {v}"
                    load.progress(20, f"after a {offset} s jump of broker {n}'s clock")
            clocks[n].set_and_wait("+0")
    finally:
        load.stop.set()
        load.thread.join(90)
    _check_no_session_trouble(c, load)
