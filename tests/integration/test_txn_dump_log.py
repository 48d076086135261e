"""`kbroker dump-log` on transactional data (issue 5, acceptance 5).

After one committed and one aborted transaction, dumping the coordinator's ``__transaction_state``
partition shows the transaction records decoded (key: transactionalId; value: producer id/epoch,
status and partitions, with Kafka's numeric TransactionState ids), and dumping the data partition
shows the transactional batches, the COMMIT and ABORT control batches and the aborted transaction's
``.txnindex`` entry.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import REPO_ROOT

TOPIC = "txn-dump"
TID = "dump-tid"
TIMEOUT = 30
STATE_PARTITIONS = 50  # transaction.state.log.num.partitions default
# Kafka's TransactionState ids as written in TransactionLogValue.transactionStatus.
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = 0, 1, 2, 3, 4, 5


def java_string_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(tid: str, partitions: int = STATE_PARTITIONS) -> int:
    """Kafka: Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions."""
    h = java_string_hash(tid)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def dump(*files: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--print-data", *map(str, files)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_dump_log_shows_transaction_records_markers_and_txnindex(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(TIMEOUT)
    # a long linger keeps the two committed records in one batch even if this thread stalls between
    # them (commit_transaction and flush send at once regardless)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TID, "linger.ms": 1000})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(TOPIC, value=b"committed-0", partition=0)
    p.produce(TOPIC, value=b"committed-1", partition=0)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(TOPIC, value=b"aborted-0", partition=0)
    assert p.flush(TIMEOUT) == 0  # on the broker before the abort (an unsent record is just purged)
    p.abort_transaction(TIMEOUT)
    broker.stop()  # segment files complete on disk

    # --- the coordinator's __transaction_state partition --------------------------------------------
    state_dir = broker.data_dir / f"__transaction_state-{coordinator_partition(TID)}"
    text = dump(*sorted(state_dir.glob("*.log")))
    records = []
    for line in text.splitlines():
        m = re.match(r"\| offset: \d+ .* key: (\{.*\}) payload: (\{.*\})$", line)
        if m:
            records.append((json.loads(m.group(1)), json.loads(m.group(2))))
    assert records, text
    assert all(k == {"type": "0", "data": {"transactionalId": TID}} for k, _ in records)
    values = [v["data"] for _, v in records]
    assert len({(v["producerId"], v["producerEpoch"]) for v in values}) == 1  # no fencing in between
    statuses = [v["transactionStatus"] for v in values]
    collapsed = [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]
    assert collapsed == [EMPTY, ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT, ONGOING, PREPARE_ABORT, COMPLETE_ABORT]
    prepare_commit = values[statuses.index(PREPARE_COMMIT)]
    assert prepare_commit["transactionPartitions"] == [{"topic": TOPIC, "partitionIds": [0]}]
    assert values[-1]["transactionPartitions"] == []  # CompleteX clears them

    # --- the data partition ------------------------------------------------------------------------
    data_dir = broker.data_dir / f"{TOPIC}-0"
    text = dump(*sorted(data_dir.glob("*.log")))
    assert re.search(r"baseOffset: 0 lastOffset: 1 count: 2 .*isTransactional: true isControl: false", text), text
    assert "payload: committed-0" in text and "payload: aborted-0" in text
    assert re.search(r"\| offset: 2 .*endTxnMarker: COMMIT coordinatorEpoch: \d+", text), text
    assert re.search(r"baseOffset: 3 lastOffset: 3 count: 1 .*isTransactional: true isControl: false", text), text
    assert re.search(r"\| offset: 4 .*endTxnMarker: ABORT coordinatorEpoch: \d+", text), text
    assert len(re.findall(r"isControl: true", text)) == 2

    txnindex = [f for f in data_dir.glob("*.txnindex") if f.stat().st_size > 0]
    assert len(txnindex) == 1
    text = dump(*txnindex)
    entries = re.findall(r"version: 0 producerId: (\d+) firstOffset: (\d+) lastOffset: (\d+) lastStableOffset: (\d+)",
                         text)
    pid = str(prepare_commit["producerId"])
    # One aborted transaction: its first record (3) through its ABORT marker (4); the LSO after it is 5.
    assert entries == [(pid, "3", "4", "5")], text
