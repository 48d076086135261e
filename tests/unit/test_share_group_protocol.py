"""KIP-932 share groups in the group coordinator: ShareGroupHeartbeat, initialization of
share-partitions through the share coordinator, the simple assignor, persistence and the admin
operations. The coordinators run over an in-memory partition log (tests/unit/group_fakes.py)."""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share_coordinator import ShareCoordinator
from coordinator.share_group import ShareGroup, assign
from protocol.errors import ErrorCode as E
from tests.unit.group_fakes import Config, make_coordinator, settle

T = uuid.UUID(int=7)
U = uuid.UUID(int=8)


class Topics:
    def __init__(self, partitions: int = 6) -> None:
        self.sizes = {"t": (T, partitions), "u": (U, 2)}

    def get(self, name: str):
        return self.sizes.get(name)

    def name_of(self, tid):
        return next((n for n, (i, _) in self.sizes.items() if i == tid), None)

    def names(self) -> list[str]:
        return list(self.sizes)


class InProcessShareState:
    """The share-state RPCs as one broker makes them: calls into the share coordinator."""

    def __init__(self, coord: ShareCoordinator) -> None:
        self.coord = coord

    async def initialize(self, group_id, topics):
        return {(tid, p): await self.coord.initialize(group_id, tid, p, se, so)
                for tid, parts in topics.items() for p, (se, so) in parts.items()}

    async def read_summary(self, group_id, topics):
        return {(tid, p): self.coord.read_summary(group_id, tid, p) for tid, parts in topics.items() for p in parts}

    async def delete(self, group_id, topics):
        return {(tid, p): await self.coord.delete(group_id, tid, p) for tid, parts in topics.items() for p in parts}


async def setup(config: dict | None = None):
    cfg = {"group.share.session.timeout.ms": 45000, "group.share.heartbeat.interval.ms": 5000, **(config or {})}
    gc, access, clock = await make_coordinator(config=cfg)
    coord = ShareCoordinator(access, Config({"share.coordinator.state.topic.num.partitions": 2}),
                             partition_count=lambda tid: {T: 6, U: 2}.get(tid), now_ms=clock.now_ms)
    await coord.start()
    await coord.ensure_topic()
    access.share_state = InProcessShareState(coord)
    return gc, coord, access, clock


async def hb(gc, member, epoch, names=None, topics=None):
    if epoch == 0 and names is None:
        names = ["t"]
    return await gc.share_group_heartbeat(topics or Topics(), "sg", member, epoch, subscribed_topic_names=names,
                                          client_id="c", client_host="/127.0.0.1")


async def joined(gc, members):
    """Join ``members``, let initialization finish, heartbeat until every member holds its target."""
    epochs = {}
    for m in members:
        r = await hb(gc, m, 0)
        assert r.error == E.NONE
        epochs[m] = r.member_epoch
    await settle()
    out = {}
    for _ in range(2):
        for m in members:
            r = await hb(gc, m, epochs[m])
            assert r.error == E.NONE, r
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                out[m] = r.assignment
    return epochs, out


async def test_first_heartbeat_initializes_then_assigns() -> None:
    gc, coord, _, _ = await setup()
    try:
        r = await hb(gc, "m1", 0)
        assert r.error == E.NONE and r.member_epoch == 1 and r.assignment == {}  # nothing initialized yet
        assert r.heartbeat_interval_ms == 5000
        await settle()
        g = gc.groups["sg"]
        assert isinstance(g, ShareGroup) and set(g.initialized[T].partitions) == set(range(6))
        assert coord.read_summary("sg", T, 3)[2:] == (1, -1, -1)  # state epoch = group epoch, start unknown
        r = await hb(gc, "m1", 1)
        assert r.member_epoch == 2 and r.assignment == {T: frozenset(range(6))}
        assert g.state_name == "Stable"
    finally:
        await gc.stop()


async def test_members_share_the_partitions_evenly() -> None:
    gc, _, _, _ = await setup()
    try:
        _, assignments = await joined(gc, ["a", "b", "c"])
        g = gc.groups["sg"]
        held = Counter(p for m in g.members.values() for p in m.assigned.get(T, ()))
        assert sorted(len(m.assigned[T]) for m in g.members.values()) == [2, 2, 2]
        assert held == Counter(range(6))  # each partition to one member: 3 members, 6 partitions
        # 7 members on 6 partitions: every partition goes to two of them, loads within one.
        await joined(gc, ["d", "e", "f", "g"])
        for m in list(gc.groups["sg"].members.values()):
            await hb(gc, m.member_id, m.member_epoch)
        g = gc.groups["sg"]  # a change replaces the group object (copy on write)
        held = Counter(p for a in g.target.values() for p in a.get(T, ()))
        assert set(held.values()) == {2}
        loads = [len(a.get(T, ())) for a in g.target.values()]
        assert max(loads) - min(loads) <= 1
    finally:
        await gc.stop()


async def test_leave_session_expiry_and_errors() -> None:
    gc, _, _, clock = await setup()
    try:
        epochs, _ = await joined(gc, ["a", "b"])
        r = await hb(gc, "a", -1)
        assert (r.error, r.member_epoch) == (E.NONE, -1) and "a" not in gc.groups["sg"].members
        assert (await hb(gc, "a", 5)).error == E.UNKNOWN_MEMBER_ID
        assert (await hb(gc, "b", epochs["b"] + 7)).error == E.FENCED_MEMBER_EPOCH
        assert (await hb(gc, "", 0)).error == E.INVALID_REQUEST
        assert (await gc.share_group_heartbeat(Topics(), "sg", "x", 0, subscribed_topic_names=[])).error == \
            E.INVALID_REQUEST
        assert (await gc.share_group_heartbeat(Topics(), "sg", "x", -3, subscribed_topic_names=None)).error == \
            E.INVALID_REQUEST
        assert (await gc.share_group_heartbeat(Topics(), "nope", "x", 1)).error == E.GROUP_ID_NOT_FOUND
        await clock.advance(45000)
        g = gc.groups["sg"]
        assert "b" not in g.members and g.state_name == "Empty"
    finally:
        await gc.stop()


