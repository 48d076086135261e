"""StandardAuthorizer semantics of security/authorizer.py: patterns, deny wins, implied operations,
super users, allow.everyone.if.no.acl.found, authorizeByResourceType, filters and validation."""

from __future__ import annotations

from security.authorizer import (
    AclBinding,
    AclBindingFilter,
    Authorizer,
    Permission,
    authorizer_from_config,
    binding_error,
    parse_super_users,
)
from security.authorizer import (
    AclOperation as Op,
)
from security.authorizer import (
    PatternType as P,
)
from security.authorizer import (
    ResourceType as R,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(rtype: R, name: str, op: Op, principal: str = ALICE, *, pattern: P = P.LITERAL,
        perm: Permission = Permission.ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def make(*acls: AclBinding, **kw) -> Authorizer:
    stored = tuple(acls)
    return Authorizer(lambda: stored, **kw)


def test_literal_prefixed_and_wildcard_resources() -> None:
    a = make(acl(R.TOPIC, "orders", Op.READ), acl(R.TOPIC, "pay-", Op.WRITE, pattern=P.PREFIXED),
             acl(R.GROUP, "*", Op.READ))
    assert a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "orders2")  # literal is exact
    assert a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "pay-eu")
    assert a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "pay-")
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "pay")
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "orders")  # other operation
    assert a.authorize(ALICE, HOST, Op.READ, R.GROUP, "any-group")
    assert not a.authorize(BOB, HOST, Op.READ, R.TOPIC, "orders")  # other principal
    assert not a.authorize(ALICE, HOST, Op.READ, R.TRANSACTIONAL_ID, "orders")  # other resource type


def test_deny_wins_over_allow() -> None:
    a = make(acl(R.TOPIC, "*", Op.ALL), acl(R.TOPIC, "secret", Op.READ, perm=Permission.DENY),
             acl(R.TOPIC, "hidden-", Op.ALL, "User:*", pattern=P.PREFIXED, perm=Permission.DENY))
    assert a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "public")
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "secret")
    assert a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "secret")  # the deny is for READ only
    assert not a.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "hidden-x")
    # A DENY implies nothing: denying READ does not deny DESCRIBE (allowed through ALL).
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "secret")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert make(acl(R.TOPIC, "t", op)).authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t"), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS):
        assert not make(acl(R.TOPIC, "t", op)).authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t"), op
    assert make(acl(R.TOPIC, "t", Op.ALTER_CONFIGS)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, R.TOPIC, "t")
    assert not make(acl(R.TOPIC, "t", Op.ALTER)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, R.TOPIC, "t")
    assert not make(acl(R.TOPIC, "t", Op.READ)).authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "t")
    everything = make(acl(R.CLUSTER, "kafka-cluster", Op.ALL))
    assert all(everything.authorize(ALICE, HOST, op, R.CLUSTER, "kafka-cluster")
               for op in (Op.CREATE, Op.ALTER, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS))


def test_principal_and_host_wildcards() -> None:
    a = make(acl(R.TOPIC, "t", Op.READ, "User:*"), acl(R.TOPIC, "u", Op.READ, host="10.0.0.1"))
    assert a.authorize(BOB, HOST, Op.READ, R.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "u")
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, R.TOPIC, "u")


def test_super_users_and_allow_everyone() -> None:
    assert parse_super_users(" User:admin ; User:ops;") == {"User:admin", "User:ops"}
    a = make(acl(R.TOPIC, "t", Op.ALL, "User:*", perm=Permission.DENY), super_users={"User:admin"})
    assert a.authorize("User:admin", HOST, Op.WRITE, R.TOPIC, "t")  # super users ignore DENY
    assert a.authorize("User:admin", HOST, Op.READ, R.GROUP, "no-acl-at-all")
    assert not a.authorize(ALICE, HOST, Op.READ, R.GROUP, "no-acl-at-all")  # default false
    everyone = make(acl(R.TOPIC, "t", Op.READ, BOB), allow_everyone_if_no_acl_found=True)
    assert everyone.authorize(ALICE, HOST, Op.WRITE, R.TOPIC, "other")  # no ACL on "other"
    # "no ACL found" is per resource, whoever the ACLs are for: alice gets nothing on t.
    assert not everyone.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")


def test_acls_replaced_are_reindexed() -> None:
    box: list[tuple[AclBinding, ...]] = [()]
    a = Authorizer(lambda: box[0])
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")
    box[0] = (acl(R.TOPIC, "t", Op.READ),)
    assert a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")
    box[0] = ()
    assert not a.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")


