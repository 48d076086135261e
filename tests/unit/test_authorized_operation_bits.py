"""The authorized-operations bit sets (broker/authorized_operations.py) against Kafka's values.

Bits are ``1 << AclOperation code`` (clients/.../common/acl/AclOperation.java); the sets per resource
type are Kafka 3.9's AclEntry.supportedOperations, which a broker with no authorizer answers whole.
"""

from __future__ import annotations

from broker.authorized_operations import (
    OMITTED,
    AclOperation,
    ResourceType,
    as_bitfield,
    authorized_operations,
    cluster_authorized_operations,
    from_bit_field,
)


def test_bit_sets_match_kafka() -> None:
    # READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11
    assert authorized_operations(None, ResourceType.TOPIC, "t") == 0b1101_1111_1000 == 3576
    # CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
    assert cluster_authorized_operations(None) == 0b1_1111_1010_0000 == 8096
    # READ 3, DELETE 6, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11
    assert authorized_operations(None, ResourceType.GROUP, "g") == 0b1101_0100_1000 == 3400
    assert len(from_bit_field(3576)) == 8 and len(from_bit_field(8096)) == 7 and len(from_bit_field(3400)) == 5
    assert AclOperation.CLUSTER_ACTION not in from_bit_field(3576)


def test_kafka_python_bitfield_form() -> None:
    assert as_bitfield(OMITTED) is None
    assert as_bitfield(3400) == {3, 6, 8, 10, 11}
    assert as_bitfield(0) == set()
