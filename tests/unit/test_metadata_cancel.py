"""LocalMetadataStore: a change whose caller is cancelled (client gone) still completes, in
order, before the next one starts, and memory matches disk (issue 21 item 2)."""

from __future__ import annotations

import asyncio

import pytest

from cluster.local_store import LocalMetadataStore
from cluster.metadata_store import BrokerInfo


def _reopen(tmp_path) -> set[str]:
    return set(LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1)).topics())


async def test_cancelled_create_completes_before_the_next_change(tmp_path, monkeypatch):
    # Every write holds its complete .tmp file for a while before the rename.
    monkeypatch.setenv("KBROKERTEST_DELAY_POINT", "metadata.before_rename:300")
    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    events: list[tuple[str, str]] = []
    store.add_listener(lambda ev, info: events.append((ev, info.name)))
    tmp = store.path.with_name(store.path.name + ".tmp")

    first = asyncio.create_task(store.create_topic("first", 1, {}))
    for _ in range(5000):  # until the write sits before its rename
        if tmp.exists():
            break
        await asyncio.sleep(0.002)
    assert tmp.exists()
    first.cancel()
    # The next change, from another client: before the fix it shared the .tmp file with the
    # still-running write and failed (KAFKA_STORAGE_ERROR), and "first" was on disk only.
    second = await store.create_topic("second", 2, {})
    with pytest.raises(asyncio.CancelledError):
        await first
    assert second.num_partitions == 2
    assert set(store.topics()) == {"first", "second"} == _reopen(tmp_path)
    assert events == [("created", "first"), ("created", "second")]


async def test_cancelled_changes_of_every_kind_stay_consistent(tmp_path, monkeypatch):
    monkeypatch.setenv("KBROKERTEST_DELAY_POINT", "metadata.before_rename:20")
    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    await store.create_topic("keep", 1, {})
    changes = [store.add_partitions("keep", 3), store.set_topic_configs("keep", {"retention.ms": "5"}),
               store.create_topic("new", 1, {}), store.set_broker_dynamic_configs(1, {"x": "1"})]
    tasks = [asyncio.create_task(c) for c in changes]
    await asyncio.sleep(0.03)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await store.create_topic("last", 1, {})  # FIFO: every earlier change is done by now
    again = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    assert set(store.topics()) == set(again.topics()) == {"keep", "new", "last"}
    assert store.get_topic("keep").num_partitions == again.get_topic("keep").num_partitions == 3
    assert store.get_topic("keep").configs == again.get_topic("keep").configs == {"retention.ms": "5"}
    assert store.broker_dynamic_configs(1) == again.broker_dynamic_configs(1) == {"x": "1"}
