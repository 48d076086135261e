"""The answers of the four per-transaction APIs, as plain slotted objects encoded by hand:
AddPartitionsToTxn (v0-v5), AddOffsetsToTxn (v0-v3), EndTxn (v0-v5) and TxnOffsetCommit (v0-v5).

A transactional producer sends these once per transaction each (consume-transform-produce all
four), so kafka-python's struct objects, built field by field with version checks and then
encoded, were paid on every transaction; the Produce answer's hand encoding (produce_response.py)
showed that cost to be several times what a micro-benchmark of the encoder alone suggests.
Layouts follow Kafka's *Response.json (flexible from v3 for all four; AddPartitionsToTxn v4+
nests the topic results under a result per transactional id and has a top-level error code;
EndTxn v5 carries the producer id and epoch, KIP-890 part 2). Field names follow kafka-python's
(``error_code``), so the request statistics and the request log's summary read them as before.
A unit test checks the bytes against kafka-python's encoder for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.encoding import I32, put_count, put_string

_ERR = struct.Struct(">ih")  # throttle time, error code
_PART = struct.Struct(">ih")  # partition index, error code
_PID_EPOCH = struct.Struct(">qh")


@dataclass(slots=True)
class PartitionError:
    partition_index: int
    error_code: int


@dataclass(slots=True)
class TopicErrors:
    name: str
    partitions: list[PartitionError]


def topic_errors(codes: Iterable[tuple[tuple[str, int], int]]) -> list[TopicErrors]:
    """((topic, partition), code) pairs grouped by topic, topics and partitions in first-seen order."""
    by_topic: dict[str, list[PartitionError]] = {}
    for (topic, p), code in codes:
        by_topic.setdefault(topic, []).append(PartitionError(p, code))
    return [TopicErrors(t, ps) for t, ps in by_topic.items()]


def _put_topics(topics: list[TopicErrors], flexible: bool, out: bytearray) -> None:
    put_count(len(topics), flexible, out)
    for t in topics:
        put_string(t.name, flexible, out)
        put_count(len(t.partitions), flexible, out)
        for p in t.partitions:
            out += _PART.pack(p.partition_index, p.error_code)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)


def _check(name: str, version: int, top: int) -> None:
    if not 0 <= version <= top:
        raise ValueError(f"{name} v{version} is not served")


@dataclass(slots=True)
class AddOffsetsToTxnResult:
    error_code: int
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        _check("AddOffsetsToTxnResponse", version, 3)
        body = _ERR.pack(self.throttle_time_ms, self.error_code)
        return body + b"\0" if version >= 3 else body


@dataclass(slots=True)
class EndTxnResult:
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        _check("EndTxnResponse", version, 5)
        out = bytearray(_ERR.pack(self.throttle_time_ms, self.error_code))
        if version >= 5:
            out += _PID_EPOCH.pack(self.producer_id, self.producer_epoch)
        if version >= 3:
            out.append(0)
        return bytes(out)


@dataclass(slots=True)
class TxnOffsetCommitResult:
    topics: list[TopicErrors]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        _check("TxnOffsetCommitResponse", version, 5)
        flexible = version >= 3
        out = bytearray(I32.pack(self.throttle_time_ms))
        _put_topics(self.topics, flexible, out)
        if flexible:
            out.append(0)
        return bytes(out)


@dataclass(slots=True)
class TransactionResult:
    """AddPartitionsToTxn v4+: one transactional id's topic results."""

    transactional_id: str
    topic_results: list[TopicErrors]


@dataclass(slots=True)
class AddPartitionsToTxnResult:
    """v0-v3: ``results_by_topic_v3_and_below``; v4+: ``error_code`` and ``results_by_transaction``."""

    results_by_topic_v3_and_below: list[TopicErrors] = field(default_factory=list)
    results_by_transaction: list[TransactionResult] = field(default_factory=list)
    error_code: int = 0
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        _check("AddPartitionsToTxnResponse", version, 5)
        flexible = version >= 3
        out = bytearray(I32.pack(self.throttle_time_ms))
        if version >= 4:
            out += self.error_code.to_bytes(2, "big", signed=True)
            put_count(len(self.results_by_transaction), flexible, out)
            for r in self.results_by_transaction:
                put_string(r.transactional_id, flexible, out)
                _put_topics(r.topic_results, flexible, out)
                out.append(0)
        else:
            _put_topics(self.results_by_topic_v3_and_below, flexible, out)
        if flexible:
            out.append(0)
        return bytes(out)
