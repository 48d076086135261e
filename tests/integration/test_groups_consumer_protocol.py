"""KIP-848 consumer groups with librdkafka's ``group.protocol=consumer`` (issue 6, acceptance 4).

Three members share a 6-partition topic through the broker-side assignor; one leaves and the
others take over its partitions; at no step do two members own the same partition. The group is
visible through ConsumerGroupDescribe (AdminClient.describe_consumer_groups) and offsets committed
with member epochs are fetched back.
"""

from __future__ import annotations

import io
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cli import groups as groups_cli
from tests.integration.test_groups_clients import assert_exact_cover, covered, produce, unique

PARTITIONS = 6
OVERRIDES = {"offsets.topic.num.partitions": "3", "group.consumer.heartbeat.interval.ms": "500",
             "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "10000",
             "group.consumer.min.session.timeout.ms": "6000"}


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str | None = None) -> None:
        self.owned: set[int] = set()
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if assignor:
            conf["group.remote.assignor"] = assignor
        self.c = Consumer(conf)
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.owned |= {p.partition for p in parts}  # the consumer protocol is always incremental

    def _revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.owned -= {p.partition for p in parts}


def poll_until(members: list[Member], cond, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.c.poll(0.05)
            owned = [x.owned for x in members]
            assert sum(len(o) for o in owned) == len(set().union(*owned)), f"overlap: {owned}"
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}: {[m.owned for m in members]}")


@pytest.mark.parametrize("assignor", [None, "range"])
def test_consumer_protocol_three_members_one_leaves(broker_factory, assignor: str | None) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t848"), unique("g848")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    produce(broker.bootstrap, topic)
    members = [Member(broker.bootstrap, group, topic, assignor) for _ in range(3)]
    try:
        poll_until(members, lambda: all(len(m.owned) == 2 for m in members), "three members with two partitions each")
        assert_exact_cover([m.owned for m in members])
        # Members whose target did not change reach the new epoch on their next heartbeat.
        deadline = time.monotonic() + 30
        while True:
            desc = admin.describe_consumer_groups([group])[group].result(30)
            if desc.state.name == "STABLE" or time.monotonic() > deadline:
                break
            poll_until(members, lambda: True, "a poll round")
        assert desc.state.name == "STABLE" and len(desc.members) == 3
        assert sorted(p.partition for m in desc.members for p in m.assignment.topic_partitions) == list(range(6))
        # `kbroker groups describe` shows consumer-protocol groups too.
        out = io.StringIO()
        assert groups_cli.main(["--bootstrap-server", broker.bootstrap, "describe", group], out) == 0
        text = out.getvalue()
        assert "(consumer) is Stable" in text and len([ln for ln in text.splitlines() if ln.startswith(group)]) == 6
        # Commits carry the member epoch; they are read back.
        first = members[0]
        first.c.commit(offsets=[TopicPartition(topic, p, 1) for p in first.owned], asynchronous=False)
        got = first.c.committed([TopicPartition(topic, p) for p in first.owned], timeout=30)
        assert all(tp.offset == 1 for tp in got)
        # One member leaves: the other two take its partitions.
        leaving = members.pop(0)
        leaving.c.close()
        poll_until(members, lambda: covered([m.owned for m in members]), "the others taking over")
        assert_exact_cover([m.owned for m in members])
    finally:
        for m in members:
            m.c.close()
