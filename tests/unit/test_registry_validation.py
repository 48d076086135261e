"""Broker-side schema validation, pure parts: the record walk over produced batches (every codec,
headers, malformed input) and the subject strategies."""

from __future__ import annotations

import struct
import uuid

import pytest

from registry import records as R
from registry.state import RegistryState
from registry.validation import (
    RECORD_STRATEGY,
    TOPIC_RECORD_STRATEGY,
    RecordChecker,
    TopicValidation,
    batch_fields,
    strategy_name,
)
from storage import batch as B

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _framed(schema_id: int, n: int = 40) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + b"p" * n


@pytest.mark.parametrize("codec", CODECS)
def test_batch_fields_reads_prefixes_and_schema_headers(codec):
    records = [(b"k" * 300, _framed(7, 1000), [("other", b"x"), ("__value_schema_id", b"\x00\x00\x00\x00\x07")]),
               (None, None, []), (b"", b"", [("__key_schema_id", None)])]
    got = batch_fields(B.build_batch(records, compression=CODECS[codec]))
    assert got == [(b"k" * 17, _framed(7, 1000)[:17], [("__value_schema_id", b"\x00\x00\x00\x00\x07")]),
                   (None, None, []), (b"", b"", [("__key_schema_id", None)])]


def test_batch_fields_gives_up_on_malformed_batches():
    good = bytearray(B.build_batch([(None, b"v" * 50)]))
    assert batch_fields(bytes(good[:40])) is None  # truncated header
    assert batch_fields(bytes(good)) is not None
    good[B.HEADER_SIZE] = 0x7E  # the record's length says 63 bytes: framing broken (the append answers it)
    assert batch_fields(bytes(good)) is None


def _state() -> RegistryState:
    st = RegistryState()
    for subject, version, schema_id in (("t-value", 1, 1), ("shop.Order", 1, 2), ("t-shop.Order", 1, 2)):
        st.apply(R.schema_key(subject, version), R.encode_schema(R.SchemaValue(subject, version, schema_id, '"x"')))
    return st


def test_strategies_and_wire_formats():
    st = _state()
    names = {1: None, 2: "shop.Order"}
    checker = RecordChecker(st, names.get)
    topic_only = TopicValidation(False, True)
    assert checker.check("t", topic_only, [(None, _framed(1), []), (None, _framed(2), []), (None, None, [])]) == [
        (1, "Schema validation failed: the value's schema id 2 is not registered for subject 't-value'")]
    record = TopicValidation(False, True, value_strategy=RECORD_STRATEGY)
    assert checker.check("t", record, [(None, _framed(2), [])]) == []
    assert checker.check("t", record, [(None, _framed(1), [])])  # id 1 names no record
    topic_record = TopicValidation(False, True, value_strategy=TOPIC_RECORD_STRATEGY)
    assert checker.check("t", topic_record, [(None, _framed(2), [])]) == []
    assert checker.check("u", topic_record, [(None, _framed(2), [])])  # no u-shop.Order subject
    guid = st.schemas[1].guid
    assert checker.check("t", topic_only, [(None, b"\x01" + uuid.UUID(guid).bytes, [])]) == []
    assert checker.check("t", topic_only, [(None, b"raw", [("__value_schema_id", _framed(1)[:5])])]) == []
    assert checker.check("t", topic_only, [(None, b"raw", [("__value_schema_id", b"junk")])])
    assert strategy_name("RecordNameStrategy") == RECORD_STRATEGY and strategy_name(None).endswith("TopicNameStrategy")
