"""The follower's wait after its leader answers that it does not lead a partition (yet).

A follower often learns of a new partition or leadership before the leader does (both apply the
same metadata from etcd): the first wait is 10 ms, each next one doubles, up to
replica.fetch.backoff.ms, and a partition put on the fetcher again (a new leader epoch) starts over.
"""

from __future__ import annotations

import time

import pytest

from broker.replication.fetcher import ReplicaFetcher, ReplicaFetcherManager


class _Env:
    def __init__(self, backoff_ms: int) -> None:
        self.config = {"replica.fetch.backoff.ms": str(backoff_ms)}


def _fetcher(backoff_ms: int) -> ReplicaFetcher:
    manager = ReplicaFetcherManager(_Env(backoff_ms), lambda _t, _i: None)  # type: ignore[arg-type]
    return ReplicaFetcher(manager, leader=2, fid=0)


def test_waits_start_short_and_double_up_to_the_backoff() -> None:
    f = _fetcher(1000)
    key = ("t", 0)
    f.put(key, object())  # type: ignore[arg-type]
    waits = [f._hold_not_ready(key) for _ in range(9)]
    assert waits == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0])
    assert key in f.delay and f.delay[key] <= time.monotonic() + 1.0


def test_a_partition_put_again_starts_over() -> None:
    f = _fetcher(1000)
    key, other = ("t", 0), ("t", 1)
    for k in (key, other):
        f.put(k, object())  # type: ignore[arg-type]
    for _ in range(4):
        f._hold_not_ready(key)
    assert f._hold_not_ready(other) == pytest.approx(0.01)  # counted per partition
    f.put(key, object())  # type: ignore[arg-type]  # e.g. a new leader epoch
    assert key not in f.delay
    assert f._hold_not_ready(key) == pytest.approx(0.01)


def test_a_backoff_below_the_first_wait_caps_it() -> None:
    f = _fetcher(5)
    key = ("t", 0)
    f.put(key, object())  # type: ignore[arg-type]
    assert f._hold_not_ready(key) == pytest.approx(0.005)
