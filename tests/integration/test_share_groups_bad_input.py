"""Bad share-group input (issue 27, acceptance 7), as raw requests: an unknown member, a stale
share session epoch, acknowledgements of offsets never acquired or acquired by another member,
malformed acknowledgement batches, groups of the wrong type. Each gets Kafka's error code and a
log line, and no record changes state: afterwards the member that holds the records acknowledges
them all and the share-partition start offset moves to the end."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import JoinGroupRequest, OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from protocol import share_group_api as S
from protocol.consumer_group_api import ConsumerGroupHeartbeatRequest
from protocol.errors import ErrorCode as E
from tests.helpers.share_clients import SHARE_OVERRIDES, produce_values, set_group_configs
from tests.helpers.waiting import wait_for
from tests.helpers.wire import RawConnection

A, B = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
F = S.ShareFetchRequest
FT = F.FetchTopic
FP = FT.FetchPartition
AB = FP.AcknowledgementBatch


def share_fetch(c: RawConnection, member: str, epoch: int, tid, acks=(), max_records: int = 100):
    batches = [AB(version=1, first_offset=f, last_offset=la, acknowledge_types=list(t)) for f, la, t in acks]
    return c.request(F(version=1, group_id="sg", member_id=member, share_session_epoch=epoch, max_wait_ms=0,
                       min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records, topics=[
                           FT(version=1, topic_id=tid, partitions=[FP(version=1, partition_index=0,
                                                                      acknowledgement_batches=batches)])],
                       forgotten_topics_data=[]), 1)


def ack_codes(resp) -> list[int]:
    return [p.acknowledge_error_code for t in resp.responses for p in t.partitions]


def heartbeat(c: RawConnection, group: str, member: str, epoch: int, topics=None):
    return c.request(S.ShareGroupHeartbeatRequest(version=1, group_id=group, member_id=member, member_epoch=epoch,
                                                  rack_id=None, subscribed_topic_names=topics), 1)


def test_bad_input_gets_kafka_errors_and_changes_nothing(broker_factory) -> None:
    b = broker_factory(SHARE_OVERRIDES)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("t", num_partitions=1)])["t"].result(30)
    set_group_configs(b.bootstrap, "sg", {"share.auto.offset.reset": "earliest"})
    produce_values(b.bootstrap, "t", range(10), 1)
    with RawConnection(b.bootstrap) as ca, RawConnection(b.bootstrap) as cb:
        md = ca.request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False), 12)
        tid = next(t.topic_id for t in md.topics if t.name == "t")
        assert ca.request(FindCoordinatorRequest(version=3, key="sg", key_type=0), 3).error_code == E.NONE
        # Member A joins; its share-partition is initialized in the background, then assigned.
        r = heartbeat(ca, "sg", A, 0, ["t"])
        assert r.error_code == E.NONE
        epoch = r.member_epoch

        def assigned() -> bool:
            nonlocal epoch
            r = heartbeat(ca, "sg", A, epoch)
            epoch = r.member_epoch
            return bool(r.assignment and r.assignment.topic_partitions)

        wait_for(assigned, "member A's assignment", timeout=30, interval=0.3)
        # Unknown member / no share session.
        assert heartbeat(cb, "sg", B, 3).error_code == E.UNKNOWN_MEMBER_ID
        assert share_fetch(cb, B, 4, tid).error_code == E.SHARE_SESSION_NOT_FOUND
        ack = cb.request(S.ShareAcknowledgeRequest(version=1, group_id="sg", member_id=B, share_session_epoch=2,
                                                   topics=[]), 1)
        assert ack.error_code == E.SHARE_SESSION_NOT_FOUND
        # A acquires the ten records.
        resp = share_fetch(ca, A, 0, tid)
        acquired = [(a.first_offset, a.last_offset, a.delivery_count) for t in resp.responses for p in t.partitions
                    for a in p.acquired_records]
        assert acquired == [(0, 9, 1)] and resp.acquisition_lock_timeout_ms == 15000
        # Stale or skipped session epochs; acknowledgements in an opening request.
        assert share_fetch(ca, A, 5, tid).error_code == E.INVALID_SHARE_SESSION_EPOCH
        assert share_fetch(ca, A, 0, tid, acks=[(0, 0, [1])]).error_code == E.INVALID_REQUEST
        assert share_fetch(ca, A, 1, tid, max_records=0).error_code == E.NONE  # the session goes on at epoch 1
        # B has a session of its own, but none of A's records.
        assert share_fetch(cb, B, 0, tid).error_code == E.NONE
        assert ack_codes(share_fetch(cb, B, 1, tid, acks=[(0, 4, [1])], max_records=0)) == [E.INVALID_RECORD_STATE]
        assert ack_codes(share_fetch(cb, B, 2, tid, acks=[(20, 25, [1])], max_records=0)) == [E.INVALID_REQUEST]
        # Malformed batches from A itself: first > last, overlapping, unknown type, wrong type count.
        K = S.ShareAcknowledgeRequest.AcknowledgeTopic
        KP = K.AcknowledgePartition
        session_epoch = 2
        for bad in ([(5, 2, [1])], [(0, 4, [1]), (3, 6, [1])], [(0, 1, [7])], [(0, 3, [1, 1])]):
            r = ca.request(S.ShareAcknowledgeRequest(version=1, group_id="sg", member_id=A,
                                                     share_session_epoch=session_epoch, topics=[
                K(version=1, topic_id=tid, partitions=[KP(version=1, partition_index=0, acknowledgement_batches=[
                    KP.AcknowledgementBatch(version=1, first_offset=f, last_offset=la, acknowledge_types=t)
                    for f, la, t in bad])])]), 1)
            assert r.error_code == E.NONE
            assert [p.error_code for t in r.responses for p in t.partitions] == [E.INVALID_REQUEST], bad
            session_epoch += 1  # the session moves on with each request
        r = ca.request(S.ShareAcknowledgeRequest(version=1, group_id="sg", member_id=A, share_session_epoch=99,
                                                 topics=[]), 1)
        assert r.error_code == E.INVALID_SHARE_SESSION_EPOCH
        # Groups of the wrong type.
        assert ca.request(FindCoordinatorRequest(version=3, key="cg", key_type=0), 3).error_code == E.NONE
        cg = ca.request(ConsumerGroupHeartbeatRequest(version=1, group_id="cg", member_id=B, member_epoch=0,
                                                      instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                                                      subscribed_topic_names=["t"], subscribed_topic_regex=None,
                                                      server_assignor=None, topic_partitions=[]), 1)
        assert cg.error_code == E.NONE
        r = heartbeat(cb, "cg", B, 0, ["t"])
        assert (r.error_code, r.error_message) == (E.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
        cg = ca.request(ConsumerGroupHeartbeatRequest(version=1, group_id="sg", member_id=B, member_epoch=0,
                                                      instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                                                      subscribed_topic_names=["t"], subscribed_topic_regex=None,
                                                      server_assignor=None, topic_partitions=[]), 1)
        assert cg.error_code == E.GROUP_ID_NOT_FOUND
        join = ca.request(JoinGroupRequest(version=5, group_id="sg", session_timeout_ms=10000,
                                           rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
                                           protocol_type="consumer", protocols=[
                                               JoinGroupRequest.JoinGroupRequestProtocol(version=5, name="range",
                                                                                         metadata=b"")]), 5)
        assert join.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        commit = ca.request(OffsetCommitRequest(version=8, group_id="sg", generation_id_or_member_epoch=-1,
                                                member_id="", group_instance_id=None, topics=[T(
                                                    version=8, name="t", partitions=[T.OffsetCommitRequestPartition(
                                                        version=8, partition_index=0, committed_offset=3,
                                                        committed_leader_epoch=-1, committed_metadata="")])]), 8)
        assert commit.topics[0].partitions[0].error_code == E.GROUP_ID_NOT_FOUND
        # Nothing changed: A still holds all ten and acknowledges them; B never got any.
        ok = share_fetch(ca, A, session_epoch, tid, acks=[(0, 9, [1])], max_records=0)
        assert ok.error_code == E.NONE and ack_codes(ok) == [E.NONE]
    assert "acknowledgement of t-0 refused (INVALID_RECORD_STATE" in b.log_text()
    assert "acknowledgement of t-0: First offset 5 is greater than last offset 2" in b.log_text()
    assert "ShareFetch epoch 5 refused (INVALID_SHARE_SESSION_EPOCH" in b.log_text()
    assert "refused: UNKNOWN_MEMBER_ID" in b.log_text() and "refused: GROUP_ID_NOT_FOUND" in b.log_text()
    deadline = time.monotonic() + 30
    with RawConnection(b.bootstrap) as c:
        D = S.DescribeShareGroupOffsetsRequest
        while True:
            r = c.request(D(version=0, groups=[D.DescribeShareGroupOffsetsRequestGroup(
                version=0, group_id="sg", topics=None)]), 0)
            starts = [p.start_offset for t in r.groups[0].topics for p in t.partitions]
            if starts == [10] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert starts == [10]
