"""GroupCoordinator state machine and offsets, driven with an in-memory log and a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from coordinator.group_coordinator import GroupCoordinator
from coordinator.group_metadata import GroupState, JoinResult
from protocol.errors import ErrorCode as E
from storage import internal_records as IR
from tests.unit.group_fakes import FakeAccess, ManualScheduler, make_coordinator, settle

SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str) -> bytes:
    return IR.encode(IR.CONSUMER_SUBSCRIPTION, 0, {"topics": list(topics), "userData": None})


PROTOCOLS = [("range", subscription("t")), ("roundrobin", subscription("t"))]


@pytest.fixture
async def coord() -> AsyncIterator[tuple[GroupCoordinator, FakeAccess, ManualScheduler]]:
    gc, access, clock = await make_coordinator()
    yield gc, access, clock
    await gc.stop()


def start_join(gc: GroupCoordinator, group: str = "g", member_id: str = "", instance: str | None = None,
               protocols: list[tuple[str, bytes]] | None = None, client: str = "c", *,
               session: int = SESSION, rebalance: int = REBALANCE) -> asyncio.Task[JoinResult]:
    return asyncio.ensure_future(gc.join_group(group, member_id, instance, "consumer", protocols or PROTOCOLS,
                                               session, rebalance, client, "/127.0.0.1"))


async def join_new(gc: GroupCoordinator, group: str = "g", **kw) -> asyncio.Task[JoinResult]:
    """MEMBER_ID_REQUIRED round trip, then the real join (returned as a parked task)."""
    first = await start_join(gc, group, **kw)
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id
    task = start_join(gc, group, first.member_id, **kw)
    await settle()
    await gc.scheduler.advance(0)  # group.initial.rebalance.delay.ms = 0 still goes through a timer
    return task


async def form_group(gc: GroupCoordinator, n: int, group: str = "g") -> list[str]:
    """n members in a Stable generation; returns their member ids (leader first)."""
    tasks = []
    for _ in range(n):
        tasks.append(await join_new(gc, group))
        await settle()
    # Members of the first generation must rejoin for the newcomers' rebalance.
    for _ in range(n + 1):
        done = [t for t in tasks if t.done()]
        if len(done) == n and len({t.result().generation_id for t in done}) == 1:
            break
        for i, t in enumerate(tasks):
            if t.done():
                r = t.result()
                tasks[i] = start_join(gc, group, r.member_id)
        await settle()
    results = [t.result() for t in tasks]
    leader = results[0].leader_id
    gen = results[0].generation_id
    ids = [r.member_id for r in results]
    assign = {mid: f"a-{mid}".encode() for mid in ids}
    syncs = [asyncio.ensure_future(gc.sync_group(group, gen, mid, None, "consumer", results[0].protocol_name,
                                                 assign if mid == leader else {})) for mid in ids]
    await settle()
    for s, mid in zip(syncs, ids, strict=True):
        assert s.result().error == E.NONE and s.result().assignment == assign[mid]
    return [leader] + [m for m in ids if m != leader]


async def test_single_member_join_sync_stable(coord) -> None:
    gc, access, _ = coord
    task = await join_new(gc)
    r = task.result()
    assert r.error == E.NONE and r.generation_id == 1 and r.leader_id == r.member_id
    assert r.protocol_name == "range" and [m[0] for m in r.members] == [r.member_id]
    s = await gc.sync_group("g", 1, r.member_id, None, "consumer", "range", {r.member_id: b"A"})
    assert s.error == E.NONE and s.assignment == b"A"
    assert gc.groups["g"].state == GroupState.STABLE
    # The generation is in the log with Kafka's GroupMetadataValue layout.
    recs = [IR.decode_record(IR.OFFSETS_TOPIC, r.key, r.value) for _, r, _ in access.records()]
    gm = [v for t, k, _, v in recs if t == IR.GROUP_METADATA and k["group"] == "g" and v and v["members"]]
    assert gm[-1]["generation"] == 1 and gm[-1]["members"][0]["assignment"] == b"A"


async def test_member_id_required_and_validation(coord) -> None:
    gc, _, _ = coord
    assert (await gc.join_group("", "", None, "consumer", PROTOCOLS, SESSION, REBALANCE, "c", "h")).error \
        == E.INVALID_GROUP_ID
    assert (await gc.join_group("g", "", None, "consumer", PROTOCOLS, 10, REBALANCE, "c", "h")).error \
        == E.INVALID_SESSION_TIMEOUT
    assert (await gc.join_group("g", "", None, "consumer", [], SESSION, REBALANCE, "c", "h")).error \
        == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await gc.join_group("g", "nobody", None, "consumer", PROTOCOLS, SESSION, REBALANCE, "c", "h")).error \
        == E.UNKNOWN_MEMBER_ID
    assert "g" not in gc.groups  # failed joins leave nothing behind


async def test_second_member_triggers_rebalance(coord) -> None:
    gc, _, _ = coord
    m1, m2 = await form_group(gc, 2)
    g = gc.groups["g"]
    assert g.generation_id == 2 and g.state == GroupState.STABLE and len(g.members) == 2
    # A third member: existing members learn about the rebalance from their heartbeat.
    t3 = await join_new(gc)
    assert g.state == GroupState.PREPARING_REBALANCE and not t3.done()
    assert gc.heartbeat("g", 2, m1, None) == E.REBALANCE_IN_PROGRESS
    j1, j2 = start_join(gc, member_id=m1), start_join(gc, member_id=m2)
    await settle()
    results = [j1.result(), j2.result(), t3.result()]
    assert {r.generation_id for r in results} == {3}
    leader = [r for r in results if r.member_id == r.leader_id]
    assert len(leader) == 1 and len(leader[0].members) == 3
    assert all(not r.members for r in results if r.member_id != r.leader_id)


async def test_incompatible_protocols_rejected(coord) -> None:
    gc, _, _ = coord
    await form_group(gc, 1)
    r = await gc.join_group("g", "", None, "consumer", [("sticky", b"")], SESSION, REBALANCE, "c", "h")
    assert r.error == E.INCONSISTENT_GROUP_PROTOCOL
    r = await gc.join_group("g", "", None, "connect", PROTOCOLS, SESSION, REBALANCE, "c", "h")
    assert r.error == E.INCONSISTENT_GROUP_PROTOCOL


async def test_protocol_vote() -> None:
    gc, _, _ = await make_coordinator()
    try:
        a = [("cooperative-sticky", b""), ("range", b"")]
        b = [("range", b""), ("cooperative-sticky", b"")]
        t1 = await join_new(gc, protocols=a)
        t2 = await join_new(gc, protocols=b)
        t3 = await join_new(gc, protocols=b)
        await settle()
        rejoin = start_join(gc, member_id=t1.result().member_id, protocols=a)
        await settle()
        assert {t.result().protocol_name for t in (t2, t3)} == {"range"} and rejoin.result().protocol_name == "range"
    finally:
        await gc.stop()


async def test_session_timeout_evicts_member(coord) -> None:
    gc, _, clock = coord
    m1, m2 = await form_group(gc, 2)
    for _ in range(3):
        await clock.advance(SESSION // 2)
        assert gc.heartbeat("g", 2, m1, None) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    g = gc.groups["g"]
    assert m2 not in g.members and g.state == GroupState.PREPARING_REBALANCE
    r = await start_join(gc, member_id=m1)
    assert r.generation_id == 3 and [m[0] for m in r.members] == [m1]


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(coord) -> None:
    gc, _, clock = coord
    m1, m2 = await form_group(gc, 2)
    j1 = start_join(gc, member_id=m1)
    await settle()
    assert not j1.done()
    await clock.advance(REBALANCE)  # m2 keeps quiet
    r = j1.result()
    assert r.error == E.NONE and r.generation_id == 3 and [m[0] for m in r.members] == [m1]
    assert gc.heartbeat("g", 3, m2, None) == E.UNKNOWN_MEMBER_ID


async def test_static_member_rejoin_keeps_assignment_without_rebalance(coord) -> None:
    gc, _, _ = coord
    t1 = start_join(gc, instance="i-1")
    await settle()
    await gc.scheduler.advance(0)
    r1 = t1.result()
    assert r1.error == E.NONE  # static members skip MEMBER_ID_REQUIRED
    old_id = r1.member_id
    assert old_id.startswith("i-1-")
    assert (await gc.sync_group("g", 1, old_id, "i-1", None, None, {old_id: b"P0"})).assignment == b"P0"
    # The process restarts: same instance id, no member id.
    r2 = await start_join(gc, instance="i-1")
    g = gc.groups["g"]
    assert r2.error == E.NONE and r2.generation_id == 1 and r2.member_id != old_id
    assert r2.leader_id == old_id  # the old leader id: the member must not reassign a Stable group
    assert g.state == GroupState.STABLE and g.generation_id == 1
    s = await gc.sync_group("g", 1, r2.member_id, "i-1", None, None, {})
    assert s.error == E.NONE and s.assignment == b"P0"
    # The zombie with the old member id is fenced everywhere.
    assert gc.heartbeat("g", 1, old_id, "i-1") == E.FENCED_INSTANCE_ID
    assert (await gc.commit_offsets("g", 1, old_id, "i-1", {("t", 0): (1, -1, "")}))[("t", 0)] == E.FENCED_INSTANCE_ID
    assert gc.leave_group("g", [(old_id, "i-1")])[1] == [E.FENCED_INSTANCE_ID]
    # A static member leaves by instance id alone.
    assert gc.leave_group("g", [("", "i-1")])[1] == [E.NONE]
    await settle()
    assert g.state == GroupState.EMPTY


async def test_leave_group_batch(coord) -> None:
    gc, _, _ = coord
    m1, m2, m3 = await form_group(gc, 3)
    top, errs = gc.leave_group("g", [(m2, None), ("ghost", None), (m3, None)])
    assert top == E.NONE and errs == [E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE]
    g = gc.groups["g"]
    assert set(g.members) == {m1} and g.state == GroupState.PREPARING_REBALANCE
    assert gc.leave_group("nope", [(m1, None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


async def test_sync_errors(coord) -> None:
    gc, _, _ = coord
    (m1,) = await form_group(gc, 1)
    assert (await gc.sync_group("g", 7, m1, None, None, None, {})).error == E.ILLEGAL_GENERATION
    assert (await gc.sync_group("g", 1, "x", None, None, None, {})).error == E.UNKNOWN_MEMBER_ID
    assert (await gc.sync_group("g", 1, m1, None, "consumer", "other", {})).error == E.INCONSISTENT_GROUP_PROTOCOL
    t2 = await join_new(gc)
    assert not t2.done()
    assert (await gc.sync_group("g", 1, m1, None, None, None, {})).error == E.REBALANCE_IN_PROGRESS


async def test_rebalance_during_sync_wait_answers_rebalance_in_progress(coord) -> None:
    gc, _, _ = coord
    t1 = await join_new(gc)
    t2 = await join_new(gc)
    r1 = t1.result()
    rejoin = start_join(gc, member_id=r1.member_id)
    await settle()
    r1, r2 = rejoin.result(), t2.result()
    follower = r2 if r2.leader_id != r2.member_id else r1
    waiting = asyncio.ensure_future(gc.sync_group("g", follower.generation_id, follower.member_id, None, None, None, {}))
    await settle()
    assert not waiting.done()
    await join_new(gc)  # a newcomer before the leader synced
    assert waiting.result().error == E.REBALANCE_IN_PROGRESS


async def test_group_max_size(coord) -> None:
    gc, _, _ = await make_coordinator(config={"group.max.size": 1})
    try:
        await form_group(gc, 1)
        r = await gc.join_group("g", "", None, "consumer", PROTOCOLS, SESSION, REBALANCE, "c", "h")
        assert r.error in (E.GROUP_MAX_SIZE_REACHED, E.MEMBER_ID_REQUIRED)
        if r.error == E.MEMBER_ID_REQUIRED:
            r = await gc.join_group("g", r.member_id, None, "consumer", PROTOCOLS, SESSION, REBALANCE, "c", "h")
        assert r.error == E.GROUP_MAX_SIZE_REACHED
    finally:
        await gc.stop()


async def test_initial_rebalance_delay_collects_members() -> None:
    gc, _, clock = await make_coordinator(config={"group.initial.rebalance.delay.ms": 3000})
    try:
        t1 = await join_new(gc)
        await clock.advance(2000)
        t2 = await join_new(gc)
        await clock.advance(2000)
        assert not t1.done()  # the delay was extended by the second member
        await clock.advance(2000)  # each newcomer extends the wait by the full delay
        assert t1.result().generation_id == t2.result().generation_id == 1
    finally:
        await gc.stop()


# --- offsets --------------------------------------------------------------------------------------


async def test_commit_generation_and_member_checks(coord) -> None:
    gc, _, _ = coord
    m1, m2 = await form_group(gc, 2)
    tp = ("t", 0)
    assert (await gc.commit_offsets("g", 1, m1, None, {tp: (5, -1, "")}))[tp] == E.ILLEGAL_GENERATION
    assert (await gc.commit_offsets("g", 2, "ghost", None, {tp: (5, -1, "")}))[tp] == E.UNKNOWN_MEMBER_ID
    assert (await gc.commit_offsets("g", -1, "", None, {tp: (5, -1, "")}))[tp] == E.UNKNOWN_MEMBER_ID
    assert (await gc.commit_offsets("g", 2, m1, None, {tp: (5, 3, "meta")}))[tp] == E.NONE
    assert gc.fetch_offsets("g", [tp, ("t", 1)]) == (E.NONE, [(tp, 5, 3, "meta", E.NONE), (("t", 1), -1, -1, "", E.NONE)])
    big = "x" * 5000
    assert (await gc.commit_offsets("g", 2, m2, None, {tp: (6, -1, big)}))[tp] == E.OFFSET_METADATA_TOO_LARGE
    # During CompletingRebalance a commit must wait for the assignment.
    await join_new(gc)
    j = [start_join(gc, member_id=m) for m in (m1, m2)]
    await settle()
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE
    gen = j[0].result().generation_id
    assert (await gc.commit_offsets("g", gen, m1, None, {tp: (7, -1, "")}))[tp] == E.REBALANCE_IN_PROGRESS


async def test_simple_commit_without_group_and_stale_generation_on_unknown_group(coord) -> None:
    gc, _, _ = coord
    tp = ("t", 2)
    assert (await gc.commit_offsets("solo", -1, "", None, {tp: (9, -1, None)}))[tp] == E.NONE
    assert gc.fetch_offsets("solo", None) == (E.NONE, [(tp, 9, -1, "", E.NONE)])
    assert (await gc.commit_offsets("other", 4, "m", None, {tp: (9, -1, None)}))[tp] == E.ILLEGAL_GENERATION
    assert gc.list_groups()[1][0].group_id == "solo" and gc.list_groups()[1][0].state == "Empty"


async def test_state_survives_replay(coord) -> None:
    gc, access, clock = coord
    m1, m2 = await form_group(gc, 2)
    await gc.commit_offsets("g", 2, m1, None, {("t", 0): (11, 1, "a"), ("t", 1): (12, 1, "b")})
    await gc.commit_offsets("g", 2, m2, None, {("t", 1): (13, 1, "c")})
    await gc.commit_offsets("solo", -1, "", None, {("u", 0): (1, -1, "")})
    gc2, _, _ = await make_coordinator(access, ManualScheduler(clock.now))
    try:
        assert gc2.fetch_offsets("g", None) == (E.NONE, [(("t", 0), 11, 1, "a", E.NONE), (("t", 1), 13, 1, "c", E.NONE)])
        g = gc2.groups["g"]
        assert g.state == GroupState.STABLE and g.generation_id == 2 and set(g.members) == {m1, m2}
        assert g.members[m1].assignment == f"a-{m1}".encode()
        assert gc2.heartbeat("g", 2, m1, None) == E.NONE
        assert gc2.fetch_offsets("solo", [("u", 0)])[1][0][1] == 1
    finally:
        await gc2.stop()


async def test_transactional_offsets_pending_until_marker(coord) -> None:
    gc, access, clock = coord
    tp = ("t", 0)
    p = gc.partition_for("g")
    await gc.commit_offsets("g", -1, "", None, {tp: (1, -1, "")})
    codes = await gc.commit_txn_offsets("g", 77, 0, "", -1, None, {tp: (50, -1, "txn")})
    assert codes == {tp: E.NONE}
    assert gc.fetch_offsets("g", [tp])[1] == [(tp, 1, -1, "", E.NONE)]
    assert gc.fetch_offsets("g", [tp], require_stable=True)[1] == [(tp, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT)]
    gc.complete_txn((p + 1) % gc.num_partitions, 77, True)  # a marker in another partition: not ours
    assert gc.fetch_offsets("g", [tp])[1][0][1] == 1
    access.append_marker(IR.OFFSETS_TOPIC, p, 77, True)
    gc.complete_txn(p, 77, True)
    assert gc.fetch_offsets("g", [tp], require_stable=True)[1] == [(tp, 50, -1, "txn", E.NONE)]
    # An aborted transaction's offsets vanish.
    await gc.commit_txn_offsets("g", 78, 0, "", -1, None, {tp: (99, -1, "")})
    access.append_marker(IR.OFFSETS_TOPIC, p, 78, False)
    gc.complete_txn(p, 78, False)
    assert gc.fetch_offsets("g", [tp])[1][0][1] == 50
    # A transaction still open at replay stays pending; replay applies the markers it finds.
    await gc.commit_txn_offsets("g", 79, 0, "", -1, None, {tp: (120, -1, "")})
    gc2, _, _ = await make_coordinator(access, ManualScheduler(clock.now))
    try:
        assert gc2.fetch_offsets("g", [tp], require_stable=True)[1][0][4] == E.UNSTABLE_OFFSET_COMMIT
        assert gc2.fetch_offsets("g", [tp])[1][0][1] == 50
        gc2.complete_txn(p, 79, True)
        assert gc2.fetch_offsets("g", [tp])[1][0][1] == 120
    finally:
        await gc2.stop()


async def test_txn_commit_checks_generation(coord) -> None:
    gc, _, _ = coord
    (m1,) = await form_group(gc, 1)
    tp = ("t", 0)
    assert (await gc.commit_txn_offsets("g", 5, 0, m1, 9, None, {tp: (1, -1, "")}))[tp] == E.ILLEGAL_GENERATION
    assert (await gc.commit_txn_offsets("g", 5, 0, "x", 1, None, {tp: (1, -1, "")}))[tp] == E.UNKNOWN_MEMBER_ID
    assert (await gc.commit_txn_offsets("g", 5, 0, m1, 1, None, {tp: (1, -1, "")}))[tp] == E.NONE
    assert (await gc.commit_txn_offsets("g", 5, 0, "", -1, None, {tp: (1, -1, "")}))[tp] == E.NONE


async def test_later_plain_commit_wins_over_older_transaction(coord) -> None:
    gc, _, _ = coord
    tp = ("t", 0)
    await gc.commit_txn_offsets("g", 5, 0, "", -1, None, {tp: (10, -1, "")})
    await gc.commit_offsets("g", -1, "", None, {tp: (20, -1, "")})
    gc.complete_txn(gc.partition_for("g"), 5, True)
    assert gc.fetch_offsets("g", [tp])[1][0][1] == 20


async def test_delete_groups_and_offsets(coord) -> None:
    gc, access, clock = coord
    (m1,) = await form_group(gc, 1)
    await gc.commit_offsets("g", 1, m1, None, {("t", 0): (3, -1, ""), ("other", 0): (4, -1, "")})
    assert await gc.delete_groups(["g", "missing", ""]) == {
        "g": E.NON_EMPTY_GROUP, "missing": E.GROUP_ID_NOT_FOUND, "": E.INVALID_GROUP_ID}
    err, res = await gc.delete_offsets("g", [("t", 0), ("other", 0)])
    assert err == E.NONE and res == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): E.NONE}
    assert gc.fetch_offsets("g", None)[1] == [(("t", 0), 3, -1, "", E.NONE)]
    gc.leave_group("g", [(m1, None)])
    await settle()
    assert await gc.delete_groups(["g"]) == {"g": E.NONE}
    assert "g" not in gc.groups and gc.fetch_offsets("g", None)[1] == []
    gc2, _, _ = await make_coordinator(access, ManualScheduler(clock.now))
    try:
        assert "g" not in gc2.groups and gc2.fetch_offsets("g", None)[1] == []
    finally:
        await gc2.stop()


async def test_offsets_of_empty_group_expire() -> None:
    gc, access, clock = await make_coordinator(config={"offsets.retention.minutes": 1})
    try:
        (m1,) = await form_group(gc, 1)
        await gc.commit_offsets("g", 1, m1, None, {("t", 0): (3, -1, "")})
        for _ in range(24):
            await clock.advance(5_000)
            assert gc.heartbeat("g", 1, m1, None) == E.NONE
        assert await gc.expire_offsets() == 0  # Stable and subscribed to t: kept
        gc.leave_group("g", [(m1, None)])
        await settle()
        await clock.advance(30_000)
        assert await gc.expire_offsets() == 0
        await clock.advance(31_000)
        assert await gc.expire_offsets() == 1
        assert "g" not in gc.groups
        gc2, _, _ = await make_coordinator(access, ManualScheduler(clock.now))
        try:
            assert "g" not in gc2.groups and gc2.fetch_offsets("g", None)[1] == []
        finally:
            await gc2.stop()
    finally:
        await gc.stop()


async def test_list_and_describe(coord) -> None:
    gc, _, _ = coord
    await form_group(gc, 2)
    await gc.commit_offsets("solo", -1, "", None, {("t", 0): (1, -1, "")})
    _, groups = gc.list_groups()
    assert {(g.group_id, g.state, g.protocol_type, g.group_type) for g in groups} == {
        ("g", "Stable", "consumer", "classic"), ("solo", "Empty", "", "classic")}
    assert [g.group_id for g in gc.list_groups(states=["stable"])[1]] == ["g"]
    assert gc.list_groups(types=["consumer"])[1] == []
    d = gc.describe_group("g")
    assert d.state == "Stable" and d.protocol == "range" and len(d.members) == 2
    assert all(m.assignment.startswith(b"a-") for m in d.members)
    assert gc.describe_group("nope").error == E.GROUP_ID_NOT_FOUND


async def test_failed_write_is_reported(coord) -> None:
    gc, access, _ = coord
    from protocol.errors import KafkaError

    access.fail_with = KafkaError(E.NOT_LEADER_OR_FOLLOWER)
    assert (await gc.commit_offsets("s", -1, "", None, {("t", 0): (1, -1, "")}))[("t", 0)] == E.NOT_COORDINATOR
    assert gc.fetch_offsets("s", None)[1] == []


async def test_coordinator_not_available_before_topic() -> None:
    gc = GroupCoordinator(FakeAccess(), type("C", (), {"get": staticmethod(lambda n: None)})(), 1,
                          scheduler=ManualScheduler())
    assert gc.heartbeat("g", 1, "m", None) == E.COORDINATOR_NOT_AVAILABLE
    assert gc.num_partitions == 50
