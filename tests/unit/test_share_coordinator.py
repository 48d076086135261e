"""coordinator.share_coordinator / share_state: the durable state of share-partitions in
__share_group_state (Kafka's ShareCoordinatorShard), over an in-memory partition log."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share_coordinator import ShareCoordinator, coordinator_key, kafka_uuid
from coordinator.share_state import combine
from protocol.errors import ErrorCode as E
from storage import internal_records as IR
from tests.unit.group_fakes import Config, FakeAccess

T = uuid.UUID(int=42)


async def make(config: dict | None = None, access: FakeAccess | None = None) -> tuple[ShareCoordinator, FakeAccess]:
    access = access or FakeAccess()
    clock = [1_000]
    coord = ShareCoordinator(access, Config({"share.coordinator.state.topic.num.partitions": 4, **(config or {})}),
                             partition_count=lambda tid: 3 if tid == T else None, now_ms=lambda: clock[0])
    await coord.start()
    await coord.ensure_topic()
    return coord, access


def test_coordinator_key_is_kafkas() -> None:
    assert kafka_uuid(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert coordinator_key("g", uuid.UUID(int=0), 3) == "g:AAAAAAAAAAAAAAAAAAAAAA:3"


async def test_initialize_read_write_and_summary() -> None:
    coord, access = await make()
    try:
        assert (await coord.read("g", T, 0, 0))[0] == E.INVALID_REQUEST  # never initialized
        assert coord.read_summary("g", T, 0)[2:] == (0, -1, -1)
        assert await coord.initialize("g", T, 0, 1, -1) == (E.NONE, None)
        code, _, state_epoch, start, batches = await coord.read("g", T, 0, 5)
        assert (code, state_epoch, start, batches) == (E.NONE, 1, -1, [])
        assert await coord.write("g", T, 0, 1, 5, 10, [(10, 19, 2, 1), (20, 24, 0, 2)]) == (E.NONE, None)
        assert await coord.write("g", T, 0, 1, 5, 20, [(22, 22, 4, 3)]) == (E.NONE, None)
        assert (await coord.read("g", T, 0, 5))[2:] == (1, 20, [(20, 21, 0, 2), (22, 22, 4, 3), (23, 24, 0, 2)])
        assert coord.read_summary("g", T, 0)[2:] == (1, 5, 20)
        # What was written is what a coordinator replaying the log finds.
        again, _ = await make(access=access)
        assert (await again.read("g", T, 0, 5))[2:] == (1, 20, [(20, 21, 0, 2), (22, 22, 4, 3), (23, 24, 0, 2)])
    finally:
        await coord.stop()


async def test_leader_and_state_epochs_fence() -> None:
    coord, _ = await make()
    try:
        await coord.initialize("g", T, 1, 3, 0)
        assert (await coord.read("g", T, 1, 7))[0] == E.NONE  # leader 7 takes over: recorded
        assert (await coord.write("g", T, 1, 3, 6, 0, []))[0] == E.FENCED_LEADER_EPOCH
        assert (await coord.read("g", T, 1, 6))[0] == E.FENCED_LEADER_EPOCH
        assert (await coord.write("g", T, 1, 2, 7, 0, []))[0] == E.FENCED_STATE_EPOCH
        assert (await coord.initialize("g", T, 1, 2, 0))[0] == E.FENCED_STATE_EPOCH
        # A reset (re-initialization) moves the state epoch past the stored one: old writers are fenced.
        assert await coord.initialize("g", T, 1, 3, 50) == (E.NONE, None)
        assert (await coord.write("g", T, 1, 3, 7, 0, []))[0] == E.FENCED_STATE_EPOCH
        assert (await coord.read("g", T, 1, 7))[2:4] == (4, 50)
        assert (await coord.write("g", T, 9, 1, 1, 0, []))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
        assert (await coord.write("g", uuid.uuid4(), 0, 1, 1, 0, []))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        await coord.stop()


async def test_snapshots_every_n_updates_and_delete() -> None:
    coord, access = await make({"share.coordinator.snapshot.update.records.per.snapshot": 2})
    try:
        await coord.initialize("g", T, 2, 1, 0)
        for k in range(5):
            await coord.write("g", T, 2, 1, 0, k, [(k, k, 2, 1)])
        types = [int.from_bytes(r.key[:2], "big") for _, r, _ in access.records(IR.SHARE_STATE_TOPIC)]
        assert types == [0, 1, 1, 0, 1, 1]  # snapshot, 2 updates, snapshot of the merged state, ...
        assert (await coord.read("g", T, 2, 0))[3] == 4
        assert await coord.delete("g", T, 2) == (E.NONE, None)
        assert coord.read_summary("g", T, 2)[4] == -1
        assert await coord.delete("g", T, 2) == (E.NONE, None)  # idempotent
        again, _ = await make(access=access)
        assert (await again.read("g", T, 2, 0))[0] == E.INVALID_REQUEST
        assert again.redundant_offset(coord.partition_of("g", T, 2)) == access.log_end_offset(
            IR.SHARE_STATE_TOPIC, coord.partition_of("g", T, 2))
    finally:
        await coord.stop()


async def test_keys_of_unloaded_partitions_answer_not_coordinator() -> None:
    coord, _ = await make()
    try:
        await coord.initialize("g", T, 0, 1, 0)
        p = coord.partition_of("g", T, 0)
        coord.unload_partition(p)
        assert (await coord.read("g", T, 0, 0))[0] == E.NOT_COORDINATOR
        coord.load_partition(p)
        assert (await coord.read("g", T, 0, 0))[0] == E.NONE
    finally:
        await coord.stop()


BATCHES = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), st.sampled_from([0, 2, 4]), st.integers(1, 5)),
                   max_size=8).map(lambda xs: [(a, a + n, s, c) for a, n, s, c in xs])


@settings(max_examples=300, deadline=None)
@given(old=BATCHES, new=BATCHES, start=st.integers(0, 30))
def test_combine_matches_a_per_offset_model(old, new, start) -> None:
    model: dict[int, tuple[int, int]] = {}
    for layer in (old, new):
        for f, la, s, c in layer:
            for o in range(f, la + 1):
                model[o] = (s, c)
    out = combine(old, new, start)
    got: dict[int, tuple[int, int]] = {}
    prev_last = None
    for f, la, s, c in out:
        assert f <= la and f >= start
        if prev_last is not None:
            assert f > prev_last
        prev_last = la
        for o in range(f, la + 1):
            got[o] = (s, c)
    assert got == {o: v for o, v in model.items() if o >= start}
    for a, b in zip(out, out[1:], strict=False):  # merged where possible
        assert not (a[1] + 1 == b[0] and a[2:] == b[2:])
