"""KIP-848 behaviours librdkafka (``group.protocol=consumer``) relies on (issue 21 item 5).

- Regex subscriptions: RE2 syntax, INVALID_REGULAR_EXPRESSION for a pattern RE2 refuses, and
  asynchronous resolution (a first heartbeat with a regex and a literal topic is assigned the
  literal topic only; the regex's topics follow), resolved again when a topic is created.
- Rapid subscribe/unsubscribe cycles never get a fatal error and the group still converges.
- A member that exceeds max.poll.interval.ms is fenced after the session timeout; when it polls
  again it rejoins and the group converges to an even split (no empty target while the other
  member keeps everything).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_groups_clients import unique

SESSION_MS = 6000
OVERRIDES = {"offsets.topic.num.partitions": "3", "group.consumer.heartbeat.interval.ms": "500", "kbroker.log.level": "DEBUG",
             "group.consumer.min.heartbeat.interval.ms": "500",
             "group.consumer.session.timeout.ms": str(SESSION_MS),
             "group.consumer.min.session.timeout.ms": str(SESSION_MS)}


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        f.result(30)


class Member:
    """A consumer recording its incremental assignments and every error it reports."""

    def __init__(self, bootstrap: str, group: str, **conf: object) -> None:
        self.owned: set[tuple[str, int]] = set()
        self.assigns: list[set[tuple[str, int]]] = []
        self.errors: list[KafkaError] = []
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "error_cb": self.errors.append, **conf})

    def subscribe(self, topics: list[str]) -> None:
        self.c.subscribe(topics, on_assign=self._assign, on_revoke=self._revoke, on_lost=self._revoke)

    def _assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        got = {(p.topic, p.partition) for p in parts}
        self.assigns.append(got)
        self.owned |= got

    def _revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.owned -= {(p.topic, p.partition) for p in parts}

    def poll(self, timeout: float = 0.05) -> None:
        msg = self.c.poll(timeout)
        if msg is not None and msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
            self.errors.append(msg.error())

    def fatal(self) -> list[KafkaError]:
        return [e for e in self.errors if e.fatal() or e.code() in (KafkaError.INVALID_REQUEST,
                                                                     KafkaError.INVALID_REGULAR_EXPRESSION)]


def poll_until(members: list[Member], cond, what: str, timeout: float = 60, *, check_overlap: bool = True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
            owned = [x.owned for x in members]
            assert not check_overlap or sum(len(o) for o in owned) == len(set().union(*owned)), \
                f"partition owned twice: {owned}"
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}: owned {[m.owned for m in members]}, "
                         f"errors {[m.errors for m in members]}")


def test_regex_first_heartbeat_gets_the_literal_topic_then_the_regex_topics(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    literal, prefix = unique("lit"), unique("rx")
    matched = f"{prefix}-a"
    create_topics(broker.bootstrap, {literal: 2, matched: 2, unique("other"): 1})
    m = Member(broker.bootstrap, unique("g-rx"))
    try:
        m.subscribe([literal, f"^{prefix}-.*"])
        poll_until([m], lambda: len(m.owned) == 4, "the literal and the regex topic assigned")
        # Kafka resolves the regex asynchronously: the first assignment is the literal topic's alone.
        assert m.assigns[0] == {(literal, 0), (literal, 1)}, m.assigns
        assert m.owned == {(literal, 0), (literal, 1), (matched, 0), (matched, 1)}
        # A topic created later that matches is resolved again and assigned.
        created = f"{prefix}-b"
        create_topics(broker.bootstrap, {created: 1})
        poll_until([m], lambda: (created, 0) in m.owned, "the new matching topic assigned")
        assert not m.fatal()
    finally:
        m.c.close()


def test_regex_refused_by_re2_answers_invalid_regular_expression(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    topic = unique("re2")
    create_topics(broker.bootstrap, {topic: 1})
    m = Member(broker.bootstrap, unique("g-re2"))
    try:
        # A back-reference (librdkafka's own regex check accepts it and sends the pattern wrapped
        # in a group, where Python's re accepts it too); RE2, Kafka's RE2/J dialect, does not.
        m.subscribe([f"^({topic})(x)\\2$"])
        def refused() -> bool:  # librdkafka raises it as a fatal error carrying the broker's error
            return any(e.code() == KafkaError.INVALID_REGULAR_EXPRESSION
                       or "regular expression is not valid" in e.str() for e in m.errors)

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not refused():
            m.poll()
        assert refused(), m.errors
        assert not m.owned
    finally:
        m.c.close()


def test_rapid_subscribe_unsubscribe_cycles(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    t1, t2 = unique("cyc"), unique("cyc")
    create_topics(broker.bootstrap, {t1: 4, t2: 2})
    group = unique("g-cyc")
    members = [Member(broker.bootstrap, group) for _ in range(2)]
    subscriptions = [[t1], [t1, t2], [f"^{t2}$"], [t2, f"^{t1}$"]]
    try:
        for i in range(24):  # bounded: 24 cycles per member
            for k, m in enumerate(members):
                m.subscribe(subscriptions[(i + k) % len(subscriptions)])
            for _ in range(i % 3 * 4):
                for m in members:
                    m.poll(0.02)
            if i % 2:
                for m in members:
                    m.c.unsubscribe()
                    m.poll(0.01)
        for m in members:
            m.subscribe([t1, t2])
        want = {(t1, p) for p in range(4)} | {(t2, p) for p in range(2)}
        poll_until(members, lambda: set().union(*(m.owned for m in members)) == want
                   and all(len(m.owned) == 3 for m in members), "the group converging after the cycles")
        assert not [m.fatal() for m in members if m.fatal()]
    finally:
        for m in members:
            m.c.close()


@pytest.mark.parametrize("max_poll_ms", [pytest.param(7000, marks=pytest.mark.slow), 10000])  # 7000: make test-all
def test_member_past_max_poll_interval_is_fenced_rejoins_and_group_converges(broker_factory, max_poll_ms) -> None:
    broker = broker_factory(OVERRIDES)
    topic = unique("mpi")
    create_topics(broker.bootstrap, {topic: 6})
    group = unique("g-mpi")
    conf = {"max.poll.interval.ms": max_poll_ms}
    good, slow = Member(broker.bootstrap, group, **conf), Member(broker.bootstrap, group, **conf)
    both = [good, slow]
    try:
        for m in both:
            m.subscribe([topic])
        poll_until(both, lambda: len(good.owned) == 3 and len(slow.owned) == 3, "an even split")
        # `slow` stops polling: past max.poll.interval.ms it stops heartbeating, and the session
        # timeout fences it; `good` takes everything over.
        stopped = time.monotonic()
        poll_until([good], lambda: len(good.owned) == 6, "the live member owning everything", timeout=90)
        # ...and stays silent past its max.poll.interval.ms (librdkafka's 0089 test processes for 2x).
        poll_until([good], lambda: time.monotonic() > stopped + max_poll_ms / 1000 + 1, "the poll interval to pass")
        # `slow` polls again: its partitions are taken from it first (it has been out of the group
        # since its poll interval expired; its callbacks only run now)...
        poll_until(both, lambda: not slow.owned, "the slow member giving up its partitions", check_overlap=False)
        # ...then it rejoins, and the group converges to an even split.
        poll_until(both, lambda: len(good.owned) == 3 and len(slow.owned) == 3, "an even split again")
        assert not good.fatal() and not slow.fatal()
    finally:
        for m in both:
            m.c.close()
