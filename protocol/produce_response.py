"""The ProduceResponse (v3-v12) as plain slotted objects, encoded by hand.

Every acks=1/all Produce is answered with one, so its cost is paid per write: with kafka-python's
structs the broker spent about 50 µs per answer building and encoding it (the probe in
docs/benchmarks.md, "The Produce answer without kafka-python"), a quarter of a one-record write on
one node. These classes carry the same attribute names the rest of the broker reads and sets
(``responses[].partition_responses[].error_code``, ``throttle_time_ms``), and ``encode`` writes
Kafka's ProduceResponse.json layout directly: LogStartOffset from v5, RecordErrors and
ErrorMessage from v8, flexible encoding from v9, the CurrentLeader (per partition) and
NodeEndpoints (top level) tagged fields from v10, each written only when set, as Kafka's
generated code and kafka-python write them. A unit test checks the bytes against kafka-python's
encoder for every version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from protocol.encoding import I32 as _I32
from protocol.encoding import put_count as _count
from protocol.encoding import put_string as _string
from protocol.encoding import put_uvarint as _uvarint

_PART_V5 = struct.Struct(">ihqqq")  # index, error code, base offset, log append time, log start offset
_PART_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_LEADER = struct.Struct(">ii")


@dataclass(slots=True)
class ProducePartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)  # (batch index, message)
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None  # KIP-951 (leader id, leader epoch), v10+


@dataclass(slots=True)
class ProduceTopicResult:
    name: str
    partition_responses: list[ProducePartitionResult]


@dataclass(slots=True)
class ProduceResult:
    responses: list[ProduceTopicResult]
    throttle_time_ms: int = 0
    node_endpoints: list[tuple[int, str, int, str | None]] = field(default_factory=list)  # (id, host, port, rack)

    def encode(self, version: int) -> bytes:
        if not 3 <= version <= 12:
            raise ValueError(f"ProduceResponse v{version} is not served")
        flexible = version >= 9
        out = bytearray()
        _count(len(self.responses), flexible, out)
        part_fmt = _PART_V5 if version >= 5 else _PART_V3
        for t in self.responses:
            _string(t.name, flexible, out)
            _count(len(t.partition_responses), flexible, out)
            for p in t.partition_responses:
                if version >= 5:
                    out += part_fmt.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms,
                                         p.log_start_offset)
                else:
                    out += part_fmt.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
                if version >= 8:
                    _count(len(p.record_errors), flexible, out)
                    for batch_index, message in p.record_errors:
                        out += _I32.pack(batch_index)
                        _string(message, flexible, out)
                        if flexible:
                            out.append(0)
                    _string(p.error_message, flexible, out)
                if flexible:
                    if version >= 10 and p.current_leader is not None:
                        out += b"\x01\x00\x09"  # one tagged field: tag 0, 9 bytes
                        out += _LEADER.pack(*p.current_leader)
                        out.append(0)
                    else:
                        out.append(0)
            if flexible:
                out.append(0)
        out += _I32.pack(self.throttle_time_ms)
        if flexible:
            if version >= 10 and self.node_endpoints:
                body = bytearray()
                _count(len(self.node_endpoints), True, body)
                for node, host, port, rack in self.node_endpoints:
                    body += _I32.pack(node)
                    _string(host, True, body)
                    body += _I32.pack(port)
                    _string(rack, True, body)
                    body.append(0)
                out.append(1)  # one tagged field: tag 0
                out.append(0)
                _uvarint(len(body), out)
                out += body
            else:
                out.append(0)
        return bytes(out)
