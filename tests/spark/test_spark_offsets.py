"""Unit tests of spark_jobs.offsets: offset specs, JSON shape, admission control arithmetic."""

from __future__ import annotations

import pytest

from spark_jobs import offsets as o


def test_json_round_trip_is_spark_kafka_shape() -> None:
    m = {("b", 1): 7, ("a", 0): 3, ("a", 1): 4}
    j = o.to_json_dict(m)
    assert j == {"a": {"0": 3, "1": 4}, "b": {"1": 7}}
    assert list(j) == ["a", "b"]
    assert o.from_json_dict(j) == m


def test_parse_offsets_option() -> None:
    assert o.parse_offsets_option(None, "earliest") == "earliest"
    assert o.parse_offsets_option(" LATEST ", "earliest") == "latest"
    assert o.parse_offsets_option('{"t": {"0": 5, "1": -2}}', "latest") == {("t", 0): 5, ("t", 1): -2}
    with pytest.raises(ValueError):
        o.parse_offsets_option("soonest", "earliest")
    with pytest.raises(ValueError):
        o.parse_offsets_option("[1, 2]", "earliest")


def test_parse_assign() -> None:
    assert o.parse_assign('{"b": [1], "a": [2, 0]}') == [("a", 0), ("a", 2), ("b", 1)]


def test_resolve_specs() -> None:
    tps = [("t", 0), ("t", 1), ("t", 2)]
    early = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
    late = {("t", 0): 100, ("t", 1): 110, ("t", 2): 105}
    assert o.resolve("earliest", tps, early, late) == early
    assert o.resolve("latest", tps, early, late) == late
    spec = {("t", 0): 42, ("t", 1): o.LATEST}
    # A partition missing from the JSON starts at earliest, like Spark's Kafka source.
    assert o.resolve(spec, tps, early, late) == {("t", 0): 42, ("t", 1): 110, ("t", 2): 5}


def test_rate_limit_all_available_when_under_budget() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 3, ("t", 1): 4}
    assert o.rate_limit(start, latest, 10) == latest


def test_rate_limit_proportional_and_uses_whole_budget() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}  # lags 300 and 100
    end = o.rate_limit(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125}
    end = o.rate_limit(start, latest, 7)
    assert sum(end[tp] - start[tp] for tp in start) == 7
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_rate_limit_makes_progress_with_tiny_budget() -> None:
    start = {("t", p): 0 for p in range(5)}
    latest = {("t", p): 10 for p in range(5)}
    end = o.rate_limit(start, latest, 1)
    assert sum(end.values()) == 1


def test_rate_limit_rejects_non_positive() -> None:
    with pytest.raises(ValueError):
        o.rate_limit({}, {}, 0)
