"""Topic config definitions, as data, and how broker configs supply their defaults (synonyms)."""

from __future__ import annotations

from typing import Any

from broker.config.broker_defs import (
    _BROKER_DEFS,
    _DAY_MS,
    _WEEK_MS,
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    MIN_SEGMENT_BYTES,
    TIMESTAMP_TYPES,
    _b,
)
from broker.config.types import LONG_MAX, ConfigDef
from broker.config.validators import (
    GZIP_LEVEL,
    LZ4_LEVEL,
    ZSTD_LEVEL,
    MustBeFalse,
    ThrottledReplicasValidator,
    Validator,
    ValidList,
    ValidString,
    at_least,
    between,
)

SUBJECT_STRATEGIES = tuple(f"io.confluent.kafka.serializers.subject.{n}" for n in
                           ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"))


def _t(name: str, type_: str, default: Any, doc: str, valid: Validator | None = None) -> ConfigDef:
    return _b(name, type_, default, doc, valid, dynamic=True)


_TOPIC_DEFS: list[ConfigDef] = [
    _t("cleanup.policy", "list", "delete", "delete (time/size retention), compact (keep last value per key), or both.",
       ValidList(CLEANUP_POLICIES)),
    _t("compression.type", "string", "producer", "Final compression of the topic's data; 'producer' keeps the producer's.",
       ValidString(COMPRESSION_TYPES)),
    _t("compression.gzip.level", "int", -1, "Gzip level used when compression.type is gzip.", GZIP_LEVEL),
    _t("compression.lz4.level", "int", 9, "LZ4 level used when compression.type is lz4.", LZ4_LEVEL),
    _t("compression.zstd.level", "int", 3, "Zstd level used when compression.type is zstd.", ZSTD_LEVEL),
    _t("delete.retention.ms", "long", _DAY_MS, "How long tombstones are retained on a compacted topic.", at_least(0)),
    _t("file.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", at_least(0)),
    _t("flush.messages", "long", LONG_MAX, "Messages appended before the partition is fsynced.", at_least(1)),
    _t("flush.ms", "long", LONG_MAX, "Max time data may sit unflushed.", at_least(0)),
    _t("index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", at_least(0)),
    _t("max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.",
       at_least(1)),
    _t("max.message.bytes", "int", 1048588, "Largest record batch (after compression) accepted for this topic.",
       at_least(0)),
    _t("message.timestamp.type", "string", "CreateTime", "CreateTime (producer's timestamp) or LogAppendTime.",
       ValidString(TIMESTAMP_TYPES)),
    _t("message.timestamp.before.max.ms", "long", LONG_MAX,
       "How far in the past a CreateTime timestamp may be.", at_least(0)),
    _t("message.timestamp.after.max.ms", "long", LONG_MAX,
       "How far in the future a CreateTime timestamp may be.", at_least(0)),
    _t("min.cleanable.dirty.ratio", "double", 0.5, "Dirty/total ratio that makes the log eligible for cleaning.",
       between(0, 1)),
    _t("min.compaction.lag.ms", "long", 0, "Minimum age before a record may be compacted.", at_least(0)),
    _t("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all write.", at_least(1)),
    _t("preallocate", "boolean", False, "Kafka preallocates whole segment files with it; kbroker accepts and reports it but does not act on it "
       "(kbroker.log.preallocate.ahead reserves blocks ahead of fast-filling segments instead)."),
    _t("retention.bytes", "long", -1, "Maximum partition size before old segments are deleted; -1 is unlimited."),
    _t("retention.ms", "long", _WEEK_MS, "Time to keep a segment before deleting it; -1 keeps forever.",
       at_least(-1)),
    _t("segment.bytes", "int", 1073741824, "Size at which a segment is rolled.", at_least(MIN_SEGMENT_BYTES)),
    _t("segment.index.bytes", "int", 10485760, "Maximum size of a segment's offset index.", at_least(4)),
    _t("segment.jitter.ms", "long", 0, "Random jitter subtracted from segment.ms to spread rolls.", at_least(0)),
    _t("segment.ms", "long", _WEEK_MS, "Time after which a segment is rolled even if not full.", at_least(1)),
    _t("unclean.leader.election.enable", "boolean", False, "Allow an out-of-sync replica to become leader."),
    _t("message.downconversion.enable", "boolean", True,
       "Allow down-conversion for old fetch versions (kbroker serves v2 batches only)."),
    _t("leader.replication.throttled.replicas", "list", "",
       "Replicas whose leader-side replication is throttled: partitionId:brokerId pairs or *.",
       ThrottledReplicasValidator()),
    _t("follower.replication.throttled.replicas", "list", "",
       "Replicas whose follower-side replication is throttled: partitionId:brokerId pairs or *.",
       ThrottledReplicasValidator()),
    # Confluent Server's broker-side schema validation (registry/validation.py).
    _t("confluent.key.schema.validation", "boolean", False,
       "Refuse produced records whose key carries no schema id registered for the key subject."),
    _t("confluent.value.schema.validation", "boolean", False,
       "Refuse produced records whose value carries no schema id registered for the value subject."),
    _t("confluent.key.subject.name.strategy", "string", "io.confluent.kafka.serializers.subject.TopicNameStrategy",
       "Subject of a key schema: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy.",
       ValidString(SUBJECT_STRATEGIES)),
    _t("confluent.value.subject.name.strategy", "string", "io.confluent.kafka.serializers.subject.TopicNameStrategy",
       "Subject of a value schema: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy.",
       ValidString(SUBJECT_STRATEGIES)),
    _t("remote.storage.enable", "boolean", False, "Tiered storage for the topic (not supported by kbroker).",
       MustBeFalse("tiered storage is not supported by kbroker")),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _TOPIC_DEFS}

# Topic config -> broker configs supplying its default, highest precedence first
# (Kafka's ServerTopicConfigSynonyms).
TOPIC_SYNONYMS: dict[str, list[str]] = {}
for _d in _BROKER_DEFS:
    if _d.topic_name:
        TOPIC_SYNONYMS.setdefault(_d.topic_name, []).append(_d.name)
del _d

# Unit multipliers converting a broker synonym's value into the topic config's unit (ms).
_SYNONYM_SCALE = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}
