"""coordinator/txn_metadata.py transitions and coordinator/txn_coordinator.py over an in-memory PartitionAccess.

The fake partition access keeps ``__transaction_state`` batches in memory and records every
WriteTxnMarkers call; markers can be held back (an asyncio.Event) or fail, which makes the windows
Kafka answers CONCURRENT_TRANSACTIONS in deterministic. Expected answers follow Kafka's
TransactionCoordinator / TransactionMetadata.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from coordinator.partition_access import PartitionAccess, TxnMarkerEntry, java_string_hash, partition_for
from coordinator.txn_coordinator import TOPIC, TransactionCoordinator
from coordinator.txn_metadata import MAX_EPOCH, TxnMetadata, TxnState, can_transition
from coordinator.txn_records import decode_key, decode_value
from protocol.errors import ErrorCode as E
from storage.batch import BatchHeader, decode_records, parse_header

NUM_PARTITIONS = 5


class FakeAccess(PartitionAccess):
    """In-memory partitions; WriteTxnMarkers is recorded, optionally gated or failing."""

    def __init__(self) -> None:
        self.node_id = 0
        self.topics: dict[str, int] = {"data": 4}
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.markers: list[TxnMarkerEntry] = []
        self.gate: asyncio.Event | None = None
        self.append_gate: asyncio.Event | None = None  # holds state writes (a transition in flight)
        self.fail: dict[tuple[str, int], list[int]] = {}  # error codes to answer, one per attempt
        self.append_error: Exception | None = None

    async def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> None:
        self.topics.setdefault(name, num_partitions)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return topic in self.topics and 0 <= partition < self.topics[topic]

    async def append(self, topic: str, partition: int, batch: bytes, *, replicated: bool = True) -> int:
        if self.append_gate is not None:
            await self.append_gate.wait()
        if self.append_error is not None:
            raise self.append_error
        log = self.logs.setdefault((topic, partition), [])
        offset = sum(parse_header(b).records_count for b in log)
        data = bytearray(batch)
        data[0:8] = offset.to_bytes(8, "big", signed=True)
        log.append(bytes(data))
        return offset

    def iter_batches(self, topic: str, partition: int, start_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        for b in self.logs.get((topic, partition), []):
            h = parse_header(b)
            if h.next_offset > start_offset:
                yield h, b

    def log_end_offset(self, topic: str, partition: int) -> int:
        return sum(parse_header(b).records_count for b in self.logs.get((topic, partition), []))

    async def write_txn_markers(self, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        if self.gate is not None:
            await self.gate.wait()
        out = {}
        for m in markers:
            self.markers.append(m)
            for topic, parts in m.partitions.items():
                for p in parts:
                    queue = self.fail.get((topic, p))
                    out[(m.producer_id, topic, p)] = queue.pop(0) if queue else E.NONE
        return out

    # -- inspection ----------------------------------------------------------------------------------
    def state_records(self, tid: str) -> list[tuple[str, int, int, dict[str, list[int]]] | None]:
        """(state, producer id, epoch, partitions) of every record written for ``tid``; None = tombstone."""
        out = []
        for b in self.logs.get((TOPIC, partition_for(tid, NUM_PARTITIONS)), []):
            for r in decode_records(b):
                if decode_key(r.key) != tid:
                    continue
                if r.value is None:
                    out.append(None)
                    continue
                v = decode_value(r.value)
                out.append((TxnState(v.status).wire_name, v.producer_id, v.producer_epoch, v.partitions))
        return out


class Config:
    def __init__(self, **overrides: object) -> None:
        self.values = {
            "transaction.state.log.num.partitions": NUM_PARTITIONS,
            "transaction.max.timeout.ms": 900000,
            "transactional.id.expiration.ms": 604800000,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 3_600_000,
            "transaction.state.log.segment.bytes": 104857600,
            "transaction.two.phase.commit.enable": False,
            **overrides,
        }

    def get(self, name: str) -> object:
        return self.values[name]


class Ids:
    def __init__(self, start: int = 1000) -> None:
        self._ids = itertools.count(start)

    def generate(self) -> int:
        return next(self._ids)


async def _settle() -> None:
    """Let spawned completion tasks run until they block or finish."""
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
async def access():
    return FakeAccess()


@pytest.fixture
async def coord(access):
    c = TransactionCoordinator(access, Config(), Ids())
    await c.start()
    yield c
    await c.stop()


async def _ongoing(coord, tid: str = "tx", parts=(("data", 0), ("data", 1))) -> tuple[int, int]:
    err, pid, epoch = await coord.init_producer_id(tid, 60000)
    assert err == E.NONE
    assert await coord.add_partitions(tid, pid, epoch, list(parts)) == E.NONE
    return pid, epoch


# --- txn_metadata ----------------------------------------------------------------------------------------


def test_state_ids_and_names_match_kafka():
    assert [(s.value, s.wire_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]


def test_transitions_match_kafka_valid_previous_states():
    S = TxnState
    kafka = {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        # Kafka 4.0 (TV2): an Empty or completed transaction may be aborted with no partitions.
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    for dst, previous in kafka.items():
        for src in S:
            assert can_transition(src, dst) == (src in previous), (src.name, dst.name)


def test_metadata_helpers():
    md = TxnMetadata("t", 1, 0, 1000, TxnState.ONGOING, {("b", 1), ("a", 2), ("b", 0)})
    assert md.partitions_by_topic() == {"a": [2], "b": [0, 1]}
    assert not md.completing
    md.state = TxnState.PREPARE_ABORT
    assert md.completing
    assert MAX_EPOCH == 32767


def test_coordinator_partition_is_kafkas_abs_hashcode_mod():
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354  # "abc".hashCode()
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("abc", 50) == 96354 % 50
    assert java_string_hash("𝄞") == 0xD834 * 31 + 0xDD1E  # UTF-16 code units, as Java


# --- InitProducerId ------------------------------------------------------------------------------------


async def test_init_creates_then_bumps_and_persists_every_step(coord, access):
    assert await coord.init_producer_id("tx", 0) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    assert await coord.init_producer_id("tx", 900001) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    assert "tx" not in coord.txns and access.state_records("tx") == []
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, 1000, 0)
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, 1000, 1)
    assert await coord.init_producer_id("other", 60000) == (E.NONE, 1001, 0)
    assert access.state_records("tx") == [("Empty", 1000, 0, {}), ("Empty", 1000, 1, {})]


async def test_init_with_expected_epoch_kip360(coord):
    await coord.init_producer_id("tx", 60000)
    assert await coord.init_producer_id("tx", 60000, 1000, 0) == (E.NONE, 1000, 1)  # current epoch: bump
    assert await coord.init_producer_id("tx", 60000, 1000, 0) == (E.NONE, 1000, 1)  # retry: same answer
    assert await coord.init_producer_id("tx", 60000, 999, 1) == (E.PRODUCER_FENCED, -1, -1)  # other producer id
    assert await coord.init_producer_id("tx", 60000, 1000, 5) == (E.PRODUCER_FENCED, -1, -1)


async def test_init_epoch_exhaustion_rotates_producer_id(coord):
    await coord.init_producer_id("tx", 60000)
    coord.txns["tx"].producer_epoch = MAX_EPOCH - 1  # 32766: exhausted (Kafka: epoch >= Short.MaxValue - 1)
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, 1001, 0)


async def test_init_bumps_to_last_usable_epoch(coord):
    await coord.init_producer_id("tx", 60000)
    coord.txns["tx"].producer_epoch = MAX_EPOCH - 2
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, 1000, MAX_EPOCH - 1)


async def test_init_while_ongoing_fences_with_abort(coord, access):
    pid, epoch = await _ongoing(coord)
    assert await coord.init_producer_id("tx", 60000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    await _settle()
    # The abort was written under a bumped epoch, markers carry it, and the old epoch is fenced.
    assert access.state_records("tx")[-2:] == [("PrepareAbort", pid, epoch + 1, {"data": [0, 1]}),
                                               ("CompleteAbort", pid, epoch + 1, {})]
    assert [(m.producer_epoch, m.committed, m.partitions) for m in access.markers] == [
        (epoch + 1, False, {"data": [0, 1]})]
    assert await coord.end_txn("tx", pid, epoch, True) == E.PRODUCER_FENCED
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, pid, epoch + 2)


# --- AddPartitions / EndTxn ------------------------------------------------------------------------------


async def test_commit_writes_prepare_markers_complete(coord, access):
    pid, epoch = await _ongoing(coord)
    assert await coord.add_partitions("tx", pid, epoch, [("data", 1)]) == E.NONE  # already in: no new record
    assert await coord.add_partitions("tx", pid, epoch, [("data", 2)]) == E.NONE
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE
    await _settle()
    assert access.state_records("tx") == [
        ("Empty", pid, epoch, {}),
        ("Ongoing", pid, epoch, {"data": [0, 1]}),
        ("Ongoing", pid, epoch, {"data": [0, 1, 2]}),
        ("PrepareCommit", pid, epoch, {"data": [0, 1, 2]}),
        ("CompleteCommit", pid, epoch, {}),
    ]
    assert [(m.producer_id, m.producer_epoch, m.committed, m.partitions) for m in access.markers] == [
        (pid, epoch, True, {"data": [0, 1, 2]})]
    md = coord.txns["tx"]
    assert (md.state, md.partitions) == (TxnState.COMPLETE_COMMIT, set())
    # Retries of the completed EndTxn: NONE for the same outcome, INVALID_TXN_STATE for the other.
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE
    assert await coord.end_txn("tx", pid, epoch, False) == E.INVALID_TXN_STATE
    assert len(access.markers) == 1
    # A new transaction may start right away with the same epoch.
    assert await coord.add_partitions("tx", pid, epoch, [("data", 3)]) == E.NONE
    assert coord.txns["tx"].state == TxnState.ONGOING


async def test_invalid_requests_change_nothing(coord, access):
    err, pid, epoch = await coord.init_producer_id("tx", 60000)
    before = access.state_records("tx")
    assert await coord.end_txn("tx", pid, epoch, True) == E.INVALID_TXN_STATE  # nothing in progress
    assert await coord.end_txn("tx", pid, epoch, False) == E.INVALID_TXN_STATE
    assert await coord.end_txn("tx", pid + 1, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert await coord.end_txn("nope", pid, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert await coord.end_txn("tx", pid, epoch - 1, True) == E.PRODUCER_FENCED
    assert await coord.add_partitions("tx", pid, epoch - 1, [("data", 0)]) == E.PRODUCER_FENCED
    assert await coord.add_partitions("tx", pid + 1, epoch, [("data", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert await coord.add_partitions("nope", pid, epoch, [("data", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert access.state_records("tx") == before
    assert coord.txns["tx"].state == TxnState.EMPTY and access.markers == []


async def test_end_txn_with_higher_epoch_is_fenced(coord):
    pid, epoch = await _ongoing(coord)
    assert await coord.end_txn("tx", pid, epoch + 1, True) == E.PRODUCER_FENCED


async def test_requests_during_commit_get_concurrent_transactions(coord, access):
    """While the markers of a commit are outstanding (PrepareCommit) Kafka answers CONCURRENT_TRANSACTIONS
    to InitProducerId, AddPartitionsToTxn and a retried EndTxn(commit), INVALID_TXN_STATE to EndTxn(abort)."""
    pid, epoch = await _ongoing(coord)
    access.gate = asyncio.Event()
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE
    await _settle()
    assert coord.txns["tx"].state == TxnState.PREPARE_COMMIT
    before = access.state_records("tx")
    assert await coord.init_producer_id("tx", 60000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert await coord.init_producer_id("tx", 60000, pid, epoch) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert await coord.add_partitions("tx", pid, epoch, [("data", 3)]) == E.CONCURRENT_TRANSACTIONS
    assert await coord.end_txn("tx", pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
    assert await coord.end_txn("tx", pid, epoch, False) == E.INVALID_TXN_STATE
    assert coord.verify_partition("tx", pid, epoch, "data", 0) != E.NONE
    await coord.abort_timed_out(now_ms=2**62)  # a timed-out check does not touch a completing transaction
    assert access.state_records("tx") == before
    access.gate.set()
    await _settle()
    assert coord.txns["tx"].state == TxnState.COMPLETE_COMMIT
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, pid, epoch + 1)


async def test_abort_during_abort_retry(coord, access):
    pid, epoch = await _ongoing(coord)
    access.gate = asyncio.Event()
    assert await coord.end_txn("tx", pid, epoch, False) == E.NONE
    await _settle()
    assert await coord.end_txn("tx", pid, epoch, False) == E.CONCURRENT_TRANSACTIONS
    assert await coord.end_txn("tx", pid, epoch, True) == E.INVALID_TXN_STATE
    access.gate.set()
    await _settle()
    assert await coord.end_txn("tx", pid, epoch, False) == E.NONE
    assert access.state_records("tx")[-1] == ("CompleteAbort", pid, epoch, {})


async def test_marker_errors_are_retried_or_dropped(coord, access):
    pid, epoch = await _ongoing(coord, parts=[("data", 0), ("data", 1), ("data", 2)])
    access.fail = {("data", 0): [E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT],
                   ("data", 2): [E.UNKNOWN_TOPIC_OR_PARTITION]}
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE
    for _ in range(100):
        await asyncio.sleep(0.02)
        if coord.txns["tx"].state == TxnState.COMPLETE_COMMIT:
            break
    assert coord.txns["tx"].state == TxnState.COMPLETE_COMMIT
    # First attempt to all three; the retriable failure is retried alone; the deleted partition is dropped.
    assert [m.partitions for m in access.markers] == [{"data": [0, 1, 2]}, {"data": [0]}, {"data": [0]}]


async def test_persist_failure_answers_not_coordinator_and_keeps_state(coord, access):
    pid, epoch = await _ongoing(coord)
    access.append_error = OSError("disk gone")
    assert await coord.end_txn("tx", pid, epoch, True) == E.NOT_COORDINATOR
    md = coord.txns["tx"]
    assert (md.state, md.pending) == (TxnState.ONGOING, None)
    access.append_error = None
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE


# --- KIP-890 verification ----------------------------------------------------------------------------------


async def test_verify_partition(coord):
    pid, epoch = await _ongoing(coord, parts=[("data", 0)])
    assert coord.verify_partition("tx", pid, epoch, "data", 0) == E.NONE
    assert coord.verify_partition("tx", pid, epoch, "data", 1) == E.INVALID_TXN_STATE
    assert coord.verify_partition("tx", pid, epoch - 1, "data", 0) == E.PRODUCER_FENCED
    assert coord.verify_partition("tx", pid + 1, epoch, "data", 0) == E.INVALID_PRODUCER_ID_MAPPING
    assert coord.verify_partition("nope", pid, epoch, "data", 0) == E.INVALID_PRODUCER_ID_MAPPING
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE
    await _settle()
    assert coord.verify_partition("tx", pid, epoch, "data", 0) == E.INVALID_TXN_STATE


async def test_verify_partition_while_completing_is_concurrent_transactions(coord, access):
    pid, epoch = await _ongoing(coord, parts=[("data", 0)])
    access.gate = asyncio.Event()
    assert await coord.end_txn("tx", pid, epoch, True) == E.NONE
    await _settle()
    try:
        assert coord.verify_partition("tx", pid, epoch, "data", 0) == E.CONCURRENT_TRANSACTIONS
    finally:
        access.gate.set()
        await _settle()


async def test_verify_partition_ignores_an_add_in_flight(coord, access):
    """Kafka checks only the Prepare states: an AddPartitionsToTxn still being written (here held
    by the gate) does not make an already added partition CONCURRENT_TRANSACTIONS."""
    pid, epoch = await _ongoing(coord, parts=[("__consumer_offsets", 7)])
    access.append_gate = asyncio.Event()
    adding = asyncio.ensure_future(coord.add_partitions("tx", pid, epoch, [("data", 1)]))
    await _settle()
    try:
        assert coord.txns["tx"].pending is not None
        assert coord.verify_partition("tx", pid, epoch, "__consumer_offsets", 7) == E.NONE
        assert coord.verify_partition("tx", pid, epoch, "data", 1) == E.INVALID_TXN_STATE  # not yet persisted
    finally:
        access.append_gate.set()
        assert await adding == E.NONE
    assert coord.verify_partition("tx", pid, epoch, "data", 1) == E.NONE


# --- timeouts and expiration --------------------------------------------------------------------------------


async def test_timed_out_transaction_is_aborted_with_epoch_bump(coord, access):
    pid, epoch = await _ongoing(coord)
    start = coord.txns["tx"].start_ms
    await coord.abort_timed_out(now_ms=start + 60000)  # not yet: strictly older than the timeout
    assert coord.txns["tx"].state == TxnState.ONGOING
    await coord.abort_timed_out(now_ms=start + 60001)
    await _settle()
    assert access.state_records("tx")[-2:] == [("PrepareAbort", pid, epoch + 1, {"data": [0, 1]}),
                                               ("CompleteAbort", pid, epoch + 1, {})]
    assert await coord.end_txn("tx", pid, epoch, True) == E.PRODUCER_FENCED
    assert await coord.add_partitions("tx", pid, epoch, [("data", 0)]) == E.PRODUCER_FENCED


async def test_expired_ids_are_tombstoned_and_stay_gone_after_reload(access):
    coord = TransactionCoordinator(access, Config(**{"transactional.id.expiration.ms": 1000}), Ids())
    await coord.start()
    await coord.init_producer_id("old", 60000)
    pid, epoch = await _ongoing(coord, "busy")
    await coord.remove_expired_ids(now_ms=coord.txns["old"].last_update_ms + 1001)
    assert "old" not in coord.txns and "busy" in coord.txns  # an ongoing transaction is never expired
    assert access.state_records("old")[-1] is None
    await coord.stop()
    again = TransactionCoordinator(access, Config(), Ids(2000))
    await again.start()
    assert "old" not in again.txns and again.txns["busy"].state == TxnState.ONGOING
    await again.stop()


# --- reload ----------------------------------------------------------------------------------------------------


async def test_reload_rebuilds_state(access):
    coord = TransactionCoordinator(access, Config(), Ids())
    await coord.start()
    pid, epoch = await _ongoing(coord, "a")
    await coord.init_producer_id("b", 30000)
    await coord.stop()

    again = TransactionCoordinator(access, Config(), Ids(5000))
    await again.start()
    a, b = again.txns["a"], again.txns["b"]
    assert (a.producer_id, a.producer_epoch, a.state, a.partitions, a.timeout_ms) == (
        pid, epoch, TxnState.ONGOING, {("data", 0), ("data", 1)}, 60000)
    assert (b.state, b.timeout_ms) == (TxnState.EMPTY, 30000)
    assert await again.end_txn("a", pid, epoch, True) == E.NONE
    await _settle()
    assert again.txns["a"].state == TxnState.COMPLETE_COMMIT
    await again.stop()


@pytest.mark.parametrize("commit", [True, False])
async def test_reload_finishes_a_prepared_transaction(access, commit):
    """A coordinator that crashed after PrepareCommit/PrepareAbort: the next one sends the markers and
    writes the Complete state on load."""
    coord = TransactionCoordinator(access, Config(), Ids())
    await coord.start()
    pid, epoch = await _ongoing(coord)
    access.gate = asyncio.Event()  # the markers never get out: the "crash"
    assert await coord.end_txn("tx", pid, epoch, commit) == E.NONE
    await _settle()
    await coord.stop()
    assert access.markers == []

    access.gate = None
    again = TransactionCoordinator(access, Config(), Ids(5000))
    await again.start()
    await _settle()
    done = "CompleteCommit" if commit else "CompleteAbort"
    assert access.state_records("tx")[-2:] == [
        ("PrepareCommit" if commit else "PrepareAbort", pid, epoch, {"data": [0, 1]}), (done, pid, epoch, {})]
    assert [(m.committed, m.partitions) for m in access.markers] == [(commit, {"data": [0, 1]})]
    assert await again.end_txn("tx", pid, epoch, commit) == E.NONE
    await again.stop()


async def test_reload_keeps_kip360_previous_epoch_for_producer_id_rotation(access):
    coord = TransactionCoordinator(access, Config(), Ids())
    await coord.start()
    await coord.init_producer_id("tx", 60000)
    coord.txns["tx"].producer_epoch = MAX_EPOCH - 1
    assert await coord.init_producer_id("tx", 60000) == (E.NONE, 1001, 0)
    await coord.stop()
    again = TransactionCoordinator(access, Config(), Ids(5000))
    await again.start()
    md = again.txns["tx"]
    assert (md.producer_id, md.producer_epoch, md.last_producer_id) == (1001, 0, 1000)
    await again.stop()
