"""Builds the Prometheus families at scrape time from the broker's live state and the counters
of broker.metrics.stats. Runs on the event loop (the endpoint serves there), so it reads
partition, coordinator and cluster state directly, as every handler does.

State a subsystem does not have yet reads as a single node's values: no cluster means one broker,
every replica in sync and an active controller count of 1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from broker.metrics.names import SPEC
from broker.metrics.stats import LATENCY_BUCKETS_MS, LoopMonitor, RequestStats

_TXN_STATE_NAMES = {
    0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit", 5: "CompleteAbort",
    6: "Dead", 7: "PrepareEpochFence",
}
_CLASSIC_STATES = {
    "PreparingRebalance": "kafka_coordinator_group_groupmetadatamanager_numgroupspreparingrebalance",
    "CompletingRebalance": "kafka_coordinator_group_groupmetadatamanager_numgroupscompletingrebalance",
    "Stable": "kafka_coordinator_group_groupmetadatamanager_numgroupsstable",
    "Empty": "kafka_coordinator_group_groupmetadatamanager_numgroupsempty",
    "Dead": "kafka_coordinator_group_groupmetadatamanager_numgroupsdead",
}


def _gauge(name: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, SPEC[name][1], labels=labels)


def _counter(name: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, SPEC[name][1], labels=labels)


def _with_total(fam: Metric, value: float) -> Metric:
    """The all-topics sample of a per-topic family carries no topic label, as the JMX exporter
    gives Kafka's all-topics meter (so ``sum(...)`` over topics and the total never collide)."""
    fam.samples.append(Sample(fam.name + "_total", {}, value))
    return fam


