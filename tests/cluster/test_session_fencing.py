"""The local fencing deadline: a broker cut off from etcd is fenced before etcd can expire its lease.

``fenced()`` turns true at last acknowledged keepalive + TTL - safety margin. These tests cut the
session off (SIGSTOP: etcd keeps its sockets and answers nothing; kill -9: connections refused) and
check that the deadline is computed from the last acknowledgement, never from the moment of the cut,
and that it falls before the lease TTL measured from that acknowledgement. Assertions compare the
recorded times with each other, never with a wall-clock budget.
"""

from __future__ import annotations

import time

import pytest

from cluster.etcd_session import EtcdSession, EtcdUnavailable, default_safety_margin_ms, parse_endpoints
from cluster.membership import Membership
from cluster.records import BrokerRegistration, Endpoint
from tests.cluster.support import wait_until
from tests.helpers.broker_proc import free_port

GAP = 0.3  # seconds between the last acknowledged keepalive and the cut (heartbeats are 0.5 s apart)


async def _cut_off_and_wait_fenced(session, cut) -> tuple[float, float]:
    """Let acks flow, cut etcd off a while after an ack, wait until fenced; returns (cut time, first fenced)."""
    await wait_until(lambda: session.acks >= 3 and not session.fenced(), "keepalives acknowledged")
    # Cut well after an acknowledgement, so a deadline counted from the cut would differ visibly.
    # The window ends before the next keepalive is sent (0.5 s after the last), so none is in flight
    # at the cut and none can be acknowledged after it.
    await wait_until(lambda: GAP <= time.monotonic() - session.last_ack < 0.45,
                     f"a moment {GAP}-0.45 s past the last ack", interval=0.005)
    cut_at = time.monotonic()
    cut()
    early: list[float] = []

    def check() -> bool:
        now = time.monotonic()
        if session.fenced(now):
            return True
        if now > session.deadline:
            early.append(now)  # not fenced although past the deadline: the rule is broken
        return False

    await wait_until(check, "the session to fence itself", interval=0.005)
    first_fenced = time.monotonic()
    assert not early
    return cut_at, first_fenced


async def test_fenced_from_last_ack_before_the_ttl_when_etcd_stops_answering(etcd, sessions):
    session = await sessions(session_timeout_ms=3000, heartbeat_interval_ms=500)
    assert session.ttl_s == 3 and 0 < session.safety_margin_s < session.ttl_s
    cut_at, first_fenced = await _cut_off_and_wait_fenced(session, etcd.pause)
    try:
        last_ack = session.last_ack
        assert last_ack <= cut_at - GAP  # no keepalive was acknowledged after the cut
        assert session.deadline == last_ack + session.ttl_s - session.safety_margin_s
        assert session.deadline < last_ack + session.ttl_s  # fenced before etcd could expire the lease
        assert first_fenced > session.deadline
        # Counted from the last ack, not from the cut: at the cut-based deadline it is already fenced,
        # and just before the ack-based one it was not.
        assert session.fenced(now=cut_at + session.ttl_s - session.safety_margin_s - 0.01)
        assert not session.fenced(now=session.deadline - 0.01) or session.expired
    finally:
        etcd.resume()
    # Once etcd answers again the session either renews its still-live lease (and is unfenced) or
    # learns that etcd expired it (and stays fenced for good); never unfenced on an expired lease.
    await wait_until(lambda: session.expired or not session.fenced(), "the session to settle after the resume")
    if not session.expired:
        info = await session.client.get_lease_info(session.lease_id, keys=False)
        assert info.TTL > 0


async def test_etcd_killed_and_restarted_session_fences_then_recovers_with_its_registration(etcd, sessions, keys):
    session = await sessions(session_timeout_ms=2000, heartbeat_interval_ms=500)
    member = Membership(session, keys)
    reg = await member.register(BrokerRegistration(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)))
    cut_at, _first_fenced = await _cut_off_and_wait_fenced(session, etcd.kill)
    assert session.last_ack <= cut_at - GAP
    assert session.deadline == session.last_ack + session.ttl_s - session.safety_margin_s
    assert not session.expired  # nobody told us the lease is gone: fenced on the local deadline alone

    # etcd restarts from its data dir and renews every lease on election: the session resumes.
    etcd.start()
    await wait_until(lambda: not session.fenced() or session.expired, "keepalives after the etcd restart")
    assert not session.expired
    live = await member.live_brokers()
    assert live[1].epoch == reg.epoch  # the same registration survived the etcd restart


async def test_a_lease_etcd_no_longer_knows_expires_the_session_for_good(sessions):
    session = await sessions()
    other = await sessions()
    await other.client.revoke_lease(session.lease_id)  # as etcd does when the TTL runs out
    await wait_until(lambda: session.expired, "the keepalive to report the lease gone")
    assert session.fenced() and not session.usable


def test_endpoints_parsing_and_default_margin():
    assert parse_endpoints("http://127.0.0.1:2379, 127.0.0.2:2380 ,") == [("127.0.0.1", 2379), ("127.0.0.2", 2380)]
    assert parse_endpoints(["http://h"]) == [("h", 2379)]
    for bad in ("", "ftp://h:2379", "http://:2379"):
        with pytest.raises(ValueError):
            parse_endpoints(bad)
    # Kafka's defaults (9000 / 2000 ms): fenced 7.2 s after the last ack, two missed heartbeats tolerated.
    assert default_safety_margin_ms(9000, 2000) == 1800
    assert default_safety_margin_ms(2000, 200) == 500
    with pytest.raises(ValueError):
        EtcdSession("h:1", session_timeout_ms=1000, heartbeat_interval_ms=1000)


async def test_connects_to_the_first_answering_endpoint_from_broker_settings(etcd):
    dead = f"http://127.0.0.1:{free_port()}"
    session = EtcdSession.from_config({"kbroker.etcd.endpoints": f"{dead},{etcd.endpoints}",
                                       "broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200"})
    await session.open()
    try:
        assert session.endpoint == etcd.endpoints
        assert session.ttl_s == 2 and not session.fenced()
        await wait_until(lambda: session.acks >= 2, "a keepalive through the second endpoint")
    finally:
        await session.close()
    assert session.fenced()
    with pytest.raises(EtcdUnavailable):
        await EtcdSession(dead, request_timeout_ms=300).open()
