"""Issue 15, acceptance 5: zombie fencing across brokers.

Three real brokers on a real etcd. A transactional id coordinated by broker C, an RF=3 topic whose
partition the producers write to is led by broker L != C. The older producer (the zombie) begins a
transaction and writes to that partition (acknowledged: the partition knows its producer epoch and
the coordinator has the partition in the transaction); then a newer producer with the same
transactional.id runs init_transactions, which bumps the epoch and aborts the zombie's transaction
(the abort markers go from C to L with the new epoch). Then the zombie:

- ``send``: writes again to the partition already in its transaction, so librdkafka sends no
  AddPartitionsToTxn: the Produce with the old epoch reaches L, which refuses it (the producer
  epoch the abort marker left there; KIP-890 verification with C would refuse it too);
- ``commit``: EndTxn on C with the old epoch;
- ``send_offsets``: send_offsets_to_transaction (AddOffsetsToTxn on C with the old epoch).

Each of these fails with a fatal fenced error, nothing of the zombie's is readable with
read_committed, and the newer producer's transaction commits normally afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

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

TOPIC = "zombies"
TIMEOUT = 60.0
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def _producer(bootstrap: str, tid: str, errors: list[KafkaError]) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "acks": "all",
                  "transaction.timeout.ms": 60_000, "error_cb": errors.append})
    p.init_transactions(TIMEOUT)
    return p


# The default suite keeps the produce case; commit and offsets (same setup, ~8 s each) run in test-all.
@pytest.mark.parametrize("where", ["send", pytest.param("commit", marks=pytest.mark.slow),
                                   pytest.param("send_offsets", marks=pytest.mark.slow)])
def test_zombie_fenced_across_brokers(etcd: EtcdProcess, tmp_path: Path, where: str) -> None:
    with coord_cluster(etcd, tmp_path) as cluster:
        ensure_internal_topic(cluster, TXN_TOPIC)
        leader = data_topic(cluster, TOPIC, 1)[0].leader
        coord = next(n for n in cluster.brokers if n != leader)
        tid, _ = id_led_by(cluster, TXN_TOPIC, coord, "zombie-tid")
        assert wait_coordinator(cluster, tid, KEY_TXN) == coord

        zombie_errors: list[KafkaError] = []
        zombie = _producer(cluster.bootstrap, tid, zombie_errors)
        zombie.begin_transaction()
        zombie.produce(TOPIC, value=b"zombie-open", partition=0)
        assert zombie.flush(TIMEOUT) == 0
        fresh = _producer(cluster.bootstrap, tid, [])  # aborts the zombie's transaction, bumps the epoch

        with pytest.raises(KafkaException) as info:
            if where == "send":
                zombie.produce(TOPIC, value=b"zombie-late", partition=0)
                # No flush(): confluent-kafka 2.16's flush() raises the fatal KafkaError object itself
                # (not an exception) while a delivery callback is pending; commit surfaces the error.
                zombie.commit_transaction(TIMEOUT)
            elif where == "commit":
                zombie.commit_transaction(TIMEOUT)
            else:
                c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "zombie-group"})
                try:
                    zombie.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)], c.consumer_group_metadata(),
                                                       TIMEOUT)
                finally:
                    c.close()
        err = info.value.args[0]
        assert err.fatal() and err.code() in FENCED, err
        if where == "send":
            # The refusal came back on the Produce to the partition leader, not from the coordinator.
            assert "ProduceRequest" in err.str() and f"broker {leader} " in err.str(), err
        else:  # the coordinator's answer (EndTxn / AddOffsetsToTxn), not a local check
            assert ("end transaction" if where == "commit" else "add offsets") in err.str(), err

        fresh.begin_transaction()
        fresh.produce(TOPIC, value=b"fresh", partition=0)
        fresh.commit_transaction(TIMEOUT)
        got = read_all(cluster.bootstrap, TOPIC, [0], 1)
        assert [v for _, v in got[0]] == [b"fresh"]
        raw = [v for _, v in read_all(cluster.bootstrap, TOPIC, [0], 2, isolation="read_uncommitted")[0]]
        assert b"zombie-late" not in raw  # refused before it reached the log
        assert raw == [b"zombie-open", b"fresh"]
        print(f"\n{where}: zombie fenced ({err.name()}: {err.str()}); coordinator node "
              f"{coord}, partition leader node {leader}")