class BrokerCollector:
    """A prometheus_client collector over one running Broker."""

    def __init__(self, broker: Any, loop_monitor: LoopMonitor) -> None:
        self.broker = broker
        self.loop_monitor = loop_monitor
        self._isr_sizes: dict[tuple[str, int], int] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._generations: dict[str, int] = {}  # group -> generation / group epoch at the last scrape
        self.classic_rebalances = 0
        self.consumer_rebalances = 0
        self.share_rebalances = 0

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families vary with topics and groups

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_metrics()
        yield from self._request_metrics()
        yield from self._partition_metrics()
        yield from self._group_metrics()
        yield from self._txn_metrics()
        yield from self._share_metrics()

    # --- BrokerTopicMetrics --------------------------------------------------------------------

    def _topic_metrics(self) -> Iterator[Metric]:
        stats = self.broker.replica_manager.topic_stats
        fams = {a: _counter(f"kafka_server_brokertopicmetrics_{a}_total", ["topic"])
                for a in ("messagesin", "bytesin", "bytesout")}
        for topic, ts in sorted(stats.topics.items()):
            fams["messagesin"].add_metric([topic], ts.messages_in)
            fams["bytesin"].add_metric([topic], ts.bytes_in)
            fams["bytesout"].add_metric([topic], ts.bytes_out)
        tot = stats.totals()
        yield _with_total(fams["messagesin"], tot.messages_in)
        yield _with_total(fams["bytesin"], tot.bytes_in)
        yield _with_total(fams["bytesout"], tot.bytes_out)

    # --- RequestMetrics, request queue, loop -----------------------------------------------------

    def _request_metrics(self) -> Iterator[Metric]:
        from protocol.api_table import get_spec

        server = self.broker.server
        rs: RequestStats = server.request_stats
        requests = _counter("kafka_network_requestmetrics_requests_total", ["request", "version"])
        errors = _counter("kafka_network_requestmetrics_errors_total", ["request", "error"])
        hist = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                     SPEC["kafka_network_requestmetrics_totaltimems"][1], labels=["request"])
        from protocol.errors import ErrorCode

        for key, st in sorted(rs.apis.items()):
            spec = get_spec(key)
            name = spec.name if spec is not None else str(key)
            for v, n in sorted(st.by_version.items()):
                requests.add_metric([name, str(v)], n)
            for code, n in sorted(st.errors.items()):
                try:
                    ename = ErrorCode(code).name
                except ValueError:
                    ename = str(code)
                errors.add_metric([name, ename], n)
            buckets, acc = [], 0
            for le, n in zip((*LATENCY_BUCKETS_MS, float("inf")), st.buckets, strict=True):
                acc += n
                buckets.append(("+Inf" if le == float("inf") else repr(le), acc))
            hist.add_metric([name], buckets, st.sum_ms)
        yield requests
        yield errors
        yield hist
        conns = list(server.connections)
        q = _gauge("kafka_network_requestchannel_requestqueuesize")
        q.add_metric([], sum(max(0, len(c._frames)) for c in conns))
        yield q
        cc = _gauge("kbroker_connections", ["listener"])
        per_listener: dict[str, int] = {}
        for c in conns:
            sec = c.security
            name = sec.listener.name if sec is not None else "PLAINTEXT"
            per_listener[name] = per_listener.get(name, 0) + 1
        for li in sorted({*per_listener, *(x.name for x in self.broker.config.listeners)}):
            cc.add_metric([li], per_listener.get(li, 0))
        yield cc
        idle = _gauge("kafka_network_socketserver_networkprocessoravgidle_percent")
        idle.add_metric([], self.loop_monitor.idle_fraction)
        yield idle
        lag = _gauge("kbroker_event_loop_lag_seconds")
        lag.add_metric([], self.loop_monitor.lag_s)
        yield lag
        lag_max = _gauge("kbroker_event_loop_lag_max_seconds")
        lag_max.add_metric([], self.loop_monitor.max_lag_s)
        yield lag_max

    # --- logs, replicas, controller ----------------------------------------------------------------

    def _partition_metrics(self) -> Iterator[Metric]:
        b = self.broker
        md = b.metadata
        node = b.node_id
        tp = ["topic", "partition"]
        size, segs = _gauge("kafka_log_log_size", tp), _gauge("kafka_log_log_numlogsegments", tp)
        lso, leo = _gauge("kafka_log_log_logstartoffset", tp), _gauge("kafka_log_log_logendoffset", tp)
        urp_p = _gauge("kafka_cluster_partition_underreplicated", tp)
        cur, old = _gauge("kafka_topic_partition_current_offset", tp), _gauge("kafka_topic_partition_oldest_offset", tp)
        leaders = urp = under_min = at_min = offline = 0
        min_isr_by_topic: dict[str, int] = {}
        hw_by_tp: dict[tuple[str, int], int] = {}
        for (t, p), part in sorted(b.replica_manager.partitions.items()):
            lg = part.log
            labels = [t, str(p)]
            size.add_metric(labels, lg.size_in_bytes())
            segs.add_metric(labels, len(lg.segments))
            lso.add_metric(labels, lg.log_start_offset)
            leo.add_metric(labels, lg.log_end_offset)
            replicas, isr = md.replicas(t, p), md.isr(t, p)
            if node in md.offline_replicas(t, p):
                offline += 1
            if md.leader(t, p) != node:
                continue
            leaders += 1
            hw = part.high_watermark
            hw_by_tp[(t, p)] = hw
            cur.add_metric(labels, hw)
            old.add_metric(labels, lg.log_start_offset)
            under = len(isr) < len(replicas)
            urp += under
            urp_p.add_metric(labels, int(under))
            if t not in min_isr_by_topic:
                info = md.get_topic(t)
                props = b.topic_properties(info.configs if info else {})
                min_isr_by_topic[t] = int(props.get("min.insync.replicas", 1))
            under_min += len(isr) < min_isr_by_topic[t]
            at_min += len(isr) == min_isr_by_topic[t] and len(replicas) > 1
            self._track_isr((t, p), len(isr))
        self._hw_by_tp = hw_by_tp
        yield from (size, segs, lso, leo, urp_p, cur, old)
        for name, value in (("kafka_server_replicamanager_partitioncount", len(b.replica_manager.partitions)),
                            ("kafka_server_replicamanager_leadercount", leaders),
                            ("kafka_server_replicamanager_underreplicatedpartitions", urp),
                            ("kafka_server_replicamanager_underminisrpartitioncount", under_min),
                            ("kafka_server_replicamanager_atminisrpartitioncount", at_min),
                            ("kafka_server_replicamanager_offlinereplicacount", offline)):
            g = _gauge(name)
            g.add_metric([], value)
            yield g
        shrinks = _counter("kafka_server_replicamanager_isrshrinks_total")
        shrinks.add_metric([], self.isr_shrinks)
        expands = _counter("kafka_server_replicamanager_isrexpands_total")
        expands.add_metric([], self.isr_expands)
        yield shrinks
        yield expands
        yield from self._controller_metrics()

    def _track_isr(self, tp: tuple[str, int], n: int) -> None:
        """ISR changes seen between scrapes (the replica manager keeps no event counter yet): a
        shrink and expand between two scrapes are missed, a steady ISR counts nothing."""
        before = self._isr_sizes.get(tp)
        if before is not None and n < before:
            self.isr_shrinks += 1
        elif before is not None and n > before:
            self.isr_expands += 1
        self._isr_sizes[tp] = n

    def _controller_metrics(self) -> Iterator[Metric]:
        b = self.broker
        md = b.metadata
        cluster = b.cluster
        if cluster is None:
            active = 1
        else:
            election = getattr(cluster, "election", None)
            active = int(bool(getattr(election, "is_controller", False)))
        topics = md.topics()
        total_parts = offline_parts = 0
        if active:
            for info in topics.values():
                total_parts += info.num_partitions
                for p in range(info.num_partitions):
                    offline_parts += md.leader(info.name, p) < 0
        for name, value in (("kafka_controller_kafkacontroller_activecontrollercount", active),
                            ("kafka_controller_kafkacontroller_offlinepartitionscount", offline_parts),
                            ("kafka_controller_kafkacontroller_globaltopiccount", len(topics) if active else 0),
                            ("kafka_controller_kafkacontroller_globalpartitioncount", total_parts),
                            ("kafka_brokers", len(md.brokers()))):
            g = _gauge(name)
            g.add_metric([], value)
            yield g
        tps = _gauge("kafka_topic_partitions", ["topic"])
        for name, info in sorted(topics.items()):
            tps.add_metric([name], info.num_partitions)
        yield tps

    # --- group coordinator and consumer lag ------------------------------------------------------

    def _group_metrics(self) -> Iterator[Metric]:
        gc = getattr(self.broker, "group_coordinator", None)
        groups = dict(getattr(gc, "groups", {}) or {})
        classic = dict.fromkeys(_CLASSIC_STATES, 0)
        consumer = dict.fromkeys(("Empty", "Assigning", "Reconciling", "Stable", "Dead"), 0)
        members = _gauge("kafka_consumergroup_members", ["consumergroup"])
        share_members = _gauge("kbroker_share_group_members", ["sharegroup"])
        share_states = {"Empty": 0, "Stable": 0}
        seen: dict[str, int] = {}
        for gid, g in sorted(groups.items()):
            if getattr(g, "group_type", None) == "share":
                share_members.add_metric([gid], len(g.members))
                share_states[g.state_name] = share_states.get(g.state_name, 0) + 1
                self.share_rebalances += max(0, g.group_epoch - self._generations.get(gid, 0))
                seen[gid] = g.group_epoch
                continue
            members.add_metric([gid], len(getattr(g, "members", {}) or {}))
            classic_group = hasattr(g, "generation_id")
            if classic_group:
                state = getattr(g, "state", None)
                name = getattr(state, "value", str(state))
                classic[name] = classic.get(name, 0) + 1
                gen = int(g.generation_id)
            else:
                name = str(getattr(g, "state_name", "Unknown"))
                consumer[name.capitalize()] = consumer.get(name.capitalize(), 0) + 1
                gen = int(getattr(g, "group_epoch", 0))
            # Rebalances: generation (classic) or group epoch (KIP-848) increases since the last
            # scrape; the coordinator keeps no event counter, and a deleted group keeps its count.
            grown = max(0, gen - self._generations.get(gid, 0))
            if classic_group:
                self.classic_rebalances += grown
            else:
                self.consumer_rebalances += grown
            seen[gid] = gen
        self._generations = seen
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        values = [("numgroups", len(groups)), ("numconsumergroups", sum(consumer.values()))]
        values += [(_CLASSIC_STATES[st].removeprefix(prefix), n) for st, n in classic.items() if st in _CLASSIC_STATES]
        values += [(f"numconsumergroups{st.lower()}", consumer.get(st, 0))
                   for st in ("Empty", "Assigning", "Reconciling", "Stable", "Dead")]
        for name, value in values:
            g = _gauge(prefix + name)
            g.add_metric([], value)
            yield g
        rb = _counter("kafka_server_group_coordinator_metrics_groupcompletedrebalance_total")
        rb.add_metric([], self.classic_rebalances)
        yield rb
        crb = _counter("kafka_server_group_coordinator_metrics_consumergrouprebalance_total")
        crb.add_metric([], self.consumer_rebalances)
        yield crb
        yield members
        for suffix, n in (("", sum(share_states.values())), ("empty", share_states["Empty"]),
                          ("stable", share_states["Stable"])):
            sgc = _gauge(f"{prefix}numsharegroups{suffix}")
            sgc.add_metric([], n)
            yield sgc
        srb = _counter("kafka_server_group_coordinator_metrics_sharegrouprebalance_total")
        srb.add_metric([], self.share_rebalances)
        yield srb
        yield share_members
        yield from self._lag_metrics(gc)

    def _lag_metrics(self, gc: Any) -> Iterator[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        offs = _gauge("kafka_consumergroup_current_offset", labels)
        lag = _gauge("kafka_consumergroup_lag", labels)
        committed = getattr(getattr(gc, "offsets", None), "committed", None) or {}
        hw_by_tp = getattr(self, "_hw_by_tp", {})
        noffsets = 0
        for gid, tps in sorted(committed.items()):
            for tp, om in sorted(tps.items(), key=lambda kv: (kv[0][0], kv[0][1])):
                noffsets += 1
                t, p = tp[0], tp[1]
                offs.add_metric([gid, t, str(p)], om.offset)
                hw = hw_by_tp.get((t, p))
                if hw is None:
                    continue  # kafka_exporter reports lag only where it knows the partition's end
                n = max(0, hw - om.offset)
                lag.add_metric([gid, t, str(p)], n)
        no = _gauge("kafka_coordinator_group_groupmetadatamanager_numoffsets")
        no.add_metric([], noffsets)
        yield from (offs, lag, no)

    # --- transaction coordinator -----------------------------------------------------------------

    def _txn_metrics(self) -> Iterator[Metric]:
        tc = getattr(self.broker, "txn_coordinator", None)
        txns = dict(getattr(tc, "txns", {}) or {})
        by_state = dict.fromkeys(("Ongoing", "PrepareCommit", "PrepareAbort"), 0)
        now_ms = time.time() * 1000
        oldest = 0.0
        for md in txns.values():
            name = _TXN_STATE_NAMES.get(int(md.state), str(md.state))
            by_state[name] = by_state.get(name, 0) + 1
            if name == "Ongoing" and md.start_ms >= 0:
                oldest = max(oldest, (now_ms - md.start_ms) / 1000)
        g = _gauge("kbroker_transaction_coordinator_transactions", ["state"])
        for state, n in sorted(by_state.items()):
            g.add_metric([state], n)
        yield g
        exp = _counter("kbroker_transaction_coordinator_expired_transactions_total")
        exp.add_metric([], int(getattr(tc, "timed_out_aborts", 0)))
        yield exp
        age = _gauge("kbroker_transaction_coordinator_oldest_ongoing_transaction_age_seconds")
        age.add_metric([], oldest)
        yield age

    # --- share groups: share-partitions and sessions on this broker ------------------------------

    def _share_metrics(self) -> Iterator[Metric]:
        share = getattr(self.broker, "share", None)
        spm = share.partitions if share is not None else None
        stats = getattr(spm, "stats", None)
        parts = dict(getattr(spm, "partitions", {}) or {})
        acks = _counter("kafka_server_sharegroupmetrics_recordacknowledgements_total", ["acktype"])
        for kind in ("accept", "release", "reject"):
            acks.add_metric([kind.capitalize()], stats.acknowledged[kind] if stats else 0)
        yield acks
        for table, total_name, failed_name in (
                ("fetch_requests", "totalsharefetchrequests", "failedsharefetchrequests"),
                ("ack_requests", "totalshareacknowledgementrequests", "failedshareacknowledgementrequests")):
            rows = getattr(stats, table, {}) if stats else {}
            tot = _counter(f"kafka_server_brokertopicmetrics_{total_name}_total", ["topic"])
            bad = _counter(f"kafka_server_brokertopicmetrics_{failed_name}_total", ["topic"])
            for topic, (n, failed) in sorted(rows.items()):
                tot.add_metric([topic], n)
                bad.add_metric([topic], failed)
            yield _with_total(tot, sum(r[0] for r in rows.values()))
            yield _with_total(bad, sum(r[1] for r in rows.values()))
        lag = _gauge("kbroker_share_group_lag", ["sharegroup", "topic", "partition"])
        by_state: dict[str, int] = {"Available": 0, "Acquired": 0, "Acknowledged": 0, "Archived": 0}
        hw_by_tp = getattr(self, "_hw_by_tp", {})
        for (gid, t, p), msp in sorted(parts.items()):
            sp = msp.sp
            for st, n in sp.state_counts().items():
                by_state[st.name.capitalize()] += n
            hw = hw_by_tp.get((t, p))
            if hw is not None:
                lag.add_metric([gid, t, str(p)], max(0, hw - sp.start_offset))
        yield lag
        n_parts = _gauge("kbroker_share_partitions")
        n_parts.add_metric([], len(parts))
        yield n_parts
        inflight = _gauge("kbroker_share_inflight_records", ["state"])
        for st, n in by_state.items():
            inflight.add_metric([st], n)
        yield inflight
        for name, attr in (("kbroker_share_acquired_records_total", "acquired_records"),
                           ("kbroker_share_redelivered_records_total", "redelivered_records"),
                           ("kbroker_share_lock_expired_records_total", "lock_expired_records"),
                           ("kbroker_share_state_write_failures_total", "write_failures")):
            c = _counter(name)
            c.add_metric([], getattr(stats, attr, 0) if stats else 0)
            yield c
        sessions = _gauge("kbroker_share_sessions")
        sessions.add_metric([], len(share.sessions) if share is not None else 0)
        yield sessions
