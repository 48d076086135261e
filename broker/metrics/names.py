"""The metric names kbroker serves, and where each comes from.

Reference followed: the names that the Strimzi project's JMX Prometheus Exporter rules
(strimzi-kafka-operator, packaging/examples/metrics/kafka-metrics.yaml, ``lowercaseOutputName``)
produce from Kafka's MBeans, which Strimzi's Grafana dashboards query: ``kafka.<d><type=T,
name=NPerSec>`` Count becomes ``kafka_<d>_<t>_<n>_total``, a ``name=NPercent`` Value becomes
``kafka_<d>_<t>_<n>_percent`` and any other Value gauge ``kafka_<d>_<t>_<n>``, tags becoming
labels. Two extensions of the same rule: a dotted domain (``kafka.coordinator.group``) keeps its
dots as underscores (Strimzi's ``\\w+`` does not match it), and Kafka 4's group-coordinator-metrics
rebalance meters (group-completed-rebalance, consumer-group-rebalance) are named as PerSec meters
would be (``..._total`` counters: their ``-count`` form fails ``promtool check metrics``). The
request-latency histogram is a native
Prometheus histogram rather than JMX percentiles. Consumer lag uses kafka_exporter's names
(danielqsj/kafka_exporter, also what Strimzi's Kafka Exporter dashboard queries). Names with no
Kafka counterpart start with ``kbroker_``.
"""

from __future__ import annotations

import re

