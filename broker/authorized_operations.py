"""The "authorized operations" bit sets that describe APIs report when a client asks for them.

Metadata (v8+ topics, v8-10 cluster), DescribeCluster, DescribeGroups (v3+), ConsumerGroupDescribe
and DescribeTopicPartitions carry a 32-bit field in which bit ``1 << code`` is set for every
allowed ``AclOperation`` (codes from Kafka's clients/.../common/acl/AclOperation.java). Kafka
fills it in ``AuthHelper.authorizedOperations``: the operations that apply to the resource type
(``AclEntry.supportedOperations``), filtered by the authorizer; with no authorizer configured,
all of them. ``OMITTED`` (Integer.MIN_VALUE, the schema default) means "not requested".

:func:`allowed_operations` asks the request context's authorizer (security/authorizer.py) about
each supported operation; with no authorizer it answers the full set.
"""

from __future__ import annotations

from typing import Any

from security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

# The codes live with the authorizer (security/authorizer.py); re-exported for the describe handlers.
__all__ = ["AclOperation", "ResourceType", "CLUSTER_NAME"]


# Kafka's value for "not requested" (the schema default of every authorized-operations field).
OMITTED = -(2**31)

_O = AclOperation
# AclEntry.supportedOperations in Kafka 3.9 (server/.../security/authorizer/AclEntry.java).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}


def to_bit_field(operations: frozenset[AclOperation] | set[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit ``code`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def from_bit_field(bits: int) -> set[AclOperation]:
    """The operations whose bits are set (for tests and tools)."""
    return {op for op in AclOperation if bits & (1 << int(op))}


def as_bitfield(bits: int) -> set[int] | None:
    """The same answer for structs that kafka-python declares as "bitfield" (Metadata, DescribeCluster,
    DescribeGroups): a set of bit positions, with None for OMITTED (it encodes None as bit 31 only)."""
    return None if bits == OMITTED else {int(op) for op in from_bit_field(bits)}


def allowed_operations(ctx: Any, resource_type: ResourceType, resource_name: str) -> frozenset[AclOperation]:
    """The operations ``ctx``'s principal may perform on the resource: every operation that applies to
    the resource type, filtered by the authorizer (all of them with no authorizer, as Kafka)."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    authorizer = ctx.authorizer() if ctx is not None else None
    if authorizer is None:
        return supported
    return authorizer.allowed_operations(ctx.principal, ctx.client_host, resource_type, resource_name, supported)


def authorized_operations(ctx: Any, resource_type: ResourceType, resource_name: str) -> int:
    """The bit set for a resource the client asked about (Kafka's AuthHelper.authorizedOperations)."""
    return to_bit_field(allowed_operations(ctx, resource_type, resource_name))


def cluster_authorized_operations(ctx: Any) -> int:
    """The cluster's bit set; 0 when DESCRIBE on the cluster is not allowed, as Kafka answers
    (AuthHelper.computeDescribeClusterResponse and KafkaApis' Metadata handler)."""
    allowed = allowed_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return to_bit_field(allowed) if AclOperation.DESCRIBE in allowed else 0
