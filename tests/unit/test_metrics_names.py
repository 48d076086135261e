"""The metric names kbroker serves follow the chosen reference (broker/metrics/names.py): each
Kafka-derived name is what Strimzi's JMX-exporter rules make of its MBean, the consumer-lag names
are kafka_exporter's, and the collector serves exactly the documented families."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

from broker.metrics.collector import BrokerCollector
from broker.metrics.names import KAFKA_EXPORTER, KBROKER, SPEC, STRIMZI, strimzi_name
from broker.metrics.stats import BrokerTopicStats, LoopMonitor, RequestStats

# Names as they appear in Strimzi's dashboards / rules and kafka_exporter (spelled out here, not
# derived, so a change of the derivation cannot hide a renamed metric).
REFERENCE = {
    "kafka_server_brokertopicmetrics_messagesin_total", "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total", "kafka_network_requestmetrics_requests_total",
    "kafka_network_requestmetrics_errors_total", "kafka_network_requestmetrics_totaltimems",
    "kafka_network_requestchannel_requestqueuesize",
    "kafka_network_socketserver_networkprocessoravgidle_percent",
    "kafka_log_log_size", "kafka_log_log_numlogsegments", "kafka_log_log_logstartoffset", "kafka_log_log_logendoffset",
    "kafka_cluster_partition_underreplicated", "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_leadercount", "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_underminisrpartitioncount", "kafka_server_replicamanager_atminisrpartitioncount",
    "kafka_server_replicamanager_offlinereplicacount", "kafka_server_replicamanager_isrshrinks_total",
    "kafka_server_replicamanager_isrexpands_total", "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_controller_kafkacontroller_offlinepartitionscount", "kafka_controller_kafkacontroller_globaltopiccount",
    "kafka_controller_kafkacontroller_globalpartitioncount",
    "kafka_brokers", "kafka_topic_partitions", "kafka_topic_partition_current_offset",
    "kafka_topic_partition_oldest_offset", "kafka_consumergroup_current_offset", "kafka_consumergroup_lag",
    "kafka_consumergroup_members",
    # KIP-932 (share groups): Kafka's ShareGroupMetrics and BrokerTopicMetrics share meters.
    "kafka_server_sharegroupmetrics_recordacknowledgements_total",
    "kafka_server_brokertopicmetrics_totalsharefetchrequests_total",
    "kafka_server_brokertopicmetrics_failedsharefetchrequests_total",
    "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total",
    "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total",
}


def test_strimzi_rule_gives_every_kafka_name() -> None:
    for mbean, name, _type, _help in STRIMZI:
        assert strimzi_name(mbean) == name, mbean


def test_rule_examples() -> None:
    assert strimzi_name("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec") == \
        "kafka_server_brokertopicmetrics_bytesin_total"
    assert strimzi_name("kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent") == \
        "kafka_network_socketserver_networkprocessoravgidle_percent"
    assert strimzi_name("kafka.log:type=Log,name=LogEndOffset") == "kafka_log_log_logendoffset"


def test_reference_names_are_served_and_nothing_else_is_unprefixed() -> None:
    assert REFERENCE <= set(SPEC)
    for name in SPEC:
        assert name in REFERENCE or name.startswith(("kbroker_", "kafka_coordinator_group_", "kafka_server_group_"))
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name)
        if SPEC[name][0] == "counter":
            assert name.endswith("_total")
    assert {n for n, _, _ in KAFKA_EXPORTER} <= REFERENCE
    assert all(n.startswith("kbroker_") for n, _, _ in KBROKER)


class _Empty(dict):
    pass


def _fake_broker() -> SimpleNamespace:
    """The attributes the collector reads, for a broker with no partitions or groups yet."""
    md = SimpleNamespace(topics=dict, brokers=lambda: [object()], get_topic=lambda t: None)
    return SimpleNamespace(
        replica_manager=SimpleNamespace(topic_stats=BrokerTopicStats(), partitions={}),
        server=SimpleNamespace(request_stats=RequestStats(), connections=set()),
        config=SimpleNamespace(listeners=[SimpleNamespace(name="PLAINTEXT")]),
        metadata=md, node_id=1, cluster=None, group_coordinator=None, txn_coordinator=None,
        topic_properties=lambda c: {})


def test_collector_serves_exactly_the_documented_families() -> None:
    served = {m.name + ("_total" if m.type == "counter" else "")
              for m in BrokerCollector(_fake_broker(), LoopMonitor()).collect()}
    assert served == set(SPEC)


def test_request_stats_histogram_and_errors() -> None:
    rs = RequestStats()
    rs.record(3, 12, 0.0004, SimpleNamespace(error_code=0))
    rs.record(3, 12, 0.2, SimpleNamespace(error_code=15))
    st = rs.apis[3]
    assert st.count == 2 and st.by_version == {12: 2} and st.errors == {15: 1}
    assert st.buckets[0] == 1 and sum(st.buckets) == 2


def test_loop_monitor_runs() -> None:
    async def main() -> float:
        mon = LoopMonitor(interval_s=0.01)
        mon.start()
        await asyncio.sleep(0.05)
        await mon.stop()
        return mon.lag_s
    assert asyncio.run(main()) >= 0
