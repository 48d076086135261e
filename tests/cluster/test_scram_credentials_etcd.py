"""SCRAM credentials in cluster mode: stored in etcd by one broker's EtcdMetadataStore, seen by the
other's view through the watch (every broker authenticates against the same credentials)."""

from __future__ import annotations

from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
from cluster.etcd_store import EtcdMetadataStore
from security import scram_credentials as sc
from tests.cluster.support import wait_until


async def test_credentials_written_on_one_broker_are_seen_by_another(two_stores) -> None:
    a, b = two_stores
    alice = sc.from_password("SCRAM-SHA-512", "alice-secret")
    bob = sc.from_password("SCRAM-SHA-256", "bob-secret", 8192)
    await a.alter_scram_credentials([], [("alice", "SCRAM-SHA-512", alice), ("bob", "SCRAM-SHA-256", bob)])
    assert a.scram_credentials() == {"alice": {"SCRAM-SHA-512": alice}, "bob": {"SCRAM-SHA-256": bob}}
    await wait_until(lambda: b.scram_credentials() == a.scram_credentials(), "credentials in b's view")
    await b.alter_scram_credentials([("bob", "SCRAM-SHA-256")], [])
    await wait_until(lambda: a.scram_credentials() == {"alice": {"SCRAM-SHA-512": alice}}, "deletion in a")


async def test_users_bootstrap_writes_to_etcd_in_cluster_mode(etcd, sessions, tmp_path) -> None:
    """`kbroker users bootstrap` with kbroker.etcd.endpoints set writes the credential to etcd (not to
    a local file), where a broker's view finds it."""
    import asyncio
    import sys

    from tests.helpers.broker_proc import REPO_ROOT

    props = tmp_path / "server.properties"
    props.write_text(f"kbroker.etcd.endpoints={etcd.endpoints}\nnode.id=1\nlog.dirs={tmp_path / 'data'}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", "users", "bootstrap", "--config", str(props), "--user", "admin",
        "--password", "admin-secret", cwd=REPO_ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert b"to etcd" in out
    assert not (tmp_path / "data" / sc.FILE_NAME).exists()
    session = await sessions()
    store = EtcdMetadataStore(session, KeyLayout(await get_or_create_cluster_id(session.client)), 2)
    await store.start()
    try:
        cred = store.scram_credentials()["admin"]["SCRAM-SHA-512"]
        salted = sc.salted_password("SCRAM-SHA-512", "admin-secret", cred.salt, cred.iterations)
        assert sc.from_salted_password("SCRAM-SHA-512", cred.salt, salted, cred.iterations) == cred
    finally:
        await store.stop()
