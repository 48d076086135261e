"""security/quotas.py: Kafka's quota resolution order, Rate measurement and throttle time, validation."""

from __future__ import annotations

import pytest

from security import quotas as q


def _mgr(quotas: dict, samples: int = 11) -> q.ClientQuotaManager:
    data = {q.entity(e): v for e, v in quotas.items()}
    return q.ClientQuotaManager(lambda: data, samples, 1)


P = q.PRODUCER_BYTE_RATE
U, C = "user", "client-id"


@pytest.mark.parametrize(("entities", "want"), [
    # each case: the configured entities (all with producer_byte_rate), and which one applies to (alice, app)
    ([((U, "alice"), (C, "app")), ((U, "alice"),)], (("alice", "app"), 1)),
    ([((U, "alice"), (C, None)), ((U, "alice"),)], (("alice", "app"), 1)),
    ([((U, "alice"),), ((U, None), (C, "app"))], (("alice", ""), 1)),
    ([((U, None), (C, "app")), ((U, None), (C, None))], (("alice", "app"), 1)),
    ([((U, None), (C, None)), ((U, None),)], (("alice", "app"), 1)),
    ([((U, None),), ((C, "app"),)], (("alice", ""), 1)),
    ([((C, "app"),), ((C, None),)], (("", "app"), 1)),
    ([((C, None),), ((U, "bob"),)], (("", "app"), 1)),
])
def test_resolution_follows_kafkas_order(entities, want):
    # The first entity gets quota 1, the second 2: the first must win.
    m = _mgr({entities[0]: {P: 1.0}, entities[1]: {P: 2.0}})
    assert m.resolve(P, "alice", "app") == want


def test_no_matching_quota_is_unlimited():
    m = _mgr({((U, "bob"),): {P: 1.0}})
    assert m.resolve(P, "alice", "app") is None
    assert m.record(P, "alice", "app", 10**9, 0.0) == 0
    assert m.resolve(q.CONSUMER_BYTE_RATE, "bob", "") is None


def test_rate_window_is_at_least_samples_minus_one_windows():
    r = q.Rate(11, 1000)
    r.record(1000, 0.0)
    assert r.window_size(0.0) == 10_000
    assert r.measure(0.0) == 100.0  # 1000 bytes over the 10 s minimum window
    r.record(1000, 15_500.0)  # the first sample is past 11 windows: gone
    assert r.measure(15_500.0) == 100.0


def test_throttle_time_is_kafkas_formula():
    # quota 100 B/s, 11 x 1 s windows: 3000 bytes at once -> rate 300 over 10 s -> (300-100)/100*10 s = 20 s.
    m = _mgr({((C, "app"),): {P: 100.0}})
    assert m.record(P, "u", "app", 3000, 0.0) == 20_000
    # A client within its quota is not throttled.
    m = _mgr({((C, "app"),): {P: 1000.0}})
    assert m.record(P, "u", "app", 3000, 0.0) == 0


def test_default_entities_give_each_client_its_own_rate():
    m = _mgr({((C, None),): {P: 100.0}})
    assert m.record(P, "u", "a", 1000, 0.0) == 0
    assert m.record(P, "u", "b", 1000, 0.0) == 0  # another client id: a rate of its own
    assert m.record(P, "u", "a", 1000, 0.0) > 0


def test_unrecord_and_fetch_cap():
    m = _mgr({((C, "c"),): {q.CONSUMER_BYTE_RATE: 100.0}}, samples=3)
    assert m.max_value_in_window(q.CONSUMER_BYTE_RATE, "u", "c") == 200.0
    assert m.record(q.CONSUMER_BYTE_RATE, "u", "c", 500, 0.0) > 0
    m.unrecord(q.CONSUMER_BYTE_RATE, "u", "c", 500, 0.0)
    assert m.record(q.CONSUMER_BYTE_RATE, "u", "c", 100, 0.0) == 0


def test_a_quota_change_takes_effect():
    data: dict = {q.entity([(C, "app")]): {P: 100.0}}
    m = q.ClientQuotaManager(lambda: data, 11, 1)
    assert m.record(P, "u", "app", 3000, 0.0) > 0
    data = {q.entity([(C, "app")]): {P: 10_000.0}}  # the store replaces its map on every change
    assert m.record(P, "u", "app", 3000, 0.0) == 0


@pytest.mark.parametrize(("pairs", "message"), [
    ([], "Invalid empty client quota entity"),
    ([("user", "a"), ("user", "b")], "Invalid empty client quota entity, duplicate entity entry user"),
    ([("group", "g")], "Unhandled client quota entity type: group"),
    ([("client-id", "")], "Empty client-id not supported"),
])
def test_entity_validation(pairs, message):
    with pytest.raises(q.QuotaError, match=message):
        q.validate_entity(pairs)


def test_value_validation():
    q.validate_value(P, 1024.0)
    q.validate_value("request_percentage", 12.5)
    with pytest.raises(q.QuotaError, match="Configuration producer_byte_rate must be a Long value"):
        q.validate_value(P, 1.5)
    with pytest.raises(q.QuotaError, match="Invalid configuration key bogus"):
        q.validate_value("bogus", 1.0)


def test_encode_decode_round_trip():
    data = {q.entity([(U, "alice"), (C, None)]): {P: 1.0}, q.entity([(C, "x")]): {"request_percentage": 2.5}}
    assert q.decode(q.encode(data)) == data
