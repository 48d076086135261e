"""ACLs and the authorizer: Kafka's StandardAuthorizer semantics over the ACL bindings the metadata store holds.

An ACL binding is (resource type, resource name, pattern type LITERAL/PREFIXED, principal, host,
operation, ALLOW/DENY), with Kafka's wire codes. :class:`Authorizer` answers "may principal P from
host H perform operation O on resource R?" as Kafka's StandardAuthorizer(Data) does:

- a super user (``super.users``, semicolon-separated principals) may do anything;
- the ACLs that apply to R are the LITERAL ones named R, the LITERAL wildcard ``*`` and the PREFIXED
  ones whose name is a prefix of R; of those, an ACL matches when its principal is P or ``User:*``,
  its host is H or ``*``, and its operation is O or ALL -- for ALLOW ACLs also an operation that
  implies O (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
- any matching DENY wins; else any matching ALLOW allows; else, when no ACL at all exists for R
  (whatever its principal), ``allow.everyone.if.no.acl.found`` (default false) decides; else denied.

:meth:`Authorizer.authorize_by_resource_type` is the Authorizer interface's default method (KIP-679:
"WRITE on any topic" for idempotent producers). :class:`AclBindingFilter` is the filter of
DescribeAcls / DeleteAcls (ANY and MATCH pattern types, null fields match anything), with Kafka's
ResourcePatternFilter / AccessControlEntryFilter semantics. This module never imports ``broker``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ResourceType(IntEnum):
    """Kafka's ResourceType codes (clients/.../common/resource/ResourceType.java)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's AclOperation codes (the wire values, also the authorized-operations bit positions)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939 (Kafka 4.1): enable2Pc in InitProducerId


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"

# The values of authorizer.class.name that turn ACL enforcement on.
STANDARD_AUTHORIZER_NAMES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "standard",
})

_O = AclOperation
# StandardAuthorizerData: an ALLOW of any of these also allows DESCRIBE / DESCRIBE_CONFIGS.
IMPLIES_DESCRIBE = frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS})
# Resource types ACLs may be created for here (DelegationToken and User are not served).
SUPPORTED_RESOURCE_TYPES = frozenset({ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                      ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN,
                                      ResourceType.USER})


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: Permission

    def to_json(self) -> dict[str, Any]:
        return {"resource_type": self.resource_type.name, "name": self.name, "pattern_type": self.pattern_type.name,
                "principal": self.principal, "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AclBinding:
        return cls(ResourceType[d["resource_type"]], d["name"], PatternType[d["pattern_type"]], d["principal"],
                   d["host"], AclOperation[d["operation"]], Permission[d["permission"]])

    @classmethod
    def of(cls, resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
           permission: int) -> AclBinding:
        """From wire codes; an unknown code becomes UNKNOWN (and fails :func:`binding_error`)."""
        return cls(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal, host,
                   _enum(AclOperation, operation), _enum(Permission, permission))


def _enum(cls: type[IntEnum], code: int) -> Any:
    try:
        return cls(code)
    except ValueError:
        return cls(0)


def _parse_principal(principal: str | None) -> bool:
    # Kafka's SecurityUtils.parseKafkaPrincipal: "Type:name" with a non-empty type.
    return bool(principal) and ":" in principal and principal.index(":") > 0


def binding_error(b: AclBinding) -> str | None:
    """Why Kafka refuses to create this ACL (INVALID_REQUEST), or None. The checks and messages of
    CreateAclsRequest.validate, AclApis.handleCreateAcls and AclControlManager.validateNewAcl."""
    if (b.pattern_type == PatternType.UNKNOWN or b.resource_type == ResourceType.UNKNOWN
            or b.operation == AclOperation.UNKNOWN or b.permission == Permission.UNKNOWN):
        return "Invalid ACL creation: contains UNKNOWN elements"
    if b.resource_type == ResourceType.ANY:
        return "Invalid resourceType " + b.resource_type.name
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + b.pattern_type.name
    if b.operation == AclOperation.ANY:
        return "Invalid operation " + b.operation.name
    if b.permission == Permission.ANY:
        return "Invalid permissionType " + b.permission.name
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.name:
        return "Invalid empty resource name specified"
    if not _parse_principal(b.principal):
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal " \
               "type from the principal name)"
    if b.host is None or b.host == "":
        return "Invalid null host"
    return None


def acls_applied(current: tuple[AclBinding, ...], creations: list[AclBinding],
                 deletions: list[AclBinding]) -> tuple[AclBinding, ...]:
    """The ACL set after one CreateAcls/DeleteAcls change: deletions removed, creations added once."""
    gone = set(deletions)
    return tuple(dict.fromkeys([*(b for b in current if b not in gone), *creations]))


def encode_acls(acls: tuple[AclBinding, ...]) -> bytes:
    """The stored form of an ACL set (a file on one node, an etcd value in a cluster)."""
    return json.dumps({"version": 1, "acls": [b.to_json() for b in acls]}, indent=1).encode()


