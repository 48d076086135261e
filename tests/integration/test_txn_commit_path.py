"""The commit path that back-to-back transactions wait on (issue 20), pinned at the protocol level.

On one node the coordinator writes a transaction's markers and its Complete state in the loop
pass right after EndTxn is answered, before any other request is handled: the producer's next
AddPartitionsToTxn must therefore never meet CONCURRENT_TRANSACTIONS (librdkafka backs off
for it), DescribeTransactions already shows CompleteCommit/CompleteAbort, and read_committed
readers see exactly the committed records, with the aborted ones listed, as before. The state
records are built by the fixed-layout encoders (coordinator/txn_records.py), so a restart that
replays ``__transaction_state`` must find the same transactions.
"""

from __future__ import annotations

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from tests.integration.test_txn_protocol import (
    _addr,
    add_partitions,
    batches_of,
    create_topic,
    describe,
    end_txn,
    fetch,
    init_ok,
    list_offset,
    produce,
)

PARTITIONS = 4
ROUNDS = 12


async def test_back_to_back_transactions_never_wait_for_markers(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "b2b", PARTITIONS)
        pid, epoch = await init_ok(c, "t-b2b")
        seqs = [0] * PARTITIONS
        expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        aborted_first: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        for r in range(ROUNDS):
            commit = r % 3 != 2  # every third transaction aborts
            # Right after the previous EndTxn answer: no CONCURRENT_TRANSACTIONS, ever.
            codes = await add_partitions(c, "t-b2b", pid, epoch, {"b2b": list(range(PARTITIONS))})
            assert set(codes.values()) == {E.NONE}, {k: E(v).name for k, v in codes.items()}
            for p in range(PARTITIONS):
                values = [f"r{r}-p{p}-{i}".encode() for i in range(3)]
                err, base = await produce(c, "b2b", p, values, pid=pid, epoch=epoch, seq=seqs[p], tid="t-b2b")
                assert err == 0, E(err).name
                seqs[p] += len(values)
                if commit:
                    expected[p] += values
                else:
                    aborted_first[p].append(base)
            assert await end_txn(c, "t-b2b", pid, epoch, commit) == 0
            d = await describe(c, "t-b2b")  # no polling: the Complete state is already written
            assert d["state"] == ("CompleteCommit" if commit else "CompleteAbort"), d
        for p in range(PARTITIONS):
            end = await list_offset(c, "b2b", p)
            assert end == ROUNDS * 4  # 3 records + 1 marker per transaction
            assert await list_offset(c, "b2b", p, committed=True) == end  # nothing left open
            f = await fetch(c, "b2b", p, committed=True)
            assert (f.error_code, f.high_watermark, f.last_stable_offset) == (0, end, end)
            assert sorted(a.first_offset for a in f.aborted_transactions) == aborted_first[p]
            data, markers = [], 0
            for h, recs in batches_of(f.records):
                if h.is_control:
                    markers += 1
                elif h.base_offset not in aborted_first[p]:
                    data += [r.value for r in recs]
            assert (data, markers) == (expected[p], ROUNDS)


async def test_state_written_by_the_fast_encoders_survives_a_restart(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await create_topic(c, "replay", 1)
        pid, epoch = await init_ok(c, "t-replay")
        assert await add_partitions(c, "t-replay", pid, epoch, {"replay": [0]}) == {("replay", 0): 0}
        err, _ = await produce(c, "replay", 0, [b"x"], pid=pid, epoch=epoch, seq=0, tid="t-replay")
        assert err == 0
        assert await end_txn(c, "t-replay", pid, epoch, True) == 0
        before = await describe(c, "t-replay")
        assert before["state"] == "CompleteCommit"
        # An open transaction too: it must come back Ongoing with its partition.
        assert await add_partitions(c, "t-replay", pid, epoch, {"replay": [0]}) == {("replay", 0): 0}
    broker.stop()
    broker.start()
    async with ProtocolClient(*_addr(broker)) as c:
        for _ in range(200):
            d = await describe(c, "t-replay")
            if d["error"] != E.COORDINATOR_LOAD_IN_PROGRESS:
                break
        assert (d["error"], d["state"], d["pid"], d["epoch"], d["partitions"]) == (
            0, "Ongoing", pid, epoch, {("replay", 0)})
        assert await end_txn(c, "t-replay", pid, epoch, False) == 0
        assert (await describe(c, "t-replay"))["state"] == "CompleteAbort"
