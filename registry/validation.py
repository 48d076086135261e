"""Broker-side schema validation (Confluent Server's ``confluent.value.schema.validation`` and
``confluent.key.schema.validation`` topic configs): every non-null key/value of a produced batch
must carry a schema id registered (live) for its subject, or the whole batch is refused with
INVALID_RECORD and one ``record_errors`` entry per bad record.

Where the id is read (the wire formats of confluent-kafka's serializers):
- a ``__key_schema_id`` / ``__value_schema_id`` header (confluent-kafka's header serializer): the
  header holds magic 0 + 4-byte id or magic 1 + 16-byte guid; the payload is not looked at;
- else the payload's prefix: magic byte 0 + 4-byte big-endian id, or magic byte 1 + 16-byte guid
  (the guid must name a registered schema).
Null keys and values (tombstones) pass, as in Confluent Server.

Subject names: TopicNameStrategy (``<topic>-key``/``<topic>-value``, the default),
RecordNameStrategy (the fully qualified record name of the schema the id names) and
TopicRecordNameStrategy (``<topic>-<record name>``), chosen by ``confluent.key.subject.name.strategy``
/ ``confluent.value.subject.name.strategy``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from registry.state import RegistryState

TOPIC_STRATEGY = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
RECORD_STRATEGY = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
TOPIC_RECORD_STRATEGY = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
STRATEGIES = (TOPIC_STRATEGY, RECORD_STRATEGY, TOPIC_RECORD_STRATEGY)
_SHORT = {s.rsplit(".", 1)[-1]: s for s in STRATEGIES}

KEY_HEADER, VALUE_HEADER = "__key_schema_id", "__value_schema_id"


def strategy_name(value: str | None) -> str:
    """A strategy config value (class name, or its short name) -> the full class name."""
    if not value:
        return TOPIC_STRATEGY
    return _SHORT.get(value, value)


@dataclass(frozen=True, slots=True)
class TopicValidation:
    """What a topic validates: keys and/or values, and the subject strategy of each."""
    keys: bool
    values: bool
    key_strategy: str = TOPIC_STRATEGY
    value_strategy: str = TOPIC_STRATEGY


def read_schema_ref(data: bytes | None) -> tuple[int | None, str | None] | None:
    """(id, None) or (None, guid) from a magic-prefixed payload or header; None when absent."""
    if data is None or len(data) < 5:
        return None
    if data[0] == 0:
        return int.from_bytes(data[1:5], "big"), None
    if data[0] == 1 and len(data) >= 17:
        return None, str(uuid.UUID(bytes=bytes(data[1:17])))
    return None


class RecordChecker:
    """Checks decoded records against one replayed registry state."""

    def __init__(self, state: RegistryState, record_name: callable) -> None:  # type: ignore[valid-type]
        self.state = state
        self.record_name = record_name  # schema id -> fully qualified record name (or None)

    def subject(self, topic: str, strategy: str, is_key: bool, schema_id: int) -> str | None:
        if strategy == TOPIC_STRATEGY:
            return f"{topic}-{'key' if is_key else 'value'}"
        name = self.record_name(schema_id)
        if name is None:
            return None
        return name if strategy == RECORD_STRATEGY else f"{topic}-{name}"

    def check_one(self, topic: str, data: bytes | None, headers: list[tuple[str, bytes | None]],
                  is_key: bool, strategy: str) -> str | None:
        """Why this key or value is refused (None: accepted)."""
        if data is None:
            return None
        what = "key" if is_key else "value"
        header = KEY_HEADER if is_key else VALUE_HEADER
        ref = None
        for name, hv in headers:
            if name == header:
                ref = read_schema_ref(hv)
                if ref is None:
                    return f"the {header} header holds no schema id"
                break
        else:
            ref = read_schema_ref(data)
            if ref is None:
                return f"the {what} has no schema id (magic byte 0 and a 4-byte id, or magic byte 1 and a guid)"
        schema_id, guid = ref
        if guid is not None:
            schema_id = self.state.by_guid.get(guid)
            if schema_id is None:
                return f"the {what}'s schema guid {guid} is not registered"
        subject = self.subject(topic, strategy, is_key, schema_id)  # type: ignore[arg-type]
        if subject is None or not self.state.id_registered_for(subject, schema_id):  # type: ignore[arg-type]
            return f"the {what}'s schema id {schema_id} is not registered for subject {subject!r}"
        return None

    def check(self, topic: str, settings: TopicValidation,
              records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> list[tuple[int, str]]:
        errors = []
        for i, (key, value, headers) in enumerate(records):
            why = None
            if settings.keys:
                why = self.check_one(topic, key, headers, True, settings.key_strategy)
            if why is None and settings.values:
                why = self.check_one(topic, value, headers, False, settings.value_strategy)
            if why is not None:
                errors.append((i, f"Schema validation failed: {why}"))
        return errors
