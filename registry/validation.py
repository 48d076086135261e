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
        # The records of a batch mostly name the same schema: one verdict per distinct id prefix.
        verdicts: dict[tuple[bool, bytes], str | None] = {}
        check_one = self.check_one
        for i, (key, value, headers) in enumerate(records):
            why = None
            for is_key, data, strategy in ((True, key, settings.key_strategy),
                                           (False, value, settings.value_strategy)):
                if not (settings.keys if is_key else settings.values) or data is None:
                    continue
                if headers:
                    why = check_one(topic, data, headers, is_key, strategy)
                else:
                    memo = (is_key, data[:17] if data[:1] == b"\x01" else data[:5])
                    if memo in verdicts:
                        why = verdicts[memo]
                    else:
                        why = verdicts[memo] = check_one(topic, data, headers, is_key, strategy)
                if why is not None:
                    break
            if why is not None:
                errors.append((i, f"Schema validation failed: {why}"))
        return errors


# --- the record walk of a produced batch ------------------------------------------------------------

_PREFIX = 17  # magic byte + 16-byte guid: all of a payload the check looks at


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    raw = shift = 0
    for k in range(10):
        b = data[pos + k]
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + k + 1
        shift += 7
    raise ValueError("varint too long")


def batch_fields(batch: bytes | bytearray | memoryview
                 ) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] | None:
    """(key prefix, value prefix, schema-id headers) of every record of one v2 batch, reading only
    what validation needs (the first 17 bytes of keys and values; headers named
    ``__key_schema_id``/``__value_schema_id``). None when the batch does not decode (the append's
    own validation answers it)."""
    from storage import batch as B
    from storage.record_validation import decompress

    try:
        h = B.parse_header(batch)
        start, end = B.HEADER_SIZE, h.size
        codec = h.attributes & B.COMPRESSION_MASK
        view = memoryview(batch)[start:end]
        data = bytes(view) if codec == 0 else decompress(codec, view, 64 << 20)
        out = []
        append = out.append
        pos = 0
        prefix = _PREFIX
        for _ in range(h.records_count):
            # One-byte varints (the common case) are decoded inline, as storage/record_validation.py does.
            b = data[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, pos = _varint(data, pos)
            stop = pos + size
            pos += 1  # attributes
            b = data[pos]  # timestamp delta: only its extent matters
            if b < 0x80:
                pos += 1
            else:
                _, pos = _varint(data, pos)
            b = data[pos]  # offset delta
            if b < 0x80:
                pos += 1
            else:
                _, pos = _varint(data, pos)
            b = data[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = _varint(data, pos)
            if n >= 0:
                key = data[pos:pos + (n if n < prefix else prefix)]
                pos += n
            else:
                key = None
            b = data[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = _varint(data, pos)
            if n >= 0:
                value = data[pos:pos + (n if n < prefix else prefix)]
                pos += n
            else:
                value = None
            headers: list[tuple[str, bytes | None]] = []
            if data[pos] == 0:
                pos += 1
            else:
                nh, pos = _varint(data, pos)
                for _ in range(nh):
                    kn, pos = _varint(data, pos)
                    hk = data[pos:pos + kn]
                    pos += kn
                    vn, pos = _varint(data, pos)
                    if hk in (b"__key_schema_id", b"__value_schema_id"):
                        headers.append((hk.decode(), data[pos:pos + vn] if vn >= 0 else None))
                    pos += max(vn, 0)
            if pos != stop:
                return None
            append((key, value, headers))
        return out
    except (IndexError, ValueError, B.InvalidBatchError):
        return None
