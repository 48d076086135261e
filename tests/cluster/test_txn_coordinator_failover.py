"""Issue 15, acceptance 2: the transaction coordinator's broker dies mid-commit; the new one finishes it.

Three real brokers on a real etcd. Only broker 3 runs with the fault-injection point
``KBROKERTEST_CRASH_POINT=txn.after_prepare_commit``: it SIGKILLs itself right after a PrepareCommit
is written AND replicated to the ISR of its ``__transaction_state`` partition, before any marker.
The transactional id is chosen so that its coordinator partition is led by broker 3, and the
records go to partitions of an RF=3 topic led by brokers 1 and 2 (so the markers have to travel to
other brokers). A stock confluent-kafka transactional producer writes and commits; its EndTxn is
never answered by broker 3; the controller elects a new leader of the coordinator partition, which
loads it, finds the PrepareCommit and writes the markers with its own coordinator epoch; the
producer's retried EndTxn succeeds there. A read_committed consumer then sees every record of the
transaction exactly once, and the new coordinator's log says it resumed the PrepareCommit.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer

from tests.helpers.cluster_state import WAIT_S, view, wait_until
from tests.helpers.coord_cluster import (
    KEY_TXN,
    TXN_TOPIC,
    coord_cluster,
    data_topic,
    ensure_internal_topic,
    id_led_by,
    read_all,
    wait_coordinator,
)
from tests.helpers.etcd_proc import EtcdProcess

CRASHING = 3
TOPIC = "txn-failover"
PARTITIONS = 6
RECORDS = 300
COMMIT_TIMEOUT_S = 120.0  # the lease expiry, election, load and markers, on a slow shared machine


def test_coordinator_killed_after_prepare_commit_new_one_completes(etcd: EtcdProcess, tmp_path: Path) -> None:
    env = {CRASHING: {"KBROKERTEST_CRASH_POINT": "txn.after_prepare_commit"}}
    with coord_cluster(etcd, tmp_path, env=env) as cluster:
        ensure_internal_topic(cluster, TXN_TOPIC)
        tid, txn_partition = id_led_by(cluster, TXN_TOPIC, CRASHING, "failover-tid")
        assert wait_coordinator(cluster, tid, KEY_TXN) == CRASHING
        views = data_topic(cluster, TOPIC, PARTITIONS)
        targets = sorted(p for p, v in views.items() if v.leader != CRASHING)
        assert targets, f"every partition of {TOPIC} is led by the crashing broker: {views}"

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "acks": "all",
                             "enable.idempotence": True, "transaction.timeout.ms": 120_000,
                             "message.timeout.ms": 120_000})
        errors: list[str] = []
        producer.init_transactions(60)
        producer.begin_transaction()
        sent: dict[int, list[bytes]] = {p: [] for p in targets}
        for i in range(RECORDS):
            p = targets[i % len(targets)]
            value = f"v{i}".encode()
            sent[p].append(value)
            producer.produce(TOPIC, value=value, partition=p,
                             on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        assert producer.flush(60) == 0
        assert not errors, errors

        start = time.monotonic()
        # Broker 3 writes PrepareCommit, waits for the ISR, then dies without answering; librdkafka
        # retries the EndTxn against the new coordinator, which answers once the commit is complete.
        producer.commit_transaction(COMMIT_TIMEOUT_S)
        commit_s = time.monotonic() - start

        crashed = cluster.brokers[CRASHING]
        wait_until(lambda: not crashed.running, "broker 3 to have killed itself", 30)
        assert crashed.proc is not None and crashed.proc.returncode == -9
        assert "fault injection: crashing at txn.after_prepare_commit" in crashed.log_text()

        new_node = wait_coordinator(cluster, tid, KEY_TXN, not_node=CRASHING)
        info = wait_until(lambda: (i := view(cluster, TXN_TOPIC)[txn_partition]).leader == new_node and i,
                          f"{TXN_TOPIC}-{txn_partition} led by the new coordinator, node {new_node}")
        assert CRASHING not in info.isr
        resumed = f"resuming PrepareCommit of transaction {tid} "
        wait_until(lambda: resumed in cluster.brokers[new_node].log_text(),
                   f"node {new_node}'s log to show it resumed {tid}'s PrepareCommit", WAIT_S)
        assert resumed not in crashed.log_text()
        loaded = f"transaction coordinator: loaded {TXN_TOPIC}-{txn_partition} at coordinator epoch"
        assert loaded in cluster.brokers[new_node].log_text()

        got = read_all(cluster.bootstrap, TOPIC, targets, RECORDS)
        for p in targets:
            values = [v for _, v in got[p]]
            assert values == sent[p], f"partition {p}: read {len(values)} records, sent {len(sent[p])}"
        producer.flush(10)
        print(f"\ncommit across the coordinator's crash took {commit_s:.2f} s; node {new_node} completed it; "
              f"{RECORDS} records on partitions {targets} read once each with read_committed")
