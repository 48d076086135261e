"""Client quotas in cluster mode: stored in etcd by one broker's EtcdMetadataStore, seen by the other's
view through the watch, so that every broker throttles a client alike."""

from __future__ import annotations

from security import quotas as q
from tests.cluster.support import wait_until


async def test_quotas_written_on_one_broker_are_seen_by_another(two_stores) -> None:
    a, b = two_stores
    alice = q.entity([("user", "alice")])
    default_client = q.entity([("client-id", None)])
    await a.alter_client_quotas(q.altered(a.client_quotas(), [
        (alice, {"producer_byte_rate": 1024.0}), (default_client, {"consumer_byte_rate": 2048.0})]))
    want = {alice: {"producer_byte_rate": 1024.0}, default_client: {"consumer_byte_rate": 2048.0}}
    assert a.client_quotas() == want
    await wait_until(lambda: b.client_quotas() == want, "quotas in b's view")
    await b.alter_client_quotas(q.altered(b.client_quotas(), [(alice, {"producer_byte_rate": None})]))
    await wait_until(lambda: a.client_quotas() == {default_client: {"consumer_byte_rate": 2048.0}},
                     "removal in a")
