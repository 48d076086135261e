"""An ISR change decided by a leader whose leadership is lost before the change's task first runs
(broker/replication/isr.py) is dropped quietly: no write, no traceback. Found by
tests/cluster/test_partitions.py::test_leader_cut_from_etcd_and_followers, whose teardown caught
``assert ls is not None`` failing in the task once the cut leader learned its successor."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.replication.isr import IsrManager
from broker.replication.leader import LeaderState
from cluster.records import PartitionState


class _Metadata:
    def partition_state(self, topic: str, index: int) -> PartitionState:
        return PartitionState(1, 0, (1, 2, 3), 0)

    def fenced(self) -> bool:
        return False


def test_an_isr_change_is_dropped_when_leadership_is_lost_before_it_runs() -> None:
    async def scenario() -> tuple[LeaderState, list[object]]:
        advanced: list[object] = []
        ls = LeaderState(0, 0, [2, 3], 0)
        part = SimpleNamespace(topic="t", index=0, leader_state=ls)
        env = SimpleNamespace(metadata=_Metadata(), node_id=1, cluster=SimpleNamespace(), config={})
        mgr = IsrManager(env, lambda: [part], SimpleNamespace(maybe_advance=advanced.append))
        mgr.change(part, remove=[3])
        task = ls.isr_change
        assert task is not None
        part.leader_state = None  # the metadata watch made this broker a follower meanwhile
        await task  # raised AssertionError before the fix
        return ls, advanced

    ls, advanced = asyncio.run(scenario())
    assert ls.isr_change is None and ls.pending_isr_adds == set()
    assert advanced == []  # no high watermark work for a partition this broker no longer leads
