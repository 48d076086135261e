"""KIP-848 heartbeat: RE2 regexes resolved off the heartbeat path, Kafka's request validation,
the rejoin right after a leave, and the consumer-group timeout bounds."""

from __future__ import annotations

import asyncio
import uuid

from coordinator import topic_regex
from protocol.errors import ErrorCode as E
from tests.unit.group_fakes import make_coordinator


class Topics:
    """A mutable topic table: name -> partitions."""

    def __init__(self, **topics: int) -> None:
        self.ids: dict[str, uuid.UUID] = {}
        self.parts: dict[str, int] = {}
        for name, n in topics.items():
            self.add(name, n)

    def add(self, name: str, n: int) -> None:
        self.ids[name] = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        self.parts[name] = n

    def get(self, name: str):
        return (self.ids[name], self.parts[name]) if name in self.parts else None

    def name_of(self, tid):
        return next((n for n, i in self.ids.items() if i == tid and n in self.parts), None)

    def names(self) -> list[str]:
        return [*self.parts, "__consumer_offsets"]


async def join(gc, topics, member, **kw):
    kw.setdefault("rebalance_timeout_ms", 30000)
    kw.setdefault("owned", [])
    return (await gc.consumer_group_heartbeat(topics, "g", member, 0, **kw))


async def settle(gc) -> None:
    """Let the regex resolution task run to its end."""
    group = gc.groups["g"]
    for _ in range(100):
        if group.regex_task is None:
            return
        await asyncio.sleep(0)
    raise AssertionError("regex resolution did not finish")


def test_re2_syntax() -> None:
    assert topic_regex.check_regex("orders-.*") is None
    # Python's re accepts these; RE2 (Kafka's RE2/J dialect) does not.
    assert topic_regex.check_regex("(?=x).*") is not None
    assert topic_regex.check_regex("(a)(b)\\2") is not None
    resolved = topic_regex.resolve_now(["o.*", "(?=x)"], ["orders", "xo", "__consumer_offsets", "o"])
    assert resolved == {"o.*": frozenset({"orders", "o"}), "(?=x)": frozenset()}


async def test_resolve_yields_between_slices() -> None:
    names = [f"t{i}" for i in range(topic_regex.SLICE * 3)]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    try:
        resolved = await topic_regex.resolve(["t1.*"], names)
    finally:
        t.cancel()
    assert len(resolved["t1.*"]) == sum(1 for n in names if n.startswith("t1"))
    assert ticks >= 3  # the loop ran between slices


async def test_invalid_regex_answers_invalid_regular_expression() -> None:
    gc, _, _ = await make_coordinator()
    try:
        r = (await join(gc, Topics(t=1), "m", subscribed_topic_regex="(a)(b)\\2"))
        assert r.error == E.INVALID_REGULAR_EXPRESSION == 128 and "not a valid regular expression" in r.message
    finally:
        await gc.stop()


async def test_regex_resolved_asynchronously_then_on_topic_changes() -> None:
    gc, _, _ = await make_coordinator()
    topics = Topics(lit=2, rx1=1, other=1)
    lit, rx1 = topics.ids["lit"], topics.ids["rx1"]
    try:
        r = (await join(gc, topics, "m", subscribed_topic_names=["lit"], subscribed_topic_regex="rx.*"))
        # The first heartbeat answers with the literal topic only: the regex is not resolved yet.
        assert r.error == E.NONE and r.assignment == {lit: {0, 1}}
        g = gc.groups["g"]
        epoch = g.group_epoch
        await settle(gc)
        assert g.resolved_regex == {"rx.*": frozenset({"rx1"})} and g.group_epoch == epoch + 1
        r = (await gc.consumer_group_heartbeat(topics, "g", "m", r.member_epoch, owned=[(lit, [0, 1])]))
        assert r.assignment == {lit: {0, 1}, rx1: {0}} and r.member_epoch == epoch + 1
        # A matching topic is created: resolved again, off the notification.
        topics.add("rx2", 2)
        gc.on_topics_changed()
        await settle(gc)
        rx2 = topics.ids["rx2"]
        r = (await gc.consumer_group_heartbeat(topics, "g", "m", r.member_epoch, owned=[(lit, [0, 1]), (rx1, [0])]))
        assert r.assignment == {lit: {0, 1}, rx1: {0}, rx2: {0, 1}}
        # A matching topic is deleted.
        del topics.parts["rx1"]
        gc.on_topics_changed()
        await settle(gc)
        assert g.resolved_regex == {"rx.*": frozenset({"rx2"})}
        # A second member with the same, already resolved regex counts at once.
        r2 = (await join(gc, topics, "m2", subscribed_topic_regex="rx.*"))
        assert r2.error == E.NONE and g.target["m2"]
        # Nobody subscribes to the regex any more: it is forgotten.
        (await gc.consumer_group_heartbeat(topics, "g", "m", -1))
        (await gc.consumer_group_heartbeat(topics, "g", "m2", -1))
        assert g.resolved_regex == {}
    finally:
        await gc.stop()


