"""DescribeCluster (key 60) v0-1 and DescribeLogDirs (key 35) v1-4.

DescribeCluster lists the brokers from the MetadataStore (endpoint type 1 = brokers only;
asking for controllers gets UNSUPPORTED_ENDPOINT_TYPE as from a broker). DescribeLogDirs
reports every log dir with the size of each partition log in it, offset lag 0 (no replicas
catching up) and the file system's total/usable bytes (v4+). DescribeCluster answers the cluster's
authorized operations when asked (broker/authorized_operations.py), Kafka's "not requested"
INT32_MIN otherwise. ACLs (as Kafka): DescribeCluster checks nothing (any principal may ask);
DescribeLogDirs needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED, no log dirs).
"""

from __future__ import annotations

import os
from collections import defaultdict

from kafka.protocol.admin import DescribeClusterResponse, DescribeLogDirsResponse

from broker.authorized_operations import as_bitfield, cluster_authorized_operations
from broker.handlers import AclOperation, RequestContext, api
from protocol.errors import ErrorCode

AUTHORIZED_OPERATIONS_OMITTED = None  # kafka-python "bitfield": encodes as Kafka's INT32_MIN "not requested"


@api(60, 0, 1)
async def handle_describe_cluster(ctx: RequestContext, request) -> DescribeClusterResponse:
    v = ctx.api_version
    md = ctx.metadata
    if v >= 1 and request.endpoint_type not in (1,):
        return DescribeClusterResponse(version=v, throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message="The broker only handles broker endpoints",
                                       endpoint_type=request.endpoint_type, cluster_id=md.cluster_id,
                                       controller_id=-1, brokers=[],
                                       authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    # As AuthHelper.computeDescribeClusterResponse: computed only on success and when asked.
    ops = as_bitfield(cluster_authorized_operations(ctx)) if request.include_cluster_authorized_operations \
        else AUTHORIZED_OPERATIONS_OMITTED
    brokers = [DescribeClusterResponse.DescribeClusterBroker(version=v, broker_id=node, host=host, port=port,
                                                             rack=rack) for node, host, port, rack in ctx.broker_addresses()]
    return DescribeClusterResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1,
                                   cluster_id=md.cluster_id, controller_id=md.controller_id, brokers=brokers,
                                   authorized_operations=ops)


@api(35, 1, 4)
async def handle_describe_log_dirs(ctx: RequestContext, request) -> DescribeLogDirsResponse:
    v = ctx.api_version
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(version=v, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                       results=[])
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    by_dir: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    R = DescribeLogDirsResponse.DescribeLogDirsResult
    T = R.DescribeLogDirsTopic
    P = T.DescribeLogDirsPartition
    for part in ctx.partitions.all():
        if wanted is not None and part.index not in wanted.get(part.topic, ()):
            continue
        log_dir = str(part.log.dir.parent)
        by_dir[log_dir][part.topic].append(P(version=v, partition_index=part.index,
                                             partition_size=part.log.size_in_bytes(), offset_lag=0,
                                             is_future_key=False))
    results = []
    for d in ctx.services.log_dirs:
        st = os.statvfs(d)
        topics = [T(version=v, name=name, partitions=parts) for name, parts in by_dir.get(str(d), {}).items()]
        results.append(R(version=v, error_code=0, log_dir=str(d), topics=topics,
                         total_bytes=st.f_blocks * st.f_frsize, usable_bytes=st.f_bavail * st.f_frsize))
    return DescribeLogDirsResponse(version=v, throttle_time_ms=0, error_code=0, results=results)
