"""Seed requests for the fuzzer: a valid, plausible request for every (api key, version) served.

Requests are built from kafka-python's wire structs (the schema of each api/version, found
through protocol/api_table.py) by a schema-driven filler: every field gets a value chosen from
its name and type, using names that exist on the broker under test (the fuzz topics, a group,
a transactional id, the topic ids read from Metadata), so that seeds pass decoding and the
first checks and reach deep into the handlers. Produce's ``records`` get a real v2 record batch
(tests/fuzz/batches.py).

The filler also offers value-level mutation (`mutate_value`): one field of a freshly filled
request is set to an edge value (boundary integers, empty/long/odd strings, null, empty or long
arrays, random uuids), then the request is encoded normally, so the case decodes and exercises
handler logic rather than the decoder.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField

import protocol.consumer_group_api  # noqa: F401  (registers KIP-848 APIs in the api table)
from protocol.api_table import get_spec
from tests.fuzz import batches


@dataclass
class World:
    """Names that exist on the broker under test, so seeds reach past 'unknown topic' checks."""

    topics: list[str] = field(default_factory=lambda: ["fuzz-a", "fuzz-b"])
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    partitions: int = 2
    group: str = "fuzz-group"
    txn_id: str = "fuzz-txn"
    producer_id: int = -1
    producer_epoch: int = -1

    def topic(self, rng: random.Random) -> str:
        return rng.choice(self.topics)


_INT_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
               "uint16": (0, (1 << 16) - 1), "int32": (-(1 << 31), (1 << 31) - 1),
               "int64": (-(1 << 63), (1 << 63) - 1)}


def _int_value(name: str, type_str: str, w: World, rng: random.Random) -> int:
    """A plausible integer for a field, by name (values real clients send)."""
    n = name.lower()
    if "partition" in n and not any(x in n for x in ("count", "epoch", "max", "size", "limit")):
        return rng.randrange(w.partitions)
    if "producer_id" in n:
        return w.producer_id
    if "producer_epoch" in n:
        return w.producer_epoch
    if "epoch" in n or "generation" in n:
        return -1
    if "timeout" in n:
        return rng.choice([100, 1000, 6000]) if "session" in n or "rebalance" in n else 100
    if "max_wait" in n:
        return rng.choice([0, 10])
    if "min_bytes" in n:
        return rng.choice([0, 1])
    if "max_bytes" in n:
        return 1 << 20
    if n in ("count", "num_partitions"):
        return rng.choice([1, 2, 3])
    if "replication_factor" in n:
        return 1
    if n == "acks":
        return rng.choice([-1, 1])
    if "timestamp" in n:
        return rng.choice([-1, -2, -3, 0])
    if "offset" in n:
        return rng.choice([0, 1, 5])
    if "sequence" in n:
        return 0
    if "isolation" in n:
        return rng.choice([0, 1])
    if n in ("resource_type",):
        return rng.choice([2, 4])  # TOPIC, BROKER
    if "broker_id" in n or n in ("node_id", "replica_id", "leader_id", "coordinator_key_type", "key_type"):
        return rng.choice([-1, 0, 1])
    if "operation" in n or "config_operation" in n:
        return rng.choice([0, 1, 2, 3])
    lo, hi = _INT_RANGES.get(type_str, (0, 1 << 20))
    return max(lo, min(hi, rng.choice([0, 1, 2, 100])))


def _str_value(name: str, w: World, rng: random.Random, path: str) -> str:
    n = name.lower()
    if "topic" in n or ("name" == n and "topic" in path.lower()) or n == "resource_name":
        return w.topic(rng)
    if "group" in n:
        return w.group
    if "transactional" in n:
        return w.txn_id
    if "member_id" in n or "instance_id" in n:
        return ""
    if "protocol_type" in n:
        return "consumer"
    if "protocol" in n or "assignor" in n:
        return "range"
    if "client_software_name" in n:
        return "kbroker-fuzz"
    if "client_software_version" in n:
        return "1.0"
    if "rack" in n:
        return "r1"
    if "regex" in n:
        return "fuzz-.*"
    if "config" in n or ("name" == n and "config" in path.lower()):
        return rng.choice(["retention.ms", "cleanup.policy", "segment.bytes", "log.retention.ms"])
    if "value" in n:
        return rng.choice(["1000", "delete", "compact", "-1"])
    if "state" in n:
        return rng.choice(["Stable", "Empty", "Ongoing"])
    if "feature" in n or (n == "name" and "feature" in path.lower()):
        return "transaction.version"
    if "path" in n or "dir" in n:
        return "/tmp"
    return "fuzz"


def _simple_value(f: SimpleField, w: World, rng: random.Random, path: str, api_key: int, version: int) -> Any:
    t = f._type_str
    if t in _INT_RANGES:
        return _int_value(f.name, t, w, rng)
    if t == "bool":
        if f.name == "validate_only":
            return rng.random() < 0.5
        return rng.random() < 0.3
    if t == "float64":
        return rng.choice([0.0, 1.0])
    if t == "uuid":
        if "topic" in f.name and w.topic_ids:
            return rng.choice(list(w.topic_ids.values()))
        return uuid.UUID(int=0)
    if t == "string":
        return _str_value(f.name, w, rng, path)
    if t == "records":
        return batches.valid_batch(rng)
    if t == "bytes":
        return b"fuzz"
    raise ValueError(f"unknown simple type {t}")


def _fill_struct(struct: StructField, cls: Any, version: int, w: World, rng: random.Random, path: str,
                 api_key: int, depth: int = 0) -> Any:
    values: dict[str, Any] = {}
    for f in struct._fields:
        if not f.for_version_q(version):
            continue
        values[f.name] = _fill_field(f, version, w, rng, f"{path}.{f._name}", api_key, depth)
    return cls(version=version, **values)


def _fill_field(f: Any, version: int, w: World, rng: random.Random, path: str, api_key: int, depth: int) -> Any:
    if isinstance(f, ArrayField):
        inner = f.array_of
        n = 1 if depth < 3 else 0
        if isinstance(inner, StructField):
            return [_fill_struct(inner, inner.data_class, version, w, rng, path, api_key, depth + 1) for _ in range(n)]
        return [_simple_value(inner, w, rng, path, api_key, version) for _ in range(n)]
    if isinstance(f, StructField):
        return _fill_struct(f, f.data_class, version, w, rng, path, api_key, depth + 1)
    return _simple_value(f, w, rng, path, api_key, version)


def build_seed(api_key: int, version: int, w: World, rng: random.Random) -> Any:
    """A filled request object (kafka-python struct) for ``api_key`` at ``version``."""
    spec = get_spec(api_key)
    assert spec is not None, api_key
    cls = spec.request
    return _fill_struct(cls._struct, cls, version, w, rng, spec.name, api_key)


# --- value-level mutation ------------------------------------------------------------------------

_EDGE_INTS = {
    "int8": [0, -1, 1, 127, -128],
    "int16": [0, -1, 1, 32767, -32768, 2, 3],
    "uint16": [0, 1, 65535],
    "int32": [0, -1, 1, 2147483647, -2147483648, 10_000, 1_000_000, 65536],
    "int64": [0, -1, 1, (1 << 63) - 1, -(1 << 63), 1 << 40, -2, -3],
}
_EDGE_STRINGS = ["", ".", "..", "a" * 250, "a" * 300, "x" * 40_000, "é", "日本語", "fuzz\x00nul", "__consumer_offsets",
                 "__transaction_state", "-", "a/b", "fuzz-a", "fuzz-b", "fuzz-group", "fuzz-txn", " "]


def _leaf_paths(obj: Any, version: int, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path to field, field) for every field reachable in ``obj`` (arrays through their elements)."""
    out: list[tuple[tuple, Any]] = []
    struct = obj._struct
    for f in struct._fields:
        if not f.for_version_q(version):
            continue
        out.append((prefix + (f.name,), f))
        val = getattr(obj, f.name, None)
        if isinstance(f, ArrayField) and isinstance(f.array_of, StructField) and val:
            for i, item in enumerate(val[:2]):
                out.extend(_leaf_paths(item, version, prefix + (f.name, i)))
        elif isinstance(f, StructField) and val is not None:
            out.extend(_leaf_paths(val, version, prefix + (f.name,)))
    return out


