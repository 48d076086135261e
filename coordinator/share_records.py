"""KIP-932 share groups as __consumer_offsets records: what to write, and how to replay.

Kafka persists a share group as keyed records (storage/internal_records.py, types 10-15): per
member its metadata (10), target assignment (13) and current assignment (14); for the group its
epoch with the subscription metadata hash (11), the target assignment epoch (12) and the
share-partition initialization state (15, ShareGroupStatePartitionMetadata). A key's last record
wins and a tombstone deletes it, so the persisted group is a map key -> value, as for KIP-848
consumer groups (coordinator/consumer_records.py, same approach): ``image`` computes that map from
a live ShareGroup, ``diff_records`` the records taking the log from one image to another,
``ShareGroupReplay`` rebuilds groups from one partition's records.
"""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.share_group import InitTopic, ShareGroup, ShareMember, TopicAssignment
from storage import internal_records as IR

ImageKey = tuple[int, str]
Image = dict[ImageKey, tuple[Any, ...]]

_MEMBER_TYPES = (IR.SHARE_GROUP_MEMBER_METADATA, IR.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                 IR.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT)
# Kafka's order within one write: member metadata, group epoch, target (members then epoch),
# current assignments, share-partition state; a member's tombstones (current, target, metadata)
# come first; a deleted group's group-level tombstones last.
_PUT_ORDER = (IR.SHARE_GROUP_MEMBER_METADATA, IR.SHARE_GROUP_METADATA, IR.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
              IR.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, IR.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
              IR.SHARE_GROUP_STATE_PARTITION_METADATA)
_MEMBER_DELETE_ORDER = (IR.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, IR.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                        IR.SHARE_GROUP_MEMBER_METADATA)
_GROUP_DELETE_ORDER = (IR.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, IR.SHARE_GROUP_STATE_PARTITION_METADATA,
                       IR.SHARE_GROUP_METADATA)


def _frozen(a: TopicAssignment) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return tuple(sorted((t, tuple(sorted(ps))) for t, ps in a.items() if ps))


def _frozen_init(topics: dict[uuid.UUID, InitTopic]) -> tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]:
    return tuple(sorted((tid, t.name, tuple(sorted(t.partitions))) for tid, t in topics.items()))


def image(group: ShareGroup) -> Image:
    out: Image = {
        (IR.SHARE_GROUP_METADATA, ""): (group.group_epoch, group.metadata_hash),
        (IR.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, ""): (group.assignment_epoch,),
    }
    if group.initializing or group.initialized or group.deleting:
        out[(IR.SHARE_GROUP_STATE_PARTITION_METADATA, "")] = (
            _frozen_init(group.initializing), _frozen_init(group.initialized),
            tuple(sorted(group.deleting.items())))
    for mid, m in group.members.items():
        out[(IR.SHARE_GROUP_MEMBER_METADATA, mid)] = (m.rack_id, m.client_id, m.client_host,
                                                       tuple(m.subscribed_topic_names))
        out[(IR.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, mid)] = (m.member_epoch, m.previous_member_epoch, m.state,
                                                                 _frozen(m.assigned))
    for mid, target in group.target.items():
        if mid in group.members:
            out[(IR.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)] = (_frozen(target),)
    return out


def _topic_partitions(frozen: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]) -> list[dict[str, Any]]:
    return [{"topicId": t, "partitions": list(ps)} for t, ps in frozen]


def _value(record_type: int, v: tuple[Any, ...]) -> bytes:
    data: dict[str, Any]
    if record_type == IR.SHARE_GROUP_METADATA:
        data = {"epoch": v[0], "metadataHash": v[1]}
    elif record_type == IR.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        data = {"assignmentEpoch": v[0]}
    elif record_type == IR.SHARE_GROUP_MEMBER_METADATA:
        data = {"rackId": v[0], "clientId": v[1], "clientHost": v[2], "subscribedTopicNames": list(v[3])}
    elif record_type == IR.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        data = {"topicPartitions": _topic_partitions(v[0])}
    elif record_type == IR.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        data = {"memberEpoch": v[0], "previousMemberEpoch": v[1], "state": v[2],
                "assignedPartitions": _topic_partitions(v[3])}
    else:
        data = {"initializingTopics": [{"topicId": t, "topicName": n, "partitions": list(ps)} for t, n, ps in v[0]],
                "initializedTopics": [{"topicId": t, "topicName": n, "partitions": list(ps)} for t, n, ps in v[1]],
                "deletingTopics": [{"topicId": t, "topicName": n} for t, n in v[2]]}
    return IR.consumer_group_value(record_type, data)


