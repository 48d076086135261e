"""ACLs over every API kbroker serves (issue 17, acceptance 3): an allowed and a denied principal.

The principal is User:ANONYMOUS (PLAINTEXT listener); the broker runs Kafka's standard authorizer
with allow.everyone.if.no.acl.found=false. The ACLs are written to the data dir's kbroker-acls.json
(the metadata store's file) between restarts: "allowed" grants ANONYMOUS ALL on the resources the
requests name, "denied" grants nothing. Each API is sent as a raw request: denied, it answers the
*_AUTHORIZATION_FAILED code Kafka's KafkaApis answers; allowed, no authorization error at all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeTopicPartitionsRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
    UpdateFeaturesRequest,
)
from kafka.protocol.admin.topics import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

from protocol import share_group_api as S
from protocol.consumer_group_api import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from protocol.errors import ErrorCode as E
from storage.batch import build_batch
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.wire import RawConnection

TOPIC, GROUP, TXN, SHARE_GROUP = "acl-t", "acl-g", "acl-tx", "acl-sg"
SOME_ID = uuid.UUID(int=12345)
ANON = "User:ANONYMOUS"
AUTH_ERRORS = {E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED,
               E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


def _acl(rtype: str, name: str, pattern: str = "PREFIXED") -> dict:
    return {"resource_type": rtype, "name": name, "pattern_type": pattern, "principal": ANON, "host": "*",
            "operation": "ALL", "permission": "ALLOW"}


ALLOWED = [_acl("TOPIC", "acl-"), _acl("GROUP", "acl-"), _acl("TRANSACTIONAL_ID", "acl-"),
           _acl("CLUSTER", "kafka-cluster", "LITERAL")]
# Someone else's ACLs only: ANONYMOUS matches none.
DENIED = [{**a, "principal": "User:somebody-else"} for a in ALLOWED]


def _codes(obj: Any) -> set[int]:
    """Every error code in a response (top level and nested)."""
    out: set[int] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k.endswith("error_code") and isinstance(v, int):
                    out.add(v)
                else:
                    walk(v)
        elif isinstance(x, list | tuple):
            for v in x:
                walk(v)

    walk(obj.to_dict())
    return out


def _batch(transactional: bool = False) -> bytes:
    if transactional:
        return build_batch([(None, b"v")], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    return build_batch([(None, b"v")])


def _produce(tid: str | None = None) -> Any:
    P = ProduceRequest.TopicProduceData
    records = _batch(transactional=tid is not None)
    return ProduceRequest(version=9, transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        P(version=9, name=TOPIC, partition_data=[P.PartitionProduceData(version=9, index=0, records=records)])])


def _fetch() -> Any:
    T = FetchRequest.FetchTopic
    return FetchRequest(version=11, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[T(version=11, topic=TOPIC, partitions=[
                            T.FetchPartition(version=11, partition=0, current_leader_epoch=-1, fetch_offset=0,
                                             log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")


def _list_offsets() -> Any:
    T = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(version=7, replica_id=-1, isolation_level=0, topics=[T(version=7, name=TOPIC, partitions=[
        T.ListOffsetsPartition(version=7, partition_index=0, current_leader_epoch=-1, timestamp=-1)])])


def _offset_commit() -> Any:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(version=8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
                               group_instance_id=None, topics=[T(version=8, name=TOPIC, partitions=[
                                   T.OffsetCommitRequestPartition(version=8, partition_index=0, committed_offset=1,
                                                                  committed_leader_epoch=-1,
                                                                  committed_metadata="")])])


def _offset_fetch() -> Any:
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    return OffsetFetchRequest(version=7, group_id=GROUP, require_stable=False,
                              topics=[T(version=7, name=TOPIC, partition_indexes=[0])])


def _join() -> Any:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest(version=5, group_id=GROUP, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                            member_id="", group_instance_id=None, protocol_type="consumer",
                            protocols=[P(version=5, name="range", metadata=b"")])


def _txn_offset_commit() -> Any:
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    return TxnOffsetCommitRequest(version=3, transactional_id=TXN, group_id=GROUP, producer_id=1, producer_epoch=0,
                                  generation_id=-1, member_id="", group_instance_id=None, topics=[
                                      T(version=3, name=TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(
                                          version=3, partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                          committed_metadata="")])])


def _add_partitions_v3() -> Any:
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    return AddPartitionsToTxnRequest(version=3, v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1,
                                     v3_and_below_producer_epoch=0,
                                     v3_and_below_topics=[T(version=3, name=TOPIC, partitions=[0])])


def _add_partitions_v4() -> Any:
    X = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    T = X.AddPartitionsToTxnTopic
    return AddPartitionsToTxnRequest(version=4, transactions=[X(version=4, transactional_id=TXN, producer_id=1,
                                                                producer_epoch=0, verify_only=True,
                                                                topics=[T(version=4, name=TOPIC, partitions=[0])])])


def _markers() -> Any:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    return WriteTxnMarkersRequest(version=1, markers=[M(version=1, producer_id=424242, producer_epoch=0,
                                                        transaction_result=False, coordinator_epoch=0, topics=[
                                                            M.WritableTxnMarkerTopic(version=1, name="acl-none",
                                                                                     partition_indexes=[0])])])


def _configs(cls, rtype: int, name: str, v: int) -> Any:
    if cls is DescribeConfigsRequest:
        R = cls.DescribeConfigsResource
        return cls(version=v, resources=[R(version=v, resource_type=rtype, resource_name=name,
                                           configuration_keys=None)],
                   include_synonyms=False, include_documentation=False)
    if cls is AlterConfigsRequest:
        R = cls.AlterConfigsResource
        return cls(version=v, resources=[R(version=v, resource_type=rtype, resource_name=name, configs=[])],
                   validate_only=True)
    R = cls.AlterConfigsResource
    return cls(version=v, resources=[R(version=v, resource_type=rtype, resource_name=name, configs=[])],
               validate_only=True)


def _acl_filter_fields() -> dict:
    return dict(resource_type_filter=2, resource_name_filter="acl-zzz", pattern_type_filter=3,
                principal_filter="User:nobody", host_filter="*", operation=3, permission_type=3)


# (label, version, request factory, the code a denied principal gets)
MATRIX: list[tuple[str, int, Callable[[], Any], int]] = [
    ("Produce", 9, _produce, E.TOPIC_AUTHORIZATION_FAILED),
    ("Produce transactional", 9, lambda: _produce(TXN), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("Fetch", 11, _fetch, E.TOPIC_AUTHORIZATION_FAILED),
    ("ListOffsets", 7, _list_offsets, E.TOPIC_AUTHORIZATION_FAILED),
    ("Metadata", 12, lambda: MetadataRequest(version=12, topics=[
        MetadataRequest.MetadataRequestTopic(version=12, topic_id=None, name=TOPIC)], allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), E.TOPIC_AUTHORIZATION_FAILED),
    ("OffsetCommit", 8, _offset_commit, E.GROUP_AUTHORIZATION_FAILED),
    ("OffsetFetch", 7, _offset_fetch, E.GROUP_AUTHORIZATION_FAILED),
    ("FindCoordinator group", 3, lambda: FindCoordinatorRequest(version=3, key=GROUP, key_type=0),
     E.GROUP_AUTHORIZATION_FAILED),
    ("FindCoordinator txn", 3, lambda: FindCoordinatorRequest(version=3, key=TXN, key_type=1),
     E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("JoinGroup", 5, _join, E.GROUP_AUTHORIZATION_FAILED),
    ("Heartbeat", 3, lambda: HeartbeatRequest(version=3, group_id=GROUP, generation_id=1, member_id="m",
                                              group_instance_id=None), E.GROUP_AUTHORIZATION_FAILED),
    ("LeaveGroup", 3, lambda: LeaveGroupRequest(version=3, group_id=GROUP, members=[
        LeaveGroupRequest.MemberIdentity(version=3, member_id="m", group_instance_id=None)]),
     E.GROUP_AUTHORIZATION_FAILED),
    ("SyncGroup", 3, lambda: SyncGroupRequest(version=3, group_id=GROUP, generation_id=1, member_id="m",
                                              group_instance_id=None, assignments=[]), E.GROUP_AUTHORIZATION_FAILED),
    ("DescribeGroups", 3, lambda: DescribeGroupsRequest(version=3, groups=[GROUP], include_authorized_operations=False),
     E.GROUP_AUTHORIZATION_FAILED),
    ("OffsetDelete", 0, lambda: OffsetDeleteRequest(version=0, group_id=GROUP, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(version=0, name=TOPIC, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(version=0, partition_index=0)])]),
     E.GROUP_AUTHORIZATION_FAILED),
    ("ConsumerGroupHeartbeat", 0, lambda: ConsumerGroupHeartbeatRequest(
        version=0, group_id=GROUP, member_id="", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=[TOPIC], server_assignor=None, topic_partitions=[]),
     E.GROUP_AUTHORIZATION_FAILED),
    ("ConsumerGroupDescribe", 0, lambda: ConsumerGroupDescribeRequest(version=0, group_ids=[GROUP],
                                                                      include_authorized_operations=False),
     E.GROUP_AUTHORIZATION_FAILED),
    # KIP-932 share groups (a group id of their own: "acl-g" is a consumer group by now).
    ("ShareGroupHeartbeat", 1, lambda: S.ShareGroupHeartbeatRequest(
        version=1, group_id=SHARE_GROUP, member_id="AAAAAAAAAAAAAAAAAAAAAA", member_epoch=0, rack_id=None,
        subscribed_topic_names=[TOPIC]), E.GROUP_AUTHORIZATION_FAILED),
    ("ShareGroupDescribe", 1, lambda: S.ShareGroupDescribeRequest(version=1, group_ids=[SHARE_GROUP],
                                                                  include_authorized_operations=False),
     E.GROUP_AUTHORIZATION_FAILED),
    ("ShareFetch", 1, lambda: S.ShareFetchRequest(
        version=1, group_id=SHARE_GROUP, member_id="AAAAAAAAAAAAAAAAAAAAAA", share_session_epoch=0, max_wait_ms=0,
        min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, topics=[], forgotten_topics_data=[]),
     E.GROUP_AUTHORIZATION_FAILED),
    ("ShareAcknowledge", 1, lambda: S.ShareAcknowledgeRequest(
        version=1, group_id=SHARE_GROUP, member_id="AAAAAAAAAAAAAAAAAAAAAA", share_session_epoch=1, topics=[]),
     E.GROUP_AUTHORIZATION_FAILED),
    ("InitializeShareGroupState", 0, lambda: S.InitializeShareGroupStateRequest(
        version=0, group_id=SHARE_GROUP, topics=[S.InitializeShareGroupStateRequest.InitializeStateData(
            version=0, topic_id=SOME_ID, partitions=[S.InitializeShareGroupStateRequest.InitializeStateData.PartitionData(
                version=0, partition=0, state_epoch=0, start_offset=-1)])]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("ReadShareGroupState", 0, lambda: S.ReadShareGroupStateRequest(
        version=0, group_id=SHARE_GROUP, topics=[S.ReadShareGroupStateRequest.ReadStateData(
            version=0, topic_id=SOME_ID, partitions=[S.ReadShareGroupStateRequest.ReadStateData.PartitionData(
                version=0, partition=0, leader_epoch=0)])]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("WriteShareGroupState", 0, lambda: S.WriteShareGroupStateRequest(
        version=0, group_id=SHARE_GROUP, topics=[S.WriteShareGroupStateRequest.WriteStateData(
            version=0, topic_id=SOME_ID, partitions=[S.WriteShareGroupStateRequest.WriteStateData.PartitionData(
                version=0, partition=0, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=[])])]),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("DeleteShareGroupState", 0, lambda: S.DeleteShareGroupStateRequest(
        version=0, group_id=SHARE_GROUP, topics=[S.DeleteShareGroupStateRequest.DeleteStateData(
            version=0, topic_id=SOME_ID, partitions=[S.DeleteShareGroupStateRequest.DeleteStateData.PartitionData(
                version=0, partition=0)])]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("ReadShareGroupStateSummary", 0, lambda: S.ReadShareGroupStateSummaryRequest(
        version=0, group_id=SHARE_GROUP, topics=[S.ReadShareGroupStateSummaryRequest.ReadStateSummaryData(
            version=0, topic_id=SOME_ID, partitions=[
                S.ReadShareGroupStateSummaryRequest.ReadStateSummaryData.PartitionData(
                    version=0, partition=0, leader_epoch=0)])]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeShareGroupOffsets", 0, lambda: S.DescribeShareGroupOffsetsRequest(version=0, groups=[
        S.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
            version=0, group_id=SHARE_GROUP, topics=None)]), E.GROUP_AUTHORIZATION_FAILED),
    ("AlterShareGroupOffsets", 0, lambda: S.AlterShareGroupOffsetsRequest(version=0, group_id=SHARE_GROUP, topics=[
        S.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(version=0, topic_name=TOPIC, partitions=[
            S.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(
                version=0, partition_index=0, start_offset=0)])]), E.GROUP_AUTHORIZATION_FAILED),
    ("DeleteShareGroupOffsets", 0, lambda: S.DeleteShareGroupOffsetsRequest(version=0, group_id=SHARE_GROUP, topics=[
        S.DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(version=0, topic_name=TOPIC)]),
     E.GROUP_AUTHORIZATION_FAILED),
    ("InitProducerId idempotent", 4, lambda: InitProducerIdRequest(version=4, transactional_id=None,
                                                                   transaction_timeout_ms=60000, producer_id=-1,
                                                                   producer_epoch=-1),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("InitProducerId transactional", 4, lambda: InitProducerIdRequest(version=4, transactional_id=TXN,
                                                                      transaction_timeout_ms=60000, producer_id=-1,
                                                                      producer_epoch=-1),
     E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("AddPartitionsToTxn v3", 3, _add_partitions_v3, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("AddPartitionsToTxn v4", 4, _add_partitions_v4, E.CLUSTER_AUTHORIZATION_FAILED),
    ("AddOffsetsToTxn", 3, lambda: AddOffsetsToTxnRequest(version=3, transactional_id=TXN, producer_id=1,
                                                          producer_epoch=0, group_id=GROUP),
     E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("TxnOffsetCommit", 3, _txn_offset_commit, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("EndTxn", 3, lambda: EndTxnRequest(version=3, transactional_id=TXN, producer_id=1, producer_epoch=0,
                                        committed=False), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("WriteTxnMarkers", 1, _markers, E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeTransactions", 0, lambda: DescribeTransactionsRequest(version=0, transactional_ids=[TXN]),
     E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("DescribeProducers", 0, lambda: DescribeProducersRequest(version=0, topics=[
        DescribeProducersRequest.TopicRequest(version=0, name=TOPIC, partition_indexes=[0])]),
     E.TOPIC_AUTHORIZATION_FAILED),
    ("CreateTopics", 7, lambda: CreateTopicsRequest(version=7, topics=[CreateTopicsRequest.CreatableTopic(
        version=7, name="acl-new", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=30000, validate_only=False), E.TOPIC_AUTHORIZATION_FAILED),
    ("CreatePartitions", 3, lambda: CreatePartitionsRequest(version=3, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(version=3, name="acl-new", count=2, assignments=None)],
        timeout_ms=30000, validate_only=False), E.TOPIC_AUTHORIZATION_FAILED),
    ("DeleteTopics", 6, lambda: DeleteTopicsRequest(version=6, topics=[
        DeleteTopicsRequest.DeleteTopicState(version=6, name="acl-new", topic_id=None)], timeout_ms=30000),
     E.TOPIC_AUTHORIZATION_FAILED),
    ("DeleteRecords", 2, lambda: DeleteRecordsRequest(version=2, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        version=2, name=TOPIC, partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
            version=2, partition_index=0, offset=0)])], timeout_ms=30000), E.TOPIC_AUTHORIZATION_FAILED),
    ("DescribeConfigs topic", 4, lambda: _configs(DescribeConfigsRequest, 2, TOPIC, 4), E.TOPIC_AUTHORIZATION_FAILED),
    ("DescribeConfigs broker", 4, lambda: _configs(DescribeConfigsRequest, 4, "1", 4),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("AlterConfigs topic", 2, lambda: _configs(AlterConfigsRequest, 2, TOPIC, 2), E.TOPIC_AUTHORIZATION_FAILED),
    ("IncrementalAlterConfigs broker", 1, lambda: _configs(IncrementalAlterConfigsRequest, 4, "1", 1),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeLogDirs", 4, lambda: DescribeLogDirsRequest(version=4, topics=None), E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeTopicPartitions", 0, lambda: DescribeTopicPartitionsRequest(version=0, topics=[
        DescribeTopicPartitionsRequest.TopicRequest(version=0, name=TOPIC)], response_partition_limit=100,
        cursor=None), E.TOPIC_AUTHORIZATION_FAILED),
    ("UpdateFeatures", 1, lambda: UpdateFeaturesRequest(version=1, timeout_ms=30000, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(version=1, feature="transaction.version", max_version_level=2,
                                               allow_downgrade=False)], validate_only=True),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeUserScramCredentials", 0, lambda: DescribeUserScramCredentialsRequest(version=0, users=None),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("AlterUserScramCredentials", 0, lambda: AlterUserScramCredentialsRequest(version=0, deletions=[
        AlterUserScramCredentialsRequest.ScramCredentialDeletion(version=0, name="nobody", mechanism=1)],
        upsertions=[]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeAcls", 3, lambda: DescribeAclsRequest(version=3, **_acl_filter_fields()), E.CLUSTER_AUTHORIZATION_FAILED),
    ("CreateAcls", 3, lambda: CreateAclsRequest(version=3, creations=[CreateAclsRequest.AclCreation(
        version=3, resource_type=2, resource_name="acl-zzz", resource_pattern_type=3, principal="User:nobody",
        host="*", operation=3, permission_type=3)]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("DeleteAcls", 3, lambda: DeleteAclsRequest(version=3, filters=[DeleteAclsRequest.DeleteAclsFilter(
        version=3, **_acl_filter_fields())]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("DescribeClientQuotas", 1, lambda: DescribeClientQuotasRequest(version=1, components=[], strict=False),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("AlterClientQuotas", 1, lambda: AlterClientQuotasRequest(version=1, entries=[
        AlterClientQuotasRequest.EntryData(version=1, entity=[AlterClientQuotasRequest.EntryData.EntityData(
            version=1, entity_type="client-id", entity_name="acl-c")], ops=[])], validate_only=True),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("DeleteGroups", 2, lambda: DeleteGroupsRequest(version=2, groups_names=[GROUP]), E.GROUP_AUTHORIZATION_FAILED),
    ("OffsetForLeaderEpoch", 4, lambda: OffsetForLeaderEpochRequest(version=4, replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(version=4, topic=TOPIC, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                version=4, partition=0, current_leader_epoch=-1, leader_epoch=0)])]), E.TOPIC_AUTHORIZATION_FAILED),
    ("ElectLeaders", 2, lambda: ElectLeadersRequest(version=2, election_type=0, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(version=2, topic=TOPIC, partitions=[0])], timeout_ms=10000),
     E.CLUSTER_AUTHORIZATION_FAILED),
    ("AlterPartitionReassignments", 0, lambda: AlterPartitionReassignmentsRequest(version=0, timeout_ms=10000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(version=0, name=TOPIC, partitions=[
            AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                version=0, partition_index=0, replicas=[1])])]), E.CLUSTER_AUTHORIZATION_FAILED),
    ("ListPartitionReassignments", 0, lambda: ListPartitionReassignmentsRequest(version=0, timeout_ms=10000,
                                                                                topics=None),
     E.CLUSTER_AUTHORIZATION_FAILED),
]

# APIs that check nothing (as Kafka) or whose only effect on a denied principal is to hide things.
UNCHECKED = {"ApiVersions", "SaslHandshake", "SaslAuthenticate", "DescribeCluster", "ListGroups",
             "ListTransactions"}


def _write_acls(data_dir, acls: list[dict]) -> None:
    (data_dir / "kbroker-acls.json").write_text(json.dumps({"version": 1, "acls": acls}))


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("acl-matrix")
    _write_acls(data_dir, ALLOWED)
    proc = BrokerProcess(data_dir, overrides={"authorizer.class.name": "standard",
                                              "allow.everyone.if.no.acl.found": "false"})
    proc.start()
    try:
        with RawConnection(proc.bootstrap) as c:
            resp = c.request(CreateTopicsRequest(version=7, topics=[CreateTopicsRequest.CreatableTopic(
                version=7, name=TOPIC, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
                timeout_ms=30000, validate_only=False), 7)
            assert resp.topics[0].error_code == 0
        yield proc
    finally:
        proc.stop()
        proc.kill()


def _run(proc: BrokerProcess, acls: list[dict]) -> dict[str, set[int]]:
    _write_acls(proc.data_dir, acls)
    proc.restart()
    out = {}
    with RawConnection(proc.bootstrap, timeout=30) as c:
        for label, version, make, _ in MATRIX:
            out[label] = _codes(c.request(make(), version))
    return out


def test_every_api_is_covered() -> None:
    from broker.handlers import load_handlers
    from protocol.api_table import get_spec

    covered = {label.split()[0] for label, *_ in MATRIX} | UNCHECKED
    served = {get_spec(key).name for key in load_handlers()}
    assert served - covered == set()


def test_denied_principal_gets_the_authorization_error_of_each_api(acl_broker: BrokerProcess) -> None:
    results = _run(acl_broker, DENIED)
    wrong = {label: sorted(E(c).name for c in results[label]) for label, _, _, want in MATRIX
             if want not in results[label] or results[label] - {want, E.NONE}}
    assert wrong == {}, wrong


def test_allowed_principal_gets_no_authorization_error(acl_broker: BrokerProcess) -> None:
    results = _run(acl_broker, ALLOWED)
    wrong = {label: sorted(E(c).name for c in results[label]) for label, *_ in MATRIX
             if results[label] & AUTH_ERRORS}
    assert wrong == {}, wrong


def test_list_apis_show_only_what_may_be_described(acl_broker: BrokerProcess) -> None:
    group, tid = "acl-list-g", "acl-list-tx"

    def listed() -> tuple[set[str], set[str], set[str]]:
        with RawConnection(acl_broker.bootstrap, timeout=30) as c:
            groups = c.request(ListGroupsRequest(version=4, states_filter=[]), 4).groups
            txns = c.request(ListTransactionsRequest(version=0, state_filters=[], producer_id_filters=[]), 0)
            topics = c.request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False), 12).topics
        return ({g.group_id for g in groups}, {t.transactional_id for t in txns.transaction_states},
                {t.name for t in topics})

    _write_acls(acl_broker.data_dir, ALLOWED)
    acl_broker.restart()
    with RawConnection(acl_broker.bootstrap, timeout=30) as c:
        commit = _offset_commit()
        commit.group_id = group
        assert _codes(c.request(commit, 8)) == {E.NONE}
        init = InitProducerIdRequest(version=4, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1,
                                     producer_epoch=-1)
        assert c.request(init, 4).error_code == E.NONE
    groups, txns, topics = listed()
    assert group in groups and tid in txns and TOPIC in topics

    _write_acls(acl_broker.data_dir, DENIED)
    acl_broker.restart()
    groups, txns, topics = listed()
    assert group not in groups and tid not in txns and TOPIC not in topics
