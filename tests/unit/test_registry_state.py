"""The registry's state machine replays ``_schemas`` records in Confluent's format: versions, soft
and permanent deletes, subject deletes, configs and modes, garbage skipped, ids never lowered."""

from __future__ import annotations

import json

import pytest

from registry import records as R
from registry.state import RegistryState, schema_guid


def _schema(subject: str, version: int, schema_id: int, text: str = '"int"', deleted: bool = False) -> tuple:
    return R.schema_key(subject, version), R.encode_schema(R.SchemaValue(subject, version, schema_id, text,
                                                                         deleted=deleted))


def test_record_format_is_confluents():
    assert json.loads(R.schema_key("s", 3)) == {"keytype": "SCHEMA", "subject": "s", "version": 3, "magic": 1}
    assert json.loads(R.subject_key(R.CONFIG, None)) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(R.noop_key()) == {"keytype": "NOOP", "magic": 0}
    value = json.loads(R.encode_schema(R.SchemaValue("s", 1, 7, "x", "PROTOBUF", [R.Reference("n", "t", 2)])))
    assert value == {"subject": "s", "version": 1, "id": 7, "schemaType": "PROTOBUF",
                     "references": [{"name": "n", "subject": "t", "version": 2}], "schema": "x", "deleted": False}
    # Confluent's guid: UUID of the MD5 over the text and references.
    assert schema_guid('"int"', []) == schema_guid('"int"', [])
    assert schema_guid('"int"', []) != schema_guid('"int"', [R.Reference("n", "t", 1)])


def test_replay_versions_deletes_configs_modes():
    st = RegistryState()
    for key, value in (_schema("a", 1, 1), _schema("a", 2, 2, '"long"'), _schema("b", 1, 1)):
        st.apply(key, value)
    assert st.subjects() == ["a", "b"] and st.max_id == 2
    assert sorted(st.users[1]) == [("a", 1), ("b", 1)]
    st.apply(*_schema("a", 1, 1, deleted=True))  # soft delete of a version
    assert [v.version for v in st.subject_versions("a")] == [2]
    assert not st.id_registered_for("a", 1) and st.id_registered_for("b", 1)
    st.apply(R.schema_key("a", 1), None)  # permanent delete
    assert [v.version for v in st.subject_versions("a", deleted=True)] == [2]
    st.apply(R.subject_key(R.DELETE_SUBJECT, "a"), R.encode_delete_subject("a", 2))
    assert st.subjects() == ["b"] and st.subjects(deleted=True) == ["a", "b"]
    st.apply(R.subject_key(R.CLEAR_SUBJECT, "a"), R.encode_clear_subject("a"))
    assert st.subjects(deleted=True) == ["b"]
    assert 2 not in st.schemas and st.max_id == 2  # the id is gone, the high mark is not
    st.apply(R.subject_key(R.CONFIG, None), R.encode_config("FULL"))
    st.apply(R.subject_key(R.CONFIG, "b"), R.encode_config("NONE"))
    st.apply(R.subject_key(R.MODE, "b"), R.encode_mode("READONLY"))
    assert st.configs == {None: "FULL", "b": "NONE"} and st.modes == {"b": "READONLY"}
    st.apply(R.subject_key(R.CONFIG, "b"), None)
    assert st.configs == {None: "FULL"}
    st.apply(R.noop_key(), None)


@pytest.mark.parametrize("key,value", [
    (b"not json", b"{}"),
    (b'{"keytype": 5}', b"{}"),
    (b'{"keytype": "WHAT", "magic": 0}', b"{}"),
    (R.schema_key("s", 1), b"[]"),
    (R.schema_key("s", 1), b'{"subject": "s"}'),
    (b'{"keytype": "SCHEMA", "subject": "s", "magic": 1}', b"{}"),
])
def test_garbage_records_are_refused_without_changing_state(key, value):
    st = RegistryState()
    st.apply(*_schema("a", 1, 1))
    with pytest.raises(R.BadRecord):
        st.apply(key, value)
    assert st.subjects() == ["a"] and st.max_id == 1
