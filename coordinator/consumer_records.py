"""KIP-848 consumer groups as __consumer_offsets records: what to write, and how to replay.

Kafka persists a consumer group as a set of keyed records (storage/internal_records.py, types 3-8
and 16): the group epoch, the subscribed topics' metadata, per member its metadata, target
assignment and current assignment, the target assignment epoch, and each resolved regular
expression. A key's last record wins and a tombstone deletes it, so the group's persisted state
is a map key -> value. ``image`` computes that map (values as plain tuples, cheap to compare)
from a live ConsumerGroup; ``diff_records`` turns the difference between the image last written
and the current one into the records to append (only what changed, as Kafka's
GroupMetadataManager emits a record per change); ``GroupReplay`` rebuilds ConsumerGroup objects
from the records of one partition.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from coordinator.consumer_protocol import STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember, MemberState
from storage import internal_records as IR

# Image keys: (record type, member id or regex or "").
ImageKey = tuple[int, str]
Image = dict[ImageKey, tuple[Any, ...]]

_STATE_CODE = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_CODE_STATE = {v: k for k, v in _STATE_CODE.items()}

# Kafka's record order within one write: a member's tombstones (current assignment, target,
# metadata) first, then metadata, subscription metadata, group epoch, target assignment (members,
# then epoch), current assignments; a deleted group's group-level tombstones come last.
_PUT_ORDER = (IR.CONSUMER_GROUP_MEMBER_METADATA, IR.CONSUMER_GROUP_REGULAR_EXPRESSION,
              IR.CONSUMER_GROUP_PARTITION_METADATA, IR.CONSUMER_GROUP_METADATA,
              IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
              IR.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
_DELETE_ORDER = (IR.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                 IR.CONSUMER_GROUP_MEMBER_METADATA, IR.CONSUMER_GROUP_REGULAR_EXPRESSION,
                 IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, IR.CONSUMER_GROUP_PARTITION_METADATA,
                 IR.CONSUMER_GROUP_METADATA)
_MEMBER_TYPES = (IR.CONSUMER_GROUP_MEMBER_METADATA, IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                 IR.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)


def _frozen(a: dict[uuid.UUID, set[int]]) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return tuple(sorted((t, tuple(sorted(ps))) for t, ps in a.items() if ps))


def image(group: ConsumerGroup) -> Image:
    """The records that describe ``group`` now, as comparable tuples. Assignments are held by
    reference (the protocol code replaces them, never mutates them), so an unchanged member
    compares by identity and only changed records are encoded."""
    out: Image = {
        (IR.CONSUMER_GROUP_METADATA, ""): (group.group_epoch,),
        (IR.CONSUMER_GROUP_PARTITION_METADATA, ""): tuple(sorted(
            (name, tid, n) for name, (tid, n) in group.subscription_metadata.items())),
        (IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, ""): (group.assignment_epoch,),
    }
    for regex, topics in group.resolved_regex.items():
        out[(IR.CONSUMER_GROUP_REGULAR_EXPRESSION, regex)] = (tuple(sorted(topics)),)
    for mid, m in group.members.items():
        out[(IR.CONSUMER_GROUP_MEMBER_METADATA, mid)] = (
            m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_topic_names),
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor)
        out[(IR.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, mid)] = (
            m.member_epoch, m.previous_member_epoch, _STATE_CODE[m.state], m.assigned, m.pending_revocation)
    for mid, target in group.target.items():
        if mid in group.members:
            out[(IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)] = (target,)
    return out


def _topic_partitions(a: dict[uuid.UUID, set[int]]) -> list[dict[str, Any]]:
    return [{"topicId": t, "partitions": list(ps)} for t, ps in _frozen(a)]


def _value(record_type: int, v: tuple[Any, ...], regex_version: int, now_ms: int) -> bytes:
    data: dict[str, Any]
    if record_type == IR.CONSUMER_GROUP_METADATA:
        data = {"epoch": v[0]}
    elif record_type == IR.CONSUMER_GROUP_PARTITION_METADATA:
        # No rack information is kept: Kafka stores an empty PartitionMetadata list then.
        data = {"topics": [{"topicId": tid, "topicName": name, "numPartitions": n, "partitionMetadata": []}
                           for name, tid, n in v]}
    elif record_type == IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        data = {"assignmentEpoch": v[0]}
    elif record_type == IR.CONSUMER_GROUP_REGULAR_EXPRESSION:
        data = {"topics": list(v[0]), "version": regex_version, "timestamp": now_ms}
    elif record_type == IR.CONSUMER_GROUP_MEMBER_METADATA:
        data = {"instanceId": v[0], "rackId": v[1], "clientId": v[2], "clientHost": v[3],
                "subscribedTopicNames": list(v[4]), "subscribedTopicRegex": v[5], "rebalanceTimeoutMs": v[6],
                "serverAssignor": v[7]}
    elif record_type == IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        data = {"topicPartitions": _topic_partitions(v[0])}
    else:
        data = {"memberEpoch": v[0], "previousMemberEpoch": v[1], "state": v[2],
                "assignedPartitions": _topic_partitions(v[3]), "partitionsPendingRevocation": _topic_partitions(v[4])}
    return IR.consumer_group_value(record_type, data)


def _key(group_id: str, k: ImageKey) -> bytes:
    rtype, sub = k
    if rtype in _MEMBER_TYPES:
        return IR.consumer_group_key(rtype, group_id, member_id=sub)
    if rtype == IR.CONSUMER_GROUP_REGULAR_EXPRESSION:
        return IR.consumer_group_key(rtype, group_id, regex=sub)
    return IR.consumer_group_key(rtype, group_id)


def diff_records(group_id: str, old: Image, new: Image, *, regex_version: int = -1, now_ms: int = -1
                 ) -> list[tuple[bytes, bytes | None]]:
    """Records that take the log from ``old`` to ``new`` (tombstones for keys gone)."""
    deletes = [k for k in old if k not in new]
    puts = [k for k, v in new.items() if old.get(k) != v]
    out: list[tuple[bytes, bytes | None]] = []
    for rtype in _DELETE_ORDER[:4]:
        out.extend((_key(group_id, k), None) for k in sorted(deletes) if k[0] == rtype)
    for rtype in _PUT_ORDER:
        out.extend((_key(group_id, k), _value(rtype, new[k], regex_version, now_ms))
                   for k in sorted(puts) if k[0] == rtype)
    for rtype in _DELETE_ORDER[4:]:
        out.extend((_key(group_id, k), None) for k in deletes if k[0] == rtype)
    return out


def tombstones(group_id: str, persisted: Image) -> list[tuple[bytes, bytes | None]]:
    """Every record of a deleted group, tombstoned (Kafka's createGroupTombstoneRecords); the
    group-level keys are tombstoned even if this coordinator never wrote them."""
    keys = dict.fromkeys(persisted, ())
    for rtype in (IR.CONSUMER_GROUP_METADATA, IR.CONSUMER_GROUP_PARTITION_METADATA,
                  IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA):
        keys.setdefault((rtype, ""), ())
    return diff_records(group_id, keys, {})


# --- replay ------------------------------------------------------------------------------------


def _assignment(items: list[dict[str, Any]] | None) -> dict[uuid.UUID, set[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for tp in items or []:
        if tp["partitions"]:
            out.setdefault(tp["topicId"], set()).update(tp["partitions"])
    return out


@dataclass(slots=True)
class _Pending:
    """One group's records as replayed so far (last value per key; tombstones delete)."""

    values: dict[ImageKey, dict[str, Any]] = field(default_factory=dict)
    last_offset: int = -1


class GroupReplay:
    """Collects the KIP-848 records of one __consumer_offsets partition and builds the groups."""

    def __init__(self) -> None:
        self.groups: dict[str, _Pending] = {}

    def apply(self, record_type: int, key: dict[str, Any], value: dict[str, Any] | None, offset: int) -> None:
        group_id = key["groupId"]
        sub = key.get("memberId") or key.get("regularExpression") or ""
        pending = self.groups.setdefault(group_id, _Pending())
        pending.last_offset = offset
        if value is None:
            pending.values.pop((record_type, sub), None)
            if record_type == IR.CONSUMER_GROUP_METADATA:
                # The epoch tombstone is the last of a deleted group's records: it is gone.
                pending.values.clear()
        else:
            pending.values[(record_type, sub)] = value

    def drop(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    def build(self, group_id: str, now_ms: int, default_assignor: str) -> ConsumerGroup | None:
        pending = self.groups.get(group_id)
        if pending is None or not pending.values:
            return None
        vals = pending.values
        group = ConsumerGroup(group_id, now_ms)
        group.assignor_name = default_assignor
        group.group_epoch = vals.get((IR.CONSUMER_GROUP_METADATA, ""), {}).get("epoch", 0)
        group.assignment_epoch = vals.get((IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, ""), {}).get(
            "assignmentEpoch", 0)
        for t in vals.get((IR.CONSUMER_GROUP_PARTITION_METADATA, ""), {}).get("topics") or []:
            group.subscription_metadata[t["topicName"]] = (t["topicId"], t["numPartitions"])
        for (rtype, sub), v in vals.items():
            if rtype == IR.CONSUMER_GROUP_REGULAR_EXPRESSION:
                group.resolved_regex[sub] = frozenset(v["topics"] or ())
            elif rtype == IR.CONSUMER_GROUP_MEMBER_METADATA:
                m = ConsumerMember(
                    member_id=sub, instance_id=v["instanceId"], rack_id=v["rackId"], client_id=v["clientId"],
                    client_host=v["clientHost"], rebalance_timeout_ms=v["rebalanceTimeoutMs"],
                    subscribed_topic_names=list(v["subscribedTopicNames"] or []),
                    subscribed_topic_regex=v["subscribedTopicRegex"], server_assignor=v["serverAssignor"])
                cur = vals.get((IR.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, sub))
                if cur is not None:
                    m.member_epoch, m.previous_member_epoch = cur["memberEpoch"], cur["previousMemberEpoch"]
                    m.state = _CODE_STATE.get(cur["state"], MemberState.STABLE)
                    m.assigned = _assignment(cur["assignedPartitions"])
                    m.pending_revocation = _assignment(cur["partitionsPendingRevocation"])
                    m.left_static = m.member_epoch == STATIC_LEAVE_EPOCH
                group.members[sub] = m
                if m.instance_id is not None:
                    group.static_members[m.instance_id] = sub
        for (rtype, sub), v in vals.items():
            if rtype == IR.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER and sub in group.members:
                group.target[sub] = _assignment(v["topicPartitions"])
        # Regexes were resolved against topics as they were then: resolve again on first use.
        group.regex_version = -1
        group.persisted = image(group)
        return group
