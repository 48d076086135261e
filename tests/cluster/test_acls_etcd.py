"""ACLs in cluster mode: CreateAcls/DeleteAcls on one broker's EtcdMetadataStore are stored in etcd
and seen by every other broker's view (before, the etcd store could not hold ACLs at all)."""

from __future__ import annotations

from security.authorizer import AclBinding, AclOperation, PatternType, Permission, ResourceType
from tests.cluster.support import wait_until


def _acl(name: str, op: AclOperation, permission: Permission = Permission.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", op, permission)


async def test_acls_written_on_one_broker_are_seen_by_another(two_stores) -> None:
    a, b = two_stores
    read, write = _acl("orders", AclOperation.READ), _acl("orders", AclOperation.WRITE)
    await a.alter_acls([read, write, read], [])
    assert a.acls() == (read, write)  # a binding created twice is kept once
    await wait_until(lambda: b.acls() == (read, write), "ACLs in b's view")
    deny = _acl("orders", AclOperation.WRITE, Permission.DENY)
    await b.alter_acls([deny], [write])
    await wait_until(lambda: a.acls() == (read, deny), "b's change in a's view")
