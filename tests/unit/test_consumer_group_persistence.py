"""KIP-848 groups persisted in __consumer_offsets (replay after a restart, failed writes, timers,
deletion), and per-partition load / unload of the group coordinator."""

from __future__ import annotations

import asyncio
import struct
import uuid

from coordinator.consumer_protocol import ConsumerGroup, MemberState
from coordinator.group_metadata import ClassicGroup, GroupState
from protocol.errors import ErrorCode as E
from protocol.errors import KafkaError
from storage import internal_records as IR
from tests.unit.group_fakes import FakeAccess, ManualScheduler, make_coordinator, settle
from tests.unit.test_group_coordinator import form_group, start_join

T = uuid.UUID(int=7)


class Topics:
    def get(self, name: str):
        return (T, 4) if name == "t" else None

    def name_of(self, tid):
        return "t" if tid == T else None

    def names(self) -> list[str]:
        return ["t"]


TOPICS = Topics()


async def hb(gc, member: str, epoch: int, owned=None, group: str = "g", **kw):
    if epoch == 0:
        kw.setdefault("subscribed_topic_names", ["t"])
        kw.setdefault("rebalance_timeout_ms", 30000)
        owned = [] if owned is None else owned
    return await gc.consumer_group_heartbeat(TOPICS, group, member, epoch, owned=owned, **kw)


def owned(a) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in (a or {}).items()]


async def stable_pair(gc, group: str = "g") -> dict[str, tuple[int, dict]]:
    """Two members reconciled to a Stable group; returns member -> (epoch, assignment)."""
    state: dict[str, tuple[int, dict]] = {}
    for m in ("m1", "m2"):
        r = await hb(gc, m, 0, group=group)
        state[m] = (r.member_epoch, r.assignment or {})
    for _ in range(4):
        for m in ("m1", "m2"):
            epoch, assigned = state[m]
            r = await hb(gc, m, epoch, owned(assigned), group=group)
            assert r.error == E.NONE
            state[m] = (r.member_epoch, assigned if r.assignment is None else r.assignment)
    assert gc.groups[group].state_name == "Stable"
    return state


def record_types(access, group: str = "g") -> list[tuple[int, bool]]:
    out = []
    for _, rec, _ in access.records():
        rtype = struct.unpack_from(">h", rec.key)[0]
        if rtype in IR.CONSUMER_GROUP_RECORD_TYPES and IR.decode_record(IR.OFFSETS_TOPIC, rec.key, None)[1][
                "groupId"] == group:
            out.append((rtype, rec.value is None))
    return out


async def test_group_survives_a_restart_with_epochs_members_and_assignments() -> None:
    gc, access, clock = await make_coordinator()
    state = await stable_pair(gc)
    g = gc.groups["g"]
    assert (await gc.commit_offsets("g", state["m1"][0], "m1", None, {("t", 0): (42, -1, "")}))[("t", 0)] == E.NONE
    written = len(record_types(access))
    # A steady heartbeat changes nothing and writes nothing.
    assert (await hb(gc, "m1", state["m1"][0], owned(state["m1"][1]))).error == E.NONE
    assert len(record_types(access)) == written
    before = (g.group_epoch, g.assignment_epoch, {m: (x.member_epoch, x.assigned) for m, x in g.members.items()},
              g.target)
    await gc.stop()
    gc2, _, clock2 = await make_coordinator(access, ManualScheduler(clock.now))
    try:
        g2 = gc2.groups["g"]
        assert isinstance(g2, ConsumerGroup) and g2.state_name == "Stable"
        assert (g2.group_epoch, g2.assignment_epoch, {m: (x.member_epoch, x.assigned) for m, x in g2.members.items()},
                g2.target) == before
        # The members carry on with their epochs: no UNKNOWN_MEMBER_ID, no new epoch.
        for m, (epoch, assigned) in state.items():
            r = await hb(gc2, m, epoch, owned(assigned))
            assert r.error == E.NONE and r.member_epoch == epoch
        assert gc2.fetch_offsets("g", None, member_id="m1", member_epoch=state["m1"][0])[1][0][1] == 42
        assert g2.group_epoch == before[0]
        # Every member got a fresh session timeout on load: silence fences them, with records.
        await clock2.advance(gc2.consumer_session_timeout_ms + 1)
        assert g2.is_empty
        assert record_types(access)[-4:] == [(8, True), (7, True), (5, True), (3, False)]
    finally:
        await gc2.stop()
    gc3, _, _ = await make_coordinator(access, ManualScheduler(clock2.now))
    try:
        g3 = gc3.groups["g"]
        assert isinstance(g3, ConsumerGroup) and g3.is_empty and g3.group_epoch == g2.group_epoch
    finally:
        await gc3.stop()