def test_authorize_by_resource_type() -> None:
    # KIP-679: WRITE on any topic lets an idempotent producer in.
    assert not make().authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert make(acl(R.TOPIC, "t", Op.WRITE)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert not make(acl(R.TOPIC, "t", Op.READ)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    denied = make(acl(R.TOPIC, "t", Op.WRITE), acl(R.TOPIC, "t", Op.WRITE, perm=Permission.DENY))
    assert not denied.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    prefix_denied = make(acl(R.TOPIC, "abc", Op.WRITE), acl(R.TOPIC, "a", Op.WRITE, pattern=P.PREFIXED,
                                                            perm=Permission.DENY))
    assert not prefix_denied.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    wildcard_deny = make(acl(R.TOPIC, "t", Op.WRITE), acl(R.TOPIC, "*", Op.ALL, perm=Permission.DENY))
    assert not wildcard_deny.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert make(super_users={ALICE}).authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)


def test_filters() -> None:
    lit = acl(R.TOPIC, "orders", Op.READ)
    pre = acl(R.TOPIC, "ord", Op.WRITE, BOB, pattern=P.PREFIXED)
    wild = acl(R.TOPIC, "*", Op.DESCRIBE, perm=Permission.DENY)
    grp = acl(R.GROUP, "orders", Op.READ)
    every = AclBindingFilter(R.ANY, None, P.ANY, None, None, Op.ANY, Permission.ANY)
    assert all(every.matches(b) for b in (lit, pre, wild, grp))
    match = AclBindingFilter(R.TOPIC, "orders", P.MATCH, None, None, Op.ANY, Permission.ANY)
    assert [b for b in (lit, pre, wild, grp) if match.matches(b)] == [lit, pre, wild]
    exact = AclBindingFilter(R.TOPIC, "orders", P.ANY, None, None, Op.ANY, Permission.ANY)
    assert [b for b in (lit, pre, wild, grp) if exact.matches(b)] == [lit]
    prefixed = AclBindingFilter(R.ANY, None, P.PREFIXED, BOB, None, Op.WRITE, Permission.ALLOW)
    assert [b for b in (lit, pre, wild, grp) if prefixed.matches(b)] == [pre]
    assert AclBindingFilter.of(0, None, 1, None, None, 1, 1).error() is not None  # UNKNOWN resource type
    assert AclBindingFilter.of(1, None, 1, None, None, 1, 1).error() is None


def test_binding_validation() -> None:
    ok = acl(R.TOPIC, "t", Op.READ)
    assert binding_error(ok) is None
    bad = [
        AclBinding.of(0, "t", 3, ALICE, "*", 3, 3),  # UNKNOWN resource type
        AclBinding.of(1, "t", 3, ALICE, "*", 3, 3),  # ANY resource type
        AclBinding.of(2, "t", 2, ALICE, "*", 3, 3),  # MATCH pattern
        AclBinding.of(2, "t", 3, ALICE, "*", 1, 3),  # ANY operation
        AclBinding.of(2, "t", 3, ALICE, "*", 3, 1),  # ANY permission
        AclBinding.of(4, "other", 3, ALICE, "*", 7, 3),  # cluster not named kafka-cluster
        AclBinding.of(2, "", 3, ALICE, "*", 3, 3),  # empty name
        AclBinding.of(2, "t", 3, "alice", "*", 3, 3),  # principal without a type
        AclBinding.of(2, "t", 3, ALICE, "*", 99, 3),  # unknown operation code
    ]
    assert all(binding_error(b) is not None for b in bad)
    assert AclBinding.from_json(ok.to_json()) == ok


def test_from_config() -> None:
    def cfg(values: dict):
        return lambda name: values.get(name)

    assert authorizer_from_config(cfg({"authorizer.class.name": ""}), tuple) is None
    assert authorizer_from_config(cfg({"authorizer.class.name": "com.example.Other"}), tuple) is None
    for name in ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "kafka.security.authorizer.AclAuthorizer", "standard"):
        a = authorizer_from_config(cfg({"authorizer.class.name": name, "super.users": "User:a;User:b",
                                        "allow.everyone.if.no.acl.found": True}), tuple)
        assert a is not None and a.super_users == {"User:a", "User:b"} and a.allow_everyone_if_no_acl_found