def decode_acls(data: bytes) -> tuple[AclBinding, ...]:
    return tuple(AclBinding.from_json(d) for d in json.loads(data).get("acls", []))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls filter: None fields and the ANY codes match everything."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: Permission

    @classmethod
    def of(cls, resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
           operation: int, permission: int) -> AclBindingFilter:
        return cls(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal, host,
                   _enum(AclOperation, operation), _enum(Permission, permission))

    def error(self) -> str | None:
        """Kafka rejects filters with UNKNOWN elements (DescribeAclsRequest/DeleteAclsRequest.validate)."""
        if (self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == AclOperation.UNKNOWN or self.permission == Permission.UNKNOWN):
            return "Filter contain UNKNOWN elements"
        return None

    def matches_pattern(self, b: AclBinding) -> bool:
        """ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.name == b.name
        # MATCH: every pattern that would apply to a resource of that name.
        if b.pattern_type == PatternType.LITERAL:
            return self.name == b.name or b.name == WILDCARD_RESOURCE
        return self.name.startswith(b.name)

    def matches(self, b: AclBinding) -> bool:
        if not self.matches_pattern(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission == Permission.ANY or self.permission == b.permission


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class Authorizer:
    """Answers authorization questions over the ACLs that ``acls()`` returns.

    ``acls`` is called on every question; the index is rebuilt only when it returns a different
    object, so a store that replaces its (immutable) sequence on every change needs no notification.
    """

    def __init__(self, acls: Callable[[], Sequence[AclBinding]], *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._indexed: Sequence[AclBinding] | None = None
        self._index: dict[tuple[ResourceType, PatternType, str], list[AclBinding]] = {}
        # Longest PREFIXED name per resource type, to bound the prefix walk.
        self._longest_prefix: dict[ResourceType, int] = {}

    def _current(self) -> dict[tuple[ResourceType, PatternType, str], list[AclBinding]]:
        acls = self._acls()
        if acls is not self._indexed:
            index: dict[tuple[ResourceType, PatternType, str], list[AclBinding]] = {}
            longest: dict[ResourceType, int] = {}
            for b in acls:
                index.setdefault((b.resource_type, b.pattern_type, b.name), []).append(b)
                if b.pattern_type == PatternType.PREFIXED:
                    longest[b.resource_type] = max(longest.get(b.resource_type, 0), len(b.name))
            self._index, self._longest_prefix, self._indexed = index, longest, acls
        return self._index

    def _resource_acls(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        index = self._current()
        out = list(index.get((rtype, PatternType.LITERAL, name), ()))
        if name != WILDCARD_RESOURCE:
            out += index.get((rtype, PatternType.LITERAL, WILDCARD_RESOURCE), ())
        for i in range(1, min(len(name), self._longest_prefix.get(rtype, 0)) + 1):
            out += index.get((rtype, PatternType.PREFIXED, name[:i]), ())
        return out

    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self._resource_acls(rtype, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for acl in acls:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != host and acl.host != WILDCARD_HOST:
                continue
            if acl.permission == Permission.DENY:
                if acl.operation == AclOperation.ALL or acl.operation == op:
                    return False  # deny wins
            elif not allowed and _allow_covers(acl.operation, op):
                allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation, rtype: ResourceType) -> bool:
        """True when ``op`` is allowed on at least one resource of the type: the Authorizer interface's
        default authorizeByResourceType (used for IDEMPOTENT_WRITE's "WRITE on any topic", KIP-679)."""
        # Kafka checks a hard-coded resource name first, so that super users (and allow.everyone with
        # no ACL on that name) are allowed whatever the DENY ACLs say.
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        self._current()
        for acl in self._indexed or ():
            if acl.resource_type != rtype:
                continue
            if acl.host != host and acl.host != WILDCARD_HOST:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != AclOperation.ALL:
                continue
            if acl.permission == Permission.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.name == WILDCARD_RESOURCE:
                        return False
                    deny_literal.add(acl.name)
                elif acl.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(acl.name)
            elif acl.permission == Permission.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.name == WILDCARD_RESOURCE:
                    return True
                allow.append((acl.pattern_type, acl.name))
        for ptype, name in allow:
            if ptype == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    def allowed_operations(self, principal: str, host: str, rtype: ResourceType, name: str,
                           candidates: Iterable[AclOperation]) -> frozenset[AclOperation]:
        return frozenset(op for op in candidates if self.authorize(principal, host, op, rtype, name))


def _allow_covers(acl_op: AclOperation, op: AclOperation) -> bool:
    if acl_op == AclOperation.ALL or acl_op == op:
        return True
    if op == AclOperation.DESCRIBE:
        return acl_op in IMPLIES_DESCRIBE
    if op == AclOperation.DESCRIBE_CONFIGS:
        return acl_op in IMPLIES_DESCRIBE_CONFIGS
    return False


def authorizer_from_config(get: Callable[[str], Any], acls: Callable[[], Sequence[AclBinding]]) -> Authorizer | None:
    """The authorizer ``authorizer.class.name`` asks for, or None (everything allowed, as Kafka with no
    authorizer). ``get`` looks a broker config up by name."""
    name = (get("authorizer.class.name") or "").strip()
    if name not in STANDARD_AUTHORIZER_NAMES:
        return None
    return Authorizer(acls, super_users=parse_super_users(get("super.users")),
                      allow_everyone_if_no_acl_found=bool(get("allow.everyone.if.no.acl.found")))