async def test_failed_write_answers_coordinator_error_and_changes_nothing() -> None:
    gc, access, clock = await make_coordinator()
    try:
        r1 = await hb(gc, "m1", 0)
        g = gc.groups["g"]
        epoch, members, written = g.group_epoch, dict(g.members), len(access.records())
        access.fail_with = KafkaError(E.NOT_LEADER_OR_FOLLOWER)
        r = await hb(gc, "m2", 0)
        assert r.error == E.NOT_COORDINATOR and r.member_epoch == 0
        assert g.group_epoch == epoch and g.members == members and "m2" not in g.target
        access.fail_with = KafkaError(E.NOT_ENOUGH_REPLICAS)
        assert (await hb(gc, "m1", -1)).error == E.COORDINATOR_NOT_AVAILABLE
        assert "m1" in g.members and len(access.records()) == written
        # A brand-new group that could not be written does not exist.
        assert (await hb(gc, "m", 0, group="other")).error == E.COORDINATOR_NOT_AVAILABLE
        assert "other" not in gc.groups
        # A session expiry that cannot be written keeps the member (with a new timer) ...
        await clock.advance(gc.consumer_session_timeout_ms + 1)
        assert "m1" in g.members and g.members["m1"].session_timer is not None
        # ... and fences it once the log takes writes again.
        access.fail_with = None
        await clock.advance(gc.consumer_session_timeout_ms + 1)
        assert "m1" not in g.members
        r = await hb(gc, "m2", 0)
        assert r.error == E.NONE and r.member_epoch == g.group_epoch and r1.member_epoch < r.member_epoch
    finally:
        await gc.stop()


async def test_static_leave_revocation_and_delete_replay() -> None:
    gc, access, clock = await make_coordinator()
    state = await stable_pair(gc)
    # A static member leaves temporarily (epoch -2), a third member joins so m2 owes a revocation.
    assert (await hb(gc, "s", 0, instance_id="i-s")).error == E.NONE
    assert (await hb(gc, "s", -2, instance_id="i-s")).error == E.NONE
    for m in ("m1", "m2"):
        assert (await hb(gc, m, state[m][0], owned(state[m][1]))).error == E.NONE
    g = gc.groups["g"]
    assert any(m.state == MemberState.UNREVOKED_PARTITIONS for m in g.members.values())
    await gc.stop()
    gc2, _, clock2 = await make_coordinator(access, ManualScheduler(clock.now))
    try:
        g2 = gc2.groups["g"]
        assert g2.members["s"].left_static and g2.static_members == {"i-s": "s"}
        assert g2.members["m2"].state == g.members["m2"].state
        assert {m: x.pending_revocation for m, x in g2.members.items()} == \
            {m: x.pending_revocation for m, x in g.members.items()}
        for m in g2.members.values():
            assert (m.rebalance_timer is not None) == (m.state == MemberState.UNREVOKED_PARTITIONS)
        # Everybody goes; the group is deleted: tombstones, and a replay no longer knows it.
        for m in ("m1", "m2"):
            assert (await hb(gc2, m, -1)).error == E.NONE
        await clock2.advance(gc2.consumer_session_timeout_ms + 1)  # the static member's session ends
        assert g2.is_empty
        assert await gc2.delete_groups(["g"]) == {"g": E.NONE}
    finally:
        await gc2.stop()
    gc3, _, _ = await make_coordinator(access, ManualScheduler(clock2.now))
    try:
        assert "g" not in gc3.groups
        assert record_types(access)[-3:] == [(6, True), (4, True), (3, True)]
    finally:
        await gc3.stop()


async def test_empty_classic_group_becomes_a_consumer_group_that_replays() -> None:
    gc, access, clock = await make_coordinator()
    assert (await gc.commit_offsets("g", -1, "", None, {("t", 1): (5, -1, "")}))[("t", 1)] == E.NONE
    assert isinstance(gc.groups["g"], ClassicGroup)
    assert (await hb(gc, "m1", 0)).error == E.NONE
    assert (IR.GROUP_METADATA, True) in [(struct.unpack_from(">h", rec.key)[0], rec.value is None)
                                         for _, rec, _ in access.records()]
    await gc.stop()
    gc2, _, _ = await make_coordinator(access, ManualScheduler(clock.now))
    try:
        assert isinstance(gc2.groups["g"], ConsumerGroup) and set(gc2.groups["g"].members) == {"m1"}
        assert gc2.fetch_offsets("g", [("t", 1)])[1][0][1] == 5
    finally:
        await gc2.stop()