async def test_groups_of_other_types_refuse_each_other() -> None:
    gc, _, _, _ = await setup()
    try:
        await gc.commit_offsets("classic", -1, "", None, {("t", 0): (5, -1, "")})
        r = await gc.share_group_heartbeat(Topics(), "classic", "m", 0, subscribed_topic_names=["t"])
        assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
        await hb(gc, "m", 0)
        errors = await gc.commit_offsets("sg", -1, "", None, {("t", 0): (5, -1, "")})
        assert errors == {("t", 0): E.GROUP_ID_NOT_FOUND}
        assert gc.fetch_offsets("sg", None)[0] == E.GROUP_ID_NOT_FOUND
        cr = await gc.consumer_group_heartbeat(Topics(), "sg", "c", 0, owned=[], subscribed_topic_names=["t"],
                                               rebalance_timeout_ms=1000)
        assert cr.error == E.GROUP_ID_NOT_FOUND
        join = await gc.join_group("sg", "", None, "consumer", [("range", b"")], 10000, 10000, "c", "/h")
        assert join.error == E.INCONSISTENT_GROUP_PROTOCOL
        listing = {g.group_id: g for g in gc.list_groups(types=["share"])[1]}
        assert set(listing) == {"sg"} and listing["sg"].protocol_type == "share"
    finally:
        await gc.stop()


async def test_state_survives_a_reload() -> None:
    gc, _, access, clock = await setup()
    try:
        epochs, _ = await joined(gc, ["a", "b"])
        before = gc.groups["sg"]
        p = gc.partition_for("sg")
        gc.unload_partition(p)
        await gc.load_partition(p)
        after = gc.groups["sg"]
        assert after is not before
        assert (after.group_epoch, after.assignment_epoch, after.metadata_hash) == (
            before.group_epoch, before.assignment_epoch, before.metadata_hash)
        assert {m: (x.member_epoch, x.assigned) for m, x in after.members.items()} == {
            m: (x.member_epoch, x.assigned) for m, x in before.members.items()}
        assert after.initialized == before.initialized and after.target == before.target
        assert (await hb(gc, "a", epochs["a"])).error == E.NONE
    finally:
        await gc.stop()


async def test_a_failed_write_changes_nothing() -> None:
    gc, _, access, _ = await setup()
    try:
        await joined(gc, ["a"])
        g = gc.groups["sg"]
        access.fail_with = type("E", (Exception,), {"code": E.NOT_LEADER_OR_FOLLOWER})()
        r = await hb(gc, "b", 0)
        assert r.error == E.NOT_COORDINATOR
        assert gc.groups["sg"] is g and set(g.members) == {"a"}
        access.fail_with = None
        assert (await hb(gc, "b", 0)).error == E.NONE
    finally:
        await gc.stop()


async def test_admin_alter_describe_delete() -> None:
    gc, coord, _, _ = await setup()
    try:
        epochs, _ = await joined(gc, ["a"])
        code, _, _ = await gc.alter_share_group_offsets(Topics(), "sg", {"t": {0: 3}})
        assert code == E.NON_EMPTY_GROUP
        await hb(gc, "a", -1)
        code, _, results = await gc.alter_share_group_offsets(Topics(), "sg", {"t": {0: 3, 9: 1}, "x": {0: 1}})
        assert code == E.NONE
        by = {r.name: r.partitions for r in results}
        assert by["t"] == {0: (E.NONE, None), 9: (E.UNKNOWN_TOPIC_OR_PARTITION, None)}
        assert by["x"] == {0: (E.UNKNOWN_TOPIC_OR_PARTITION, None)}
        code, _, rows = await gc.describe_share_group_offsets(Topics(), "sg", None)
        starts = {p: start for name, _, parts in rows for p, start, *_ in parts}
        assert code == E.NONE and starts[0] == 3 and starts[1] == -1
        code, _, results = await gc.delete_share_group_offsets(Topics(), "sg", ["t", "u"])
        assert {r.name: r.error for r in results} == {"t": E.NONE, "u": E.UNKNOWN_TOPIC_OR_PARTITION}
        assert coord.read_summary("sg", T, 0)[4] == -1 and T not in gc.groups["sg"].initialized
        assert (await gc.alter_share_group_offsets(Topics(), "nope", {"t": {0: 1}}))[0] == E.GROUP_ID_NOT_FOUND
        await gc.alter_share_group_offsets(Topics(), "sg", {"t": {1: 4}})
        assert await gc.delete_groups(["sg"]) == {"sg": E.NONE}
        assert "sg" not in gc.groups and coord.read_summary("sg", T, 1)[4] == -1
    finally:
        await gc.stop()


@settings(max_examples=200, deadline=None)
@given(members=st.integers(1, 9), parts=st.integers(1, 9), seed=st.randoms())
def test_simple_assignor_balances_and_covers(members: int, parts: int, seed) -> None:
    ids = [f"m{i}" for i in range(members)]
    previous = {m: {T: frozenset(seed.sample(range(parts), seed.randint(0, parts)))} for m in ids}
    out = assign({m: frozenset({T}) for m in ids}, {T: frozenset(range(parts))}, previous)
    sharing = -(-members // parts)
    held = Counter(p for a in out.values() for p in a.get(T, ()))
    assert held == Counter({p: sharing for p in range(parts)})
    loads = [len(a.get(T, ())) for a in out.values()]
    assert max(loads) - min(loads) <= 1
