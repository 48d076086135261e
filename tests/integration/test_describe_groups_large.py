"""A large DescribeGroups answer must not stall the broker (stop 23's fuzz liveness finding: with
thousands of fuzzed members in a group and requests listing it many times, DescribeGroups took
~80% of the broker's CPU and ApiVersions probes waited up to 2 s). The answer is built and encoded
on an executor thread (broker/handlers.encode_off_loop) and a group listed several times is
described once; Kafka's answer keeps one entry per requested id, in request order."""

from __future__ import annotations

import threading
import time
import uuid

from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest

from tests.helpers.wire import RawConnection, decode_response, encode_request

REPEATS = 200_000


def _stable_group(bootstrap: str, group: str) -> str:
    """A classic group with one member, Stable after its SyncGroup; returns the member id."""
    with RawConnection(bootstrap, timeout=30) as conn:
        deadline = time.monotonic() + 60
        while True:  # __consumer_offsets is created by the first lookup
            r = conn.request(FindCoordinatorRequest(version=3, key=group, key_type=0), 3)
            if r.error_code == 0:
                break
            assert time.monotonic() < deadline, f"no coordinator: {r.error_code}"
            time.sleep(0.1)
        P = JoinGroupRequest.JoinGroupRequestProtocol
        join = JoinGroupRequest(version=5, group_id=group, session_timeout_ms=60_000, rebalance_timeout_ms=60_000,
                                member_id="", group_instance_id=None, protocol_type="consumer",
                                protocols=[P(version=5, name="range", metadata=b"\x00\x01meta")])
        r = conn.request(join, 5)
        assert r.error_code == 79 and r.member_id  # MEMBER_ID_REQUIRED
        join.member_id = r.member_id
        r = conn.request(join, 5)
        assert r.error_code == 0, r
        A = SyncGroupRequest.SyncGroupRequestAssignment
        sync = SyncGroupRequest(version=3, group_id=group, generation_id=r.generation_id, member_id=r.member_id,
                                group_instance_id=None,
                                assignments=[A(version=3, member_id=r.member_id, assignment=b"\x00\x02assigned")])
        assert conn.request(sync, 3).error_code == 0
        return r.member_id


def _ping() -> ApiVersionsRequest:
    return ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1")


def test_repeated_and_unknown_groups_get_one_entry_each_in_order(broker) -> None:
    group = f"dg-{uuid.uuid4().hex[:8]}"
    member = _stable_group(broker.bootstrap, group)
    ids = [group, "no-such-group", group]
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        r = conn.request(DescribeGroupsRequest(version=5, groups=ids, include_authorized_operations=False), 5)
    assert [g.group_id for g in r.groups] == ids
    for g in (r.groups[0], r.groups[2]):
        assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (0, "Stable", "consumer", "range")
        assert [(m.member_id, m.member_metadata, m.member_assignment) for m in g.members] == [
            (member, b"\x00\x01meta", b"\x00\x02assigned")]
    assert (r.groups[1].error_code, r.groups[1].group_state, r.groups[1].members) == (0, "Dead", [])


def test_pings_are_answered_while_a_large_describe_groups_answer_is_built(broker) -> None:
    group = f"dg-{uuid.uuid4().hex[:8]}"
    member = _stable_group(broker.bootstrap, group)
    request = DescribeGroupsRequest(version=5, groups=[group] * REPEATS, include_authorized_operations=True)

    frame = encode_request(request, 5, 1)
    done = threading.Event()
    answer: list[bytes] = []

    def send() -> None:
        # Raw bytes both ways: the window counted below is the broker's work and the transfer only,
        # not this process encoding the request or decoding the answer.
        with RawConnection(broker.bootstrap, timeout=120) as conn:
            conn.send_raw(frame)
            answer.append(conn.read_raw_frame())
        done.set()

    pings = 0
    with RawConnection(broker.bootstrap, timeout=60) as ping:
        ping.request(_ping(), 3)
        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            ping.request(_ping(), 3)
            if not done.is_set():
                pings += 1
        sender.join(120)
    result = [decode_response(request, 5, answer[0])] if answer else []
    assert result, "no DescribeGroups answer"
    groups = result[0].groups
    assert len(groups) == REPEATS
    assert all(g.group_id == group and g.error_code == 0 and g.group_state == "Stable"
               and len(g.members) == 1 and g.members[0].member_id == member for g in groups)
    assert groups[0].authorized_operations == groups[-1].authorized_operations != -2147483648
    print(f"pings answered while the answer was built: {pings}")
    # Built on the loop, the answer holds every other connection until it is written: a ping or two.
    assert pings >= 60, f"only {pings} pings were answered while the answer was built"
