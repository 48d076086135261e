"""The cluster id is created once in etcd: concurrent starters all end up with the same id."""

from __future__ import annotations

import asyncio

import pytest

from cluster.etcd_keys import KeyLayout, cluster_id_key, get_or_create_cluster_id, new_cluster_id
from tests.helpers.etcd_proc import EtcdNotInstalled, etcd_binary


async def test_concurrent_starters_agree_on_one_cluster_id(sessions):
    starters = [await sessions() for _ in range(5)]
    candidates = [new_cluster_id() for _ in starters]
    assert len(set(candidates)) == 5
    ids = await asyncio.gather(*(get_or_create_cluster_id(s.client, candidate=c)
                                 for s, c in zip(starters, candidates, strict=True)))
    assert len(set(ids)) == 1
    assert ids[0] in candidates
    stored = await starters[0].client.get(cluster_id_key())
    assert stored.value.decode() == ids[0] and stored.version == 1  # written once, never overwritten
    # A broker starting later reads the same id and does not replace it.
    later = await sessions()
    assert await get_or_create_cluster_id(later.client, candidate=new_cluster_id()) == ids[0]


def test_cluster_id_format_and_key_layout():
    cid = new_cluster_id()
    assert len(cid) == 22 and "=" not in cid and "/" not in cid
    keys = KeyLayout(cid)
    assert keys.broker(3) == f"/kbroker/{cid}/brokers/3".encode()
    assert keys.node_id_of(keys.broker(17)) == 17
    assert keys.topic("orders") == f"/kbroker/{cid}/topics/orders".encode()
    assert keys.partition("a.b", 5) == f"/kbroker/{cid}/partitions/a.b/5".encode()
    assert keys.topic_partition_of(keys.partition("a.b", 5)) == ("a.b", 5)
    assert not keys.partition("ab", 0).startswith(keys.partitions_of("a"))
    assert keys.controller == f"/kbroker/{cid}/controller".encode()
    assert keys.producer_ids == f"/kbroker/{cid}/producer_ids".encode()
    with pytest.raises(ValueError):
        KeyLayout("a/b")


def test_missing_etcd_binary_names_the_debian_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EtcdNotInstalled, match="etcd-server"):
        etcd_binary()