def _key(group_id: str, k: ImageKey) -> bytes:
    rtype, sub = k
    if rtype in _MEMBER_TYPES:
        return IR.consumer_group_key(rtype, group_id, member_id=sub)
    return IR.consumer_group_key(rtype, group_id)


def diff_records(group_id: str, old: Image, new: Image) -> list[tuple[bytes, bytes | None]]:
    deletes = [k for k in old if k not in new]
    puts = [k for k, v in new.items() if old.get(k) != v]
    out: list[tuple[bytes, bytes | None]] = []
    for rtype in _MEMBER_DELETE_ORDER:
        out.extend((_key(group_id, k), None) for k in sorted(deletes) if k[0] == rtype)
    for rtype in _PUT_ORDER:
        out.extend((_key(group_id, k), _value(rtype, new[k])) for k in sorted(puts) if k[0] == rtype)
    for rtype in _GROUP_DELETE_ORDER:
        out.extend((_key(group_id, k), None) for k in deletes if k[0] == rtype)
    return out


def tombstones(group_id: str, persisted: Image) -> list[tuple[bytes, bytes | None]]:
    """Every record of a deleted share group, tombstoned (Kafka's createGroupTombstoneRecords)."""
    keys = dict.fromkeys(persisted, ())
    for rtype in _GROUP_DELETE_ORDER:
        keys.setdefault((rtype, ""), ())
    return diff_records(group_id, keys, {})


# --- replay ------------------------------------------------------------------------------------


def _assignment(items: list[dict[str, Any]] | None) -> TopicAssignment:
    out: dict[uuid.UUID, set[int]] = {}
    for tp in items or []:
        if tp["partitions"]:
            out.setdefault(tp["topicId"], set()).update(tp["partitions"])
    return {t: frozenset(ps) for t, ps in out.items()}


class ShareGroupReplay:
    """Collects the share-group records of one __consumer_offsets partition and builds the groups."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[ImageKey, dict[str, Any]]] = {}

    def apply(self, record_type: int, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        values = self.groups.setdefault(key["groupId"], {})
        k = (record_type, key.get("memberId") or "")
        if value is None:
            values.pop(k, None)
            if record_type == IR.SHARE_GROUP_METADATA:
                values.clear()  # the epoch tombstone is the last of a deleted group's records
        else:
            values[k] = value

    def build(self, group_id: str, now_ms: int) -> ShareGroup | None:
        vals = self.groups.get(group_id)
        if not vals:
            return None
        group = ShareGroup(group_id, now_ms)
        meta = vals.get((IR.SHARE_GROUP_METADATA, ""), {})
        group.group_epoch, group.metadata_hash = meta.get("epoch", 0), meta.get("metadataHash", 0)
        group.assignment_epoch = vals.get((IR.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, ""), {}).get("assignmentEpoch", 0)
        state = vals.get((IR.SHARE_GROUP_STATE_PARTITION_METADATA, ""))
        if state is not None:
            for t in state["initializingTopics"] or []:
                group.initializing[t["topicId"]] = InitTopic(t["topicName"], frozenset(t["partitions"] or ()), 0)
            for t in state["initializedTopics"] or []:
                group.initialized[t["topicId"]] = InitTopic(t["topicName"], frozenset(t["partitions"] or ()))
            for t in state["deletingTopics"] or []:
                group.deleting[t["topicId"]] = t["topicName"]
        for (rtype, sub), v in vals.items():
            if rtype != IR.SHARE_GROUP_MEMBER_METADATA:
                continue
            m = ShareMember(member_id=sub, rack_id=v["rackId"], client_id=v["clientId"], client_host=v["clientHost"],
                            subscribed_topic_names=tuple(v["subscribedTopicNames"] or ()))
            cur = vals.get((IR.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, sub))
            if cur is not None:
                m.member_epoch, m.previous_member_epoch = cur["memberEpoch"], cur["previousMemberEpoch"]
                m.state = cur["state"]
                m.assigned = _assignment(cur["assignedPartitions"])
            group.members[sub] = m
        for (rtype, sub), v in vals.items():
            if rtype == IR.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER and sub in group.members:
                group.target[sub] = _assignment(v["topicPartitions"])
        group.persisted = image(group)
        return group
