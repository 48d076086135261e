"""KIP-848 groups survive a broker restart (issue 15, "Groups"): their state is in
__consumer_offsets (ConsumerGroup* records), as in Kafka.

Two librdkafka consumers (``group.protocol=consumer``) share a topic; the broker is restarted
(SIGTERM, and kill -9). Afterwards ConsumerGroupDescribe shows the same group epoch, the same
members at the same member epochs; the members carry on without losing or revoking a partition
(no full reset); a new consumer of the group starts at the last committed offsets; and
``kbroker dump-log`` prints the group's records.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.partition_access import partition_for
from protocol.consumer_group_api import ConsumerGroupDescribeRequest
from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.wire import send_request
from tests.integration.test_groups_clients import unique

PARTITIONS = 4
PER_PARTITION = 10
COMMITTED = 5
OFFSETS_PARTITIONS = 3
OVERRIDES = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
             "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
             "group.consumer.session.timeout.ms": "30000", "group.consumer.min.session.timeout.ms": "6000"}


class Member:
    """A consumer counting its assignments, revocations and losses."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.owned: set[int] = set()
        self.revoked = self.lost = 0
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lose)

    def _assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.owned |= {p.partition for p in parts}

    def _revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.revoked += 1
        self.owned -= {p.partition for p in parts}

    def _lose(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.lost += 1
        self.owned -= {p.partition for p in parts}


def describe(bootstrap: str, group: str):
    resp = send_request(bootstrap, ConsumerGroupDescribeRequest(version=0, group_ids=[group],
                                                                include_authorized_operations=False), 0)
    return resp.groups[0]


def poll_until(members: list[Member], cond, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.c.poll(0.05)
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}: owned {[m.owned for m in members]}")


def settled(bootstrap: str, group: str, n: int) -> bool:
    """The group is Stable with n members, every member at the assignment epoch."""
    try:
        g = describe(bootstrap, group)
    except OSError:
        return False
    return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == n and \
        all(m.member_epoch == g.assignment_epoch for m in g.members)


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "kill9"])
def test_consumer_group_survives_broker_restart(broker_factory, kill: bool) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t848r"), unique("g848r")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(PARTITIONS * PER_PARTITION):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    members = [Member(broker.bootstrap, group, topic) for _ in range(2)]
    try:
        poll_until(members, lambda: all(len(m.owned) == 2 for m in members), "two partitions each")
        poll_until(members, lambda: settled(broker.bootstrap, group, 2), "a stable group")
        for m in members:
            m.c.commit(offsets=[TopicPartition(topic, q, COMMITTED) for q in m.owned], asynchronous=False)
        before = describe(broker.bootstrap, group)
        owned_before = [set(m.owned) for m in members]
        for m in members:  # the first member gave up half its partitions to the second one
            m.revoked = m.lost = 0

        broker.restart(kill=kill)

        poll_until(members, lambda: settled(broker.bootstrap, group, 2), "the group back after the restart")
        after = describe(broker.bootstrap, group)
        assert after.group_epoch == before.group_epoch and after.assignment_epoch == before.assignment_epoch
        assert {(m.member_id, m.member_epoch) for m in after.members} == \
            {(m.member_id, m.member_epoch) for m in before.members}
        # No full reset: nobody lost or gave up a partition.
        assert [m.owned for m in members] == owned_before
        assert all(m.revoked == 0 and m.lost == 0 for m in members)
        got = members[0].c.committed([TopicPartition(topic, q) for q in sorted(owned_before[0])], timeout=30)
        assert [tp.offset for tp in got] == [COMMITTED] * len(owned_before[0])
    finally:
        for m in members:
            m.c.close()

    # A new member of the (now empty) group starts at the committed offsets.
    fresh = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
    first: dict[int, int] = {}
    try:
        fresh.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            msg = fresh.poll(0.2)
            if msg is not None and not msg.error():
                first.setdefault(msg.partition(), msg.offset())
    finally:
        fresh.close()
    assert first == dict.fromkeys(range(PARTITIONS), COMMITTED)

    # dump-log prints the group's ConsumerGroup* records.
    part_dir = broker.data_dir / f"__consumer_offsets-{partition_for(group, OFFSETS_PARTITIONS)}"
    out = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--print-data",
                          *map(str, sorted(part_dir.glob("*.log")))],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for rtype in (3, 4, 5, 6, 7, 8):
        assert f'key: {{"type":"{rtype}","data":{{"groupId":"{group}"' in out.stdout, rtype
    assert '"memberEpoch":' in out.stdout and '"assignmentEpoch":' in out.stdout