def _set_path(obj: Any, path: tuple, value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    setattr(obj, path[-1], value)


def _get_path(obj: Any, path: tuple) -> Any:
    for step in path:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    return obj


def mutate_value(req: Any, version: int, w: World, rng: random.Random) -> str:
    """Set one field of ``req`` to an edge value in place; returns a short description."""
    leaves = _leaf_paths(req, version)
    if not leaves:
        return "none"
    path, f = rng.choice(leaves)
    name = ".".join(str(p) for p in path)
    if isinstance(f, ArrayField):
        cur = _get_path(req, path) or []
        choice = rng.randrange(4)
        if choice == 0 and f.nullable_for_version_q(version):
            _set_path(req, path, None)
            return f"{name}=null"
        if choice == 1:
            _set_path(req, path, [])
            return f"{name}=[]"
        if cur:
            # duplicates (same topic/partition twice) and long arrays
            times = rng.choice([2, 3, 50, 500])
            _set_path(req, path, list(cur) * times)
            return f"{name}*{times}"
        _set_path(req, path, [])
        return f"{name}=[]"
    if isinstance(f, StructField):
        return "struct"
    t = f._type_str
    if t in _EDGE_INTS:
        v = rng.choice(_EDGE_INTS[t])
        _set_path(req, path, v)
        return f"{name}={v}"
    if t == "bool":
        v = not _get_path(req, path)
        _set_path(req, path, v)
        return f"{name}={v}"
    if t == "uuid":
        v = rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128)), *w.topic_ids.values()])
        _set_path(req, path, v)
        return f"{name}=uuid"
    if t == "string":
        if f.nullable_for_version_q(version) and rng.random() < 0.2:
            _set_path(req, path, None)
            return f"{name}=null"
        v = rng.choice(_EDGE_STRINGS)
        _set_path(req, path, v)
        return f"{name}='{v[:12]}'"
    if t == "records":
        if rng.random() < 0.2:
            _set_path(req, path, None)
            return f"{name}=null"
        kind, data = batches.random_bad_batch(rng)
        _set_path(req, path, data)
        return f"{name}={kind}"
    if t == "bytes":
        v = rng.choice([b"", b"\x00" * 100, bytes(rng.getrandbits(8) for _ in range(16))])
        _set_path(req, path, v)
        return f"{name}=bytes{len(v)}"
    if t == "float64":
        v = rng.choice([float("nan"), -1.0, 1e308])
        _set_path(req, path, v)
        return f"{name}={v}"
    return "none"
