"""Fixtures for tests/cluster/: a real etcd server per test, and etcd sessions that are always closed.

``etcd`` starts a fresh single-member etcd (tmp data dir, free ports on 127.0.0.1, short Raft timers
so that 1 s leases are possible) and stops it by pid at teardown. Without the ``etcd`` binary the
tests skip locally and fail in CI, naming the Debian package ``etcd-server``.
``sessions`` opens EtcdSession objects against it with short test timings.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
from cluster.etcd_session import EtcdSession
from cluster.etcd_store import EtcdMetadataStore
from tests.helpers.etcd_proc import ETCD_PACKAGE, EtcdProcess
from tests.helpers.tools import require_tool

SessionFactory = Callable[..., Awaitable[EtcdSession]]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    require_tool("etcd", shutil.which("etcd") is not None,
                 f"etcd not on PATH (apt-get install {ETCD_PACKAGE}, or `make tools` as root)")
    proc = EtcdProcess(tmp_path / "etcd")
    proc.start()
    try:
        yield proc
    finally:
        try:
            proc.stop()
        finally:
            proc.kill()


@pytest.fixture
async def sessions(etcd: EtcdProcess) -> AsyncIterator[SessionFactory]:
    """``await sessions(session_timeout_ms=..., heartbeat_interval_ms=...)`` -> an open EtcdSession."""
    made: list[EtcdSession] = []

    async def make(**kw) -> EtcdSession:
        kw.setdefault("session_timeout_ms", 2000)
        kw.setdefault("heartbeat_interval_ms", 200)
        session = EtcdSession(kw.pop("endpoints", etcd.endpoints), **kw)
        made.append(session)
        return await session.open()

    yield make
    for session in made:
        # Revoking needs a running etcd; a test that killed it leaves the leases to die with it.
        with contextlib.suppress(Exception):
            await session.close(revoke=etcd.running)


@pytest.fixture
async def keys(sessions: SessionFactory) -> KeyLayout:
    """The key layout of the cluster whose id the first session created."""
    session = await sessions()
    return KeyLayout(await get_or_create_cluster_id(session.client))


@pytest.fixture
async def two_stores(sessions: SessionFactory) -> AsyncIterator[tuple[EtcdMetadataStore, EtcdMetadataStore]]:
    """The EtcdMetadataStores of two brokers (node ids 1 and 2) of one cluster, stopped at teardown."""
    stores: list[EtcdMetadataStore] = []
    try:
        for node_id in (1, 2):
            session = await sessions()
            store = EtcdMetadataStore(session, KeyLayout(await get_or_create_cluster_id(session.client)), node_id)
            await store.start()
            stores.append(store)
        yield stores[0], stores[1]
    finally:
        for store in stores:
            with contextlib.suppress(Exception):
                await store.stop()