# (Kafka MBean or source, metric name, type, help)
STRIMZI: list[tuple[str, str, str, str]] = [
    ("kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec", "kafka_server_brokertopicmetrics_messagesin_total",
     "counter", "Records appended (per topic; without a topic label: all topics)."),
    ("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec", "kafka_server_brokertopicmetrics_bytesin_total",
     "counter", "Bytes of record batches appended, as stored (per topic; without a topic label: all topics)."),
    ("kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec", "kafka_server_brokertopicmetrics_bytesout_total",
     "counter", "Bytes of record batches sent in fetch responses (per topic; without a topic label: all topics)."),
    ("kafka.network:type=RequestMetrics,name=RequestsPerSec", "kafka_network_requestmetrics_requests_total",
     "counter", "Requests answered, per API and version."),
    ("kafka.network:type=RequestMetrics,name=ErrorsPerSec", "kafka_network_requestmetrics_errors_total",
     "counter", "Non-zero error codes in responses, per API and error (top-level; Produce: per partition)."),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs", "kafka_network_requestmetrics_totaltimems",
     "histogram", "Time from a decoded request to its response, in milliseconds, per API."),
    ("kafka.network:type=RequestChannel,name=RequestQueueSize", "kafka_network_requestchannel_requestqueuesize",
     "gauge", "Requests received and queued behind another on their connection."),
    ("kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
     "kafka_network_socketserver_networkprocessoravgidle_percent",
     "gauge", "Fraction (0-1) of time the event loop thread was idle (not on CPU), over the last few seconds."),
    ("kafka.log:type=Log,name=Size", "kafka_log_log_size", "gauge", "Bytes of the partition's log segments."),
    ("kafka.log:type=Log,name=NumLogSegments", "kafka_log_log_numlogsegments", "gauge", "Segments of the partition's log."),
    ("kafka.log:type=Log,name=LogStartOffset", "kafka_log_log_logstartoffset", "gauge", "The partition's log start offset."),
    ("kafka.log:type=Log,name=LogEndOffset", "kafka_log_log_logendoffset", "gauge", "The partition's log end offset."),
    ("kafka.cluster:type=Partition,name=UnderReplicated", "kafka_cluster_partition_underreplicated",
     "gauge", "1 when the partition (led here) has fewer in-sync replicas than replicas."),
    ("kafka.server:type=ReplicaManager,name=PartitionCount", "kafka_server_replicamanager_partitioncount",
     "gauge", "Partitions with a replica on this broker."),
    ("kafka.server:type=ReplicaManager,name=LeaderCount", "kafka_server_replicamanager_leadercount",
     "gauge", "Partitions this broker leads."),
    ("kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
     "kafka_server_replicamanager_underreplicatedpartitions", "gauge", "Partitions led here with ISR < replicas."),
    ("kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
     "kafka_server_replicamanager_underminisrpartitioncount", "gauge",
     "Partitions led here with ISR < min.insync.replicas."),
    ("kafka.server:type=ReplicaManager,name=AtMinIsrPartitionCount",
     "kafka_server_replicamanager_atminisrpartitioncount", "gauge", "Partitions led here with ISR = min.insync.replicas."),
    ("kafka.server:type=ReplicaManager,name=OfflineReplicaCount", "kafka_server_replicamanager_offlinereplicacount",
     "gauge", "Replicas on this broker marked offline."),
    ("kafka.server:type=ReplicaManager,name=IsrShrinksPerSec", "kafka_server_replicamanager_isrshrinks_total",
     "counter", "ISR shrinks seen on partitions led here."),
    ("kafka.server:type=ReplicaManager,name=IsrExpandsPerSec", "kafka_server_replicamanager_isrexpands_total",
     "counter", "ISR expands seen on partitions led here."),
    ("kafka.controller:type=KafkaController,name=ActiveControllerCount",
     "kafka_controller_kafkacontroller_activecontrollercount", "gauge", "1 on the active controller (a single node: 1)."),
    ("kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
     "kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
     "Partitions without a leader (reported by the active controller)."),
    ("kafka.controller:type=KafkaController,name=GlobalTopicCount", "kafka_controller_kafkacontroller_globaltopiccount",
     "gauge", "Topics in the cluster (reported by the active controller)."),
    ("kafka.controller:type=KafkaController,name=GlobalPartitionCount",
     "kafka_controller_kafkacontroller_globalpartitioncount", "gauge",
     "Partitions in the cluster (reported by the active controller)."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups",
     "kafka_coordinator_group_groupmetadatamanager_numgroups", "gauge", "Groups this coordinator holds."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsPreparingRebalance",
     "kafka_coordinator_group_groupmetadatamanager_numgroupspreparingrebalance", "gauge",
     "Classic groups in PreparingRebalance."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsCompletingRebalance",
     "kafka_coordinator_group_groupmetadatamanager_numgroupscompletingrebalance", "gauge",
     "Classic groups in CompletingRebalance."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsStable",
     "kafka_coordinator_group_groupmetadatamanager_numgroupsstable", "gauge", "Classic groups in Stable."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsEmpty",
     "kafka_coordinator_group_groupmetadatamanager_numgroupsempty", "gauge", "Classic groups in Empty."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsDead",
     "kafka_coordinator_group_groupmetadatamanager_numgroupsdead", "gauge", "Classic groups in Dead."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumOffsets",
     "kafka_coordinator_group_groupmetadatamanager_numoffsets", "gauge", "Committed offsets held."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumConsumerGroups",
     "kafka_coordinator_group_groupmetadatamanager_numconsumergroups", "gauge", "Consumer-protocol (KIP-848) groups."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumConsumerGroupsEmpty",
     "kafka_coordinator_group_groupmetadatamanager_numconsumergroupsempty", "gauge",
     "Consumer-protocol (KIP-848) groups in Empty."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumConsumerGroupsAssigning",
     "kafka_coordinator_group_groupmetadatamanager_numconsumergroupsassigning", "gauge",
     "Consumer-protocol (KIP-848) groups in Assigning."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumConsumerGroupsReconciling",
     "kafka_coordinator_group_groupmetadatamanager_numconsumergroupsreconciling", "gauge",
     "Consumer-protocol (KIP-848) groups in Reconciling."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumConsumerGroupsStable",
     "kafka_coordinator_group_groupmetadatamanager_numconsumergroupsstable", "gauge",
     "Consumer-protocol (KIP-848) groups in Stable."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumConsumerGroupsDead",
     "kafka_coordinator_group_groupmetadatamanager_numconsumergroupsdead", "gauge",
     "Consumer-protocol (KIP-848) groups in Dead."),
    ("kafka.server:type=group-coordinator-metrics,name=GroupCompletedRebalancePerSec",
     "kafka_server_group_coordinator_metrics_groupcompletedrebalance_total", "counter",
     "Classic-group rebalances completed (generation increases seen at scrapes)."),
    ("kafka.server:type=group-coordinator-metrics,name=ConsumerGroupRebalancePerSec",
     "kafka_server_group_coordinator_metrics_consumergrouprebalance_total", "counter",
     "Consumer-protocol group rebalances (group epoch increases seen at scrapes)."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumShareGroups",
     "kafka_coordinator_group_groupmetadatamanager_numsharegroups", "gauge", "Share groups (KIP-932)."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumShareGroupsEmpty",
     "kafka_coordinator_group_groupmetadatamanager_numsharegroupsempty", "gauge", "Share groups in Empty."),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumShareGroupsStable",
     "kafka_coordinator_group_groupmetadatamanager_numsharegroupsstable", "gauge", "Share groups in Stable."),
    ("kafka.server:type=group-coordinator-metrics,name=ShareGroupRebalancePerSec",
     "kafka_server_group_coordinator_metrics_sharegrouprebalance_total", "counter",
     "Share-group rebalances (group epoch increases seen at scrapes)."),
    ("kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec",
     "kafka_server_sharegroupmetrics_recordacknowledgements_total", "counter",
     "Share-group records acknowledged on this broker, per acknowledgement type (acktype: Accept, Release, "
     "Reject)."),
    ("kafka.server:type=BrokerTopicMetrics,name=TotalShareFetchRequestsPerSec",
     "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", "counter",
     "ShareFetch requests, counted once per topic they fetch (per topic; without a topic label: all topics)."),
    ("kafka.server:type=BrokerTopicMetrics,name=FailedShareFetchRequestsPerSec",
     "kafka_server_brokertopicmetrics_failedsharefetchrequests_total", "counter",
     "ShareFetch requests with a partition error, per topic (without a topic label: all topics)."),
    ("kafka.server:type=BrokerTopicMetrics,name=TotalShareAcknowledgementRequestsPerSec",
     "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total", "counter",
     "Requests carrying share acknowledgements (ShareAcknowledge, or ShareFetch with acknowledgements), per topic "
     "(without a topic label: all topics)."),
    ("kafka.server:type=BrokerTopicMetrics,name=FailedShareAcknowledgementRequestsPerSec",
     "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total", "counter",
     "Requests whose share acknowledgements failed on a partition, per topic (without a topic label: all topics)."),
]