async def test_empty_regex_is_no_subscription_change() -> None:
    gc, _, _ = await make_coordinator()
    topics = Topics(t=2)
    try:
        # librdkafka sends SubscribedTopicRegex="" with every full heartbeat; it used to bump the
        # group epoch (and restart reconciliation) each time.
        r = (await join(gc, topics, "m", subscribed_topic_names=["t"], subscribed_topic_regex=""))
        epoch = gc.groups["g"].group_epoch
        r = (await gc.consumer_group_heartbeat(topics, "g", "m", r.member_epoch, subscribed_topic_names=["t"],
                                        subscribed_topic_regex="", rebalance_timeout_ms=30000,
                                        owned=[(topics.ids["t"], [0, 1])]))
        assert r.error == E.NONE and gc.groups["g"].group_epoch == epoch and r.member_epoch == epoch
    finally:
        await gc.stop()


async def test_request_validation_follows_kafka() -> None:
    gc, _, _ = await make_coordinator()
    topics = Topics(t=1)
    hb = gc.consumer_group_heartbeat
    try:
        assert (await hb(topics, "g", "m", -3)).error == E.INVALID_REQUEST  # MemberEpoch is invalid.
        assert (await hb(topics, "g", "m", -2)).error == E.INVALID_REQUEST  # InstanceId can't be null.
        assert (await hb(topics, "g", "", 5)).error == E.INVALID_REQUEST
        # v0, static leave: the member id may be empty (the instance id names the member).
        assert (await hb(topics, "g", "", -2, instance_id="i", api_version=0)).error == E.UNKNOWN_MEMBER_ID
        assert (await hb(topics, "g", "", 0, api_version=0, subscribed_topic_names=["t"], rebalance_timeout_ms=1,
                  owned=[])).error == E.NONE
        assert (await hb(topics, "g", "m", 0, subscribed_topic_names=["t"], owned=[])).error == E.INVALID_REQUEST
        assert (await hb(topics, "g", "m", 0, rebalance_timeout_ms=1, owned=[])).error == E.INVALID_REQUEST
    finally:
        await gc.stop()


async def test_rejoin_right_after_leave_with_an_incremental_heartbeat() -> None:
    gc, _, clock = await make_coordinator()
    topics = Topics(t=2)
    hb = gc.consumer_group_heartbeat
    try:
        assert (await join(gc, topics, "m", subscribed_topic_names=["t"], rebalance_timeout_ms=7000)).error == E.NONE
        assert (await hb(topics, "g", "m", -1)).error == E.NONE
        # librdkafka (unsubscribe + subscribe at once) rejoins without RebalanceTimeoutMs and
        # TopicPartitions: a member that just left is known, so this is not INVALID_REQUEST.
        r = (await hb(topics, "g", "m", 0, subscribed_topic_names=["t"]))
        assert r.error == E.NONE and r.assignment == {topics.ids["t"]: {0, 1}}
        assert gc.groups["g"].members["m"].rebalance_timeout_ms == 7000
        # A member the coordinator never saw gets Kafka's answer.
        assert (await hb(topics, "g", "new", 0, subscribed_topic_names=["t"])).error == E.INVALID_REQUEST
        # Nor is one that left longer than a session timeout ago remembered.
        assert (await hb(topics, "g", "m", -1)).error == E.NONE
        await clock.advance(gc.consumer_session_timeout_ms + 1)
        assert (await hb(topics, "g", "m", 0, subscribed_topic_names=["t"])).error == E.INVALID_REQUEST
    finally:
        await gc.stop()


async def test_timeouts_within_their_bounds() -> None:
    gc, _, _ = await make_coordinator(config={"group.consumer.session.timeout.ms": 6000,
                                              "group.consumer.heartbeat.interval.ms": 500})
    try:
        # Kafka's defaults: min session 45 s, min heartbeat interval 5 s.
        assert gc.consumer_session_timeout_ms == 45000 and gc.consumer_heartbeat_interval_ms == 5000
    finally:
        await gc.stop()
    gc, _, _ = await make_coordinator(config={
        "group.consumer.session.timeout.ms": 6000, "group.consumer.min.session.timeout.ms": 6000,
        "group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 500})
    try:
        assert gc.consumer_session_timeout_ms == 6000 and gc.consumer_heartbeat_interval_ms == 500
    finally:
        await gc.stop()
