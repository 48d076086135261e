"""Offset bookkeeping for the kbroker Spark source: pure functions, no Kafka client, no Spark.

Offsets travel through Spark's checkpoint as JSON in the shape Spark's own Kafka source uses,
``{"topic": {"0": 42, "1": 17}}`` (partition numbers as strings because JSON object keys are strings),
so an offsets log written by this source reads like one written by ``format("kafka")``. In option
values ``-2`` means earliest and ``-1`` latest, again as in Spark's Kafka source.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{(t, p): o} -> {"t": {"p": o}} with a stable order (Spark compares offsets as JSON strings)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(off)
    return out


def from_json_dict(obj: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    return {(topic, int(part)): int(off) for topic, parts in obj.items() for part, off in parts.items()}


def parse_offsets_option(value: str | None, default: str) -> str | OffsetMap:
    """``startingOffsets`` / ``endingOffsets``: "earliest", "latest" or a JSON object of offsets."""
    text = (value or default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"offsets option must be 'earliest', 'latest' or JSON, got {text!r}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"offsets JSON must be an object of topic -> {{partition: offset}}, got {text!r}")
    return from_json_dict(obj)


def parse_assign(value: str) -> list[TopicPartition]:
    """``assign`` option: JSON ``{"topicA": [0, 1], "topicB": [2]}``."""
    obj = json.loads(value)
    if not isinstance(obj, dict):
        raise ValueError(f"assign must be a JSON object of topic -> [partitions], got {value!r}")
    return sorted((topic, int(p)) for topic, parts in obj.items() for p in parts)


def resolve(spec: str | OffsetMap, partitions: Iterable[TopicPartition], earliest: Mapping[TopicPartition, int],
            latest: Mapping[TopicPartition, int]) -> OffsetMap:
    """Turn an offsets spec into concrete offsets for ``partitions``.

    Partitions missing from a JSON spec start at earliest (as Spark's Kafka source does for
    partitions it did not know about); -2/-1 inside JSON mean earliest/latest.
    """
    out: OffsetMap = {}
    for tp in partitions:
        if spec == "earliest":
            off = EARLIEST
        elif spec == "latest":
            off = LATEST
        else:
            assert isinstance(spec, dict)
            off = spec.get(tp, EARLIEST)
        if off == EARLIEST:
            off = earliest[tp]
        elif off == LATEST:
            off = latest[tp]
        out[tp] = off
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_offsets: int) -> OffsetMap:
    """Cap the total number of offsets of one micro-batch at ``max_offsets``.

    Like Spark's Kafka source the budget is split across partitions in proportion to their lag, so a
    lagging partition is not starved by a busy one. Rounding remainders go to the partitions with
    the largest lag, so the whole budget is used and every batch makes progress while data exists.
    Every partition of ``latest`` must have its start offset in ``start``.
    """
    if max_offsets <= 0:
        raise ValueError("maxOffsetsPerTrigger must be positive")
    lag = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(latest)
    share = {tp: (n * max_offsets) // total for tp, n in lag.items()}
    left = max_offsets - sum(share.values())
    # Hand out the rounding remainder one offset at a time, largest unmet lag first (stable order).
    for tp in sorted(lag, key=lambda t: (-(lag[t] - share[t]), t)):
        if left == 0:
            break
        if share[tp] < lag[tp]:
            share[tp] += 1
            left -= 1
    return {tp: start[tp] + share[tp] for tp in latest}