async def test_unload_and_load_partition() -> None:
    gc, access, clock = await make_coordinator()
    try:
        # A classic and a consumer group on the same partition, both with offsets.
        consumer = next(f"c{i}" for i in range(1000) if gc.partition_for(f"c{i}") == gc.partition_for("g"))
        p = gc.partition_for("g")
        members = await form_group(gc, 2)
        assert (await gc.commit_offsets("g", 2, members[0], None, {("t", 0): (7, -1, "")}))[("t", 0)] == E.NONE
        state = await stable_pair(gc, consumer)
        assert (await gc.commit_offsets(consumer, state["m1"][0], "m1", None,
                                        {("t", 2): (9, -1, "")}))[("t", 2)] == E.NONE
        # A classic member waiting in JoinGroup (for the other one) when the partition goes.
        waiting = start_join(gc, "g", members[0])
        await settle()
        assert not waiting.done()
        gc.unload_partition(p)
        await settle()
        assert not gc.is_loaded(p)
        assert waiting.done() and waiting.result().error == E.NOT_COORDINATOR
        assert gc.heartbeat("g", 2, members[0], None) == E.NOT_COORDINATOR
        assert (await hb(gc, "m1", state["m1"][0], group=consumer)).error == E.NOT_COORDINATOR
        assert gc.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR
        assert (await gc.commit_offsets(consumer, -1, "", None, {("t", 2): (1, -1, "")}))[("t", 2)] == \
            E.NOT_COORDINATOR
        assert gc.describe_group("g").error == E.NOT_COORDINATOR
        assert gc.consumer_group_describe(consumer)[0] == E.NOT_COORDINATOR
        assert "g" not in gc.groups and consumer not in gc.groups and not gc.offsets.has_offsets("g")
        # Loading it again brings both groups back with their offsets.
        await gc.load_partition(p)
        assert gc.is_loaded(p)
        g = gc.groups["g"]
        assert isinstance(g, ClassicGroup) and g.generation_id == 2 and set(g.members) == set(members)
        assert gc.fetch_offsets("g", None)[1][0][:2] == (("t", 0), 7)
        cg = gc.groups[consumer]
        assert isinstance(cg, ConsumerGroup) and cg.state_name == "Stable"
        assert (await hb(gc, "m1", state["m1"][0], owned(state["m1"][1]), group=consumer)).error == E.NONE
        assert gc.fetch_offsets(consumer, [("t", 2)])[1][0][1] == 9
        # While a partition loads, its groups answer COORDINATOR_LOAD_IN_PROGRESS.
        gc._loading.add(p)
        gc._loaded.discard(p)
        assert gc.heartbeat("g", g.generation_id, members[0], None) == E.COORDINATOR_LOAD_IN_PROGRESS
        gc._loading.discard(p)
        await gc.load_partition(p)
        assert gc.groups["g"].state == GroupState.STABLE
    finally:
        await gc.stop()


class GatedAccess(FakeAccess):
    """Appends wait for a gate: a partition can be unloaded while a write is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None

    async def append(self, topic: str, partition: int, batch: bytes, *, replicated: bool = True) -> int:
        if self.gate is not None:
            await self.gate.wait()
        return await super().append(topic, partition, batch)


async def test_unload_during_a_heartbeat_write() -> None:
    access = GatedAccess()
    gc, _, _ = await make_coordinator(access)
    try:
        p = gc.partition_for("g")
        assert (await hb(gc, "m1", 0)).error == E.NONE
        for member, fail in (("m2", None), ("m3", KafkaError(E.NOT_ENOUGH_REPLICAS))):
            access.gate, access.fail_with = asyncio.Event(), fail
            pending = asyncio.ensure_future(hb(gc, member, 0))
            await settle()
            gc.unload_partition(p)
            access.gate.set()
            # Answered NOT_COORDINATOR; a failed write does not bring the unloaded group back.
            assert (await pending).error == E.NOT_COORDINATOR
            assert "g" not in gc.groups
            access.gate, access.fail_with = None, None
            await gc.load_partition(p)
            assert (member in gc.groups["g"].members) == (fail is None)
    finally:
        await gc.stop()
