"""KIP-848 ConsumerGroupHeartbeat: epochs, target assignment, revoke-before-assign reconciliation."""

from __future__ import annotations

import uuid

from coordinator.consumer_protocol import MemberState
from protocol.errors import ErrorCode as E
from tests.unit.group_fakes import make_coordinator

T = uuid.UUID(int=7)


class Topics:
    def __init__(self, partitions: int = 6) -> None:
        self.partitions = partitions

    def get(self, name: str):
        return (T, self.partitions) if name == "t" else None

    def name_of(self, tid):
        return "t" if tid == T else None

    def names(self) -> list[str]:
        return ["t", "__consumer_offsets"]


async def hb(gc, topics, member, epoch, owned=None, **kw):
    if epoch == 0:
        kw.setdefault("subscribed_topic_names", ["t"])
        kw.setdefault("rebalance_timeout_ms", 30000)
        owned = [] if owned is None else owned
    return await gc.consumer_group_heartbeat(topics, "g", member, epoch, owned=owned, **kw)


def owned_list(a):
    return [(t, sorted(ps)) for t, ps in a.items()]


async def test_join_reconcile_and_leave() -> None:
    gc, _, clock = await make_coordinator()
    topics = Topics()
    try:
        r1 = (await hb(gc, topics, "m1", 0))
        assert r1.error == E.NONE and r1.member_epoch == 1 and r1.assignment == {T: set(range(6))}
        r2 = (await hb(gc, topics, "m2", 0))
        # m2 is at the new epoch at once, but everything is still owned by m1 (unreleased).
        assert r2.error == E.NONE and r2.member_epoch == 2 and not r2.assignment.get(T)
        g = gc.groups["g"]
        assert g.state_name == "Reconciling" and g.group_epoch == 2
        # m1 must first give up half of its partitions, keeping its epoch.
        r1 = (await hb(gc, topics, "m1", 1, owned_list({T: set(range(6))})))
        kept = r1.assignment[T]
        assert r1.member_epoch == 1 and len(kept) == 3 and g.members["m1"].state == MemberState.UNREVOKED_PARTITIONS
        # m2 cannot get them before m1 confirms.
        r2 = (await hb(gc, topics, "m2", 2, []))
        assert r2.member_epoch == 2 and r2.assignment is None
        r1 = (await hb(gc, topics, "m1", 1, owned_list({T: kept})))
        assert r1.member_epoch == 2
        r2 = (await hb(gc, topics, "m2", 2, []))
        assert r2.assignment[T] == set(range(6)) - kept
        assert g.state_name == "Stable"
        # Offsets are committed with the member epoch.
        assert (await gc.commit_offsets("g", 1, "m2", None, {("t", 0): (1, -1, "")}))[("t", 0)] == E.STALE_MEMBER_EPOCH
        assert (await gc.commit_offsets("g", 2, "m2", None, {("t", 0): (1, -1, "")}))[("t", 0)] == E.NONE
        assert gc.fetch_offsets("g", None, member_id="m2", member_epoch=1)[0] == E.STALE_MEMBER_EPOCH
        # Fencing: a wrong epoch, an unknown member.
        assert (await hb(gc, topics, "m2", 9, [])).error == E.FENCED_MEMBER_EPOCH
        assert (await hb(gc, topics, "ghost", 2, [])).error == E.UNKNOWN_MEMBER_ID
        # m1 leaves; m2 gets everything at the next epoch.
        assert (await hb(gc, topics, "m1", -1)).error == E.NONE
        r2 = (await hb(gc, topics, "m2", 2, owned_list({T: set(range(6)) - kept})))
        assert r2.member_epoch == 3 and r2.assignment[T] == set(range(6))
        # Session expiry fences a silent member.
        await clock.advance(gc.consumer_session_timeout_ms + 1)
        assert "m2" not in g.members and g.state_name == "Empty"
    finally:
        await gc.stop()


async def test_validation_and_partition_growth() -> None:
    gc, _, _ = await make_coordinator(config={"group.consumer.assignors": "range"})
    topics = Topics(2)
    try:
        assert (await hb(gc, topics, "", 0)).error == E.INVALID_REQUEST  # v1: the client names itself
        assert (await gc.consumer_group_heartbeat(topics, "g", "m", 0, owned=[])).error == E.INVALID_REQUEST
        assert (await hb(gc, topics, "m", 0, server_assignor="sticky")).error == E.UNSUPPORTED_ASSIGNOR
        r = (await hb(gc, topics, "m", 0))
        assert r.assignment == {T: {0, 1}} and gc.groups["g"].assignor_name == "range"
        topics.partitions = 4  # partitions added: new epoch, new target
        r = (await hb(gc, topics, "m", r.member_epoch, owned_list({T: {0, 1}})))
        assert r.member_epoch == 2 and r.assignment == {T: {0, 1, 2, 3}}
        # Classic members cannot join a consumer group.
        j = await gc.join_group("g", "", None, "consumer", [("range", b"")], 10000, 10000, "c", "h")
        assert j.error == E.INCONSISTENT_GROUP_PROTOCOL
        assert [g.group_type for g in gc.list_groups()[1]] == ["consumer"]
    finally:
        await gc.stop()


async def test_static_member_rejoins_with_its_assignment() -> None:
    gc, _, _ = await make_coordinator()
    topics = Topics(4)
    try:
        r1 = (await hb(gc, topics, "a1", 0, instance_id="i-a"))
        r2 = (await hb(gc, topics, "b1", 0, instance_id="i-b"))
        r1 = (await hb(gc, topics, "a1", r1.member_epoch, owned_list(r1.assignment)))
        r1 = (await hb(gc, topics, "a1", r1.member_epoch, owned_list(r1.assignment)))
        r2 = (await hb(gc, topics, "b1", r2.member_epoch, []))
        a_parts = gc.groups["g"].members["a1"].assigned
        epoch = gc.groups["g"].group_epoch
        assert (await hb(gc, topics, "a2", 0, instance_id="i-a")).error == E.UNRELEASED_INSTANCE_ID
        assert (await hb(gc, topics, "a1", -2, instance_id="i-a")).error == E.NONE
        r = (await hb(gc, topics, "a2", 0, instance_id="i-a"))
        assert r.error == E.NONE and r.assignment == a_parts and gc.groups["g"].group_epoch == epoch
    finally:
        await gc.stop()
