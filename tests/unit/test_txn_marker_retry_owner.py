"""A cluster-mode transaction coordinator keeps completing a transaction whose markers must be retried.

Found by the EOS workload (tests/cluster/test_eos_workload.py): when a partition leader is down,
the first WriteTxnMarkers round fails for its partition and the coordinator retries. Before each
retry it checks that it still owns the transaction (its ``__transaction_state`` partition is still
loaded at the same coordinator epoch); that check must look at the transactional id's state
partition, not at the data partition of the last marker result. Otherwise the coordinator concludes
"coordinator moved; the new one completes it" although nothing moved, and the transaction stays in
PrepareCommit/PrepareAbort for good: the producer meets CONCURRENT_TRANSACTIONS forever and the LSO
of every partition it wrote to is stuck, so read_committed consumers stop.

In-memory PartitionAccess from tests/unit/test_txn_coordinator.py; only the state partition of the
transactional id is loaded, as on a broker that leads just that partition.
"""

from __future__ import annotations

import asyncio

import pytest

from coordinator.partition_access import partition_for
from coordinator.txn_coordinator import TransactionCoordinator
from coordinator.txn_metadata import TxnState
from protocol.errors import ErrorCode as E
from tests.unit.test_txn_coordinator import NUM_PARTITIONS, Config, FakeAccess, Ids

WAIT_S = 10.0


def _tid_outside(data_partitions: set[int]) -> str:
    """A transactional id whose state partition is none of ``data_partitions``."""
    return next(t for t in (f"copier-{i}" for i in range(100))
                if partition_for(t, NUM_PARTITIONS) not in data_partitions)


@pytest.mark.parametrize("commit", [True, False])
async def test_marker_retry_completes_when_only_the_state_partition_is_loaded(commit: bool) -> None:
    access = FakeAccess()
    coord = TransactionCoordinator(access, Config(), Ids())
    coord.follows_leadership = True  # cluster mode: partitions load with their leadership
    await coord.start()
    try:
        tid = _tid_outside({0, 1, 2, 3})
        coord.load_partition(partition_for(tid, NUM_PARTITIONS), 0)
        err, pid, epoch = await coord.init_producer_id(tid, 60000)
        assert err == E.NONE
        parts = [("data", 0), ("data", 1), ("data", 2), ("data", 3)]
        assert await coord.add_partitions(tid, pid, epoch, parts) == E.NONE
        # The leader of data-1 is down: its first marker round fails (retriable), then succeeds.
        access.fail[("data", 1)] = [E.NOT_LEADER_OR_FOLLOWER]
        assert await coord.end_txn(tid, pid, epoch, commit) == E.NONE

        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while coord.txns[tid].state != done and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert coord.txns[tid].state == done, f"transaction left in {coord.txns[tid].state.name}"
        retried = [m for m in access.markers if "data" in m.partitions and 1 in m.partitions["data"]]
        assert len(retried) == 2, "data-1 gets its marker on the second round"
    finally:
        await coord.stop()