KAFKA_EXPORTER: list[tuple[str, str, str]] = [
    ("kafka_brokers", "gauge", "Brokers in the cluster."),
    ("kafka_topic_partitions", "gauge", "Partitions per topic."),
    ("kafka_topic_partition_current_offset", "gauge", "High watermark per partition (led here)."),
    ("kafka_topic_partition_oldest_offset", "gauge", "Log start offset per partition (led here)."),
    ("kafka_consumergroup_current_offset", "gauge", "Committed offset per group and partition."),
    ("kafka_consumergroup_lag", "gauge", "High watermark minus committed offset, per group and partition."),
    ("kafka_consumergroup_members", "gauge", "Members per group."),
]

KBROKER: list[tuple[str, str, str]] = [
    ("kbroker_connections", "gauge", "Open client connections per listener (Kafka's socket-server-metrics "
     "connection-count, renamed: promtool rejects its _count suffix and camelCase label)."),
    ("kbroker_event_loop_lag_seconds", "gauge",
     "How late the event loop ran a 0.5 s timer, last sample (requests wait this long for the loop)."),
    ("kbroker_event_loop_lag_max_seconds", "gauge", "Largest event-loop lag sampled since start."),
    ("kbroker_transaction_coordinator_transactions", "gauge",
     "Transactional ids per transaction state (Ongoing, PrepareCommit, PrepareAbort, ...)."),
    ("kbroker_transaction_coordinator_expired_transactions_total", "counter",
     "Transactions aborted by the coordinator after transaction.timeout.ms."),
    ("kbroker_transaction_coordinator_oldest_ongoing_transaction_age_seconds", "gauge",
     "Age of the oldest Ongoing transaction (0 when none): a hanging transaction keeps rising."),
    ("kbroker_share_group_members", "gauge", "Members per share group (KIP-932) held by this coordinator."),
    ("kbroker_share_group_lag", "gauge",
     "Records not yet delivered-and-done per share group and share-partition led here: high watermark minus the "
     "share-partition start offset (SPSO)."),
    ("kbroker_share_partitions", "gauge", "Share-partitions (group, topic partition) loaded on this broker."),
    ("kbroker_share_inflight_records", "gauge",
     "Records in the share-partitions' in-flight windows (between the start and end offsets), per state."),
    ("kbroker_share_acquired_records_total", "counter", "Records acquired (delivered) to share consumers."),
    ("kbroker_share_redelivered_records_total", "counter",
     "Records acquired again after a release, a lock expiry or a consumer leaving (delivery count > 1)."),
    ("kbroker_share_lock_expired_records_total", "counter",
     "Acquired records whose acquisition lock expired before an acknowledgement."),
    ("kbroker_share_state_write_failures_total", "counter",
     "Share-partition state writes to the share coordinator that failed (the change was rolled back)."),
    ("kbroker_share_sessions", "gauge", "Share sessions in this broker's share-session cache."),
]

SPEC: dict[str, tuple[str, str]] = {n: (t, h) for _, n, t, h in STRIMZI}
SPEC.update({n: (t, h) for n, t, h in KAFKA_EXPORTER})
SPEC.update({n: (t, h) for n, t, h in KBROKER})


def strimzi_name(mbean: str) -> str:
    """The name Strimzi's rules (with the two extensions above) give a Kafka MBean."""
    domain, _, rest = mbean.partition(":")
    tags = dict(kv.split("=", 1) for kv in rest.split(">")[0].split(","))
    dom = domain.removeprefix("kafka.").replace(".", "_")
    if ">" in rest:  # a Kafka-metrics attribute: the JMX exporter's default form
        attr = rest.split(">", 1)[1]
        return re.sub(r"[^a-zA-Z0-9_]", "_", f"kafka_{dom}_{tags['type']}_{attr}").lower()
    name = tags["name"]
    if m := re.fullmatch(r"(.+)PerSec\w*", name):
        out = f"kafka_{dom}_{tags['type']}_{m.group(1)}_total"
    elif m := re.fullmatch(r"(.+)Percent\w*", name):
        out = f"kafka_{dom}_{tags['type']}_{m.group(1)}_percent"
    else:
        out = f"kafka_{dom}_{tags['type']}_{name}"
    # The JMX exporter replaces characters a Prometheus name cannot hold with '_'.
    return re.sub(r"[^a-zA-Z0-9_]", "_", out).lower()
