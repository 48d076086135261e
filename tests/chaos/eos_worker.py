"""Exactly-once consume-transform-produce worker (confluent-kafka) for the EOS soak test.

    python tests/chaos/eos_worker.py --bootstrap H:P --transactional-id ID --group G --input IN --output OUT

Reads IN as a member of group G, writes ``T:<value>`` with the same key to the same partition of
OUT, and commits the consumed offsets in the same transaction (sendOffsetsToTransaction with the
consumer's group metadata, so a stale generation is fenced by the broker, KIP-447). Any error it
cannot simply retry makes it exit non-zero: the soak driver restarts it, and the restart's
InitProducerId aborts whatever transaction was left open. SIGTERM stops it between transactions.
Prints one ``committed <n>`` line per transaction (read by nobody but a human debugging a soak run).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

TIMEOUT = 60


def transform(value: bytes) -> bytes:
    return b"T:" + value


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--transaction-timeout-ms", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=500, help="most records per transaction")
    ap.add_argument("--work-ms", type=int, default=0,
                    help="simulated processing time inside each transaction (widens the window for kills)")
    args = ap.parse_args()

    stopping = False

    def on_term(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 15000,
    })
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.transactional_id,
        "transaction.timeout.ms": args.transaction_timeout_ms,
        "linger.ms": 5,
        # Without an error_cb librdkafka's fatal errors surface as exceptions from poll(); the
        # transactional API calls report them anyway.
        "error_cb": lambda err: print(f"client error: {err}", file=sys.stderr, flush=True),
    })
    total = 0
    try:
        producer.init_transactions(TIMEOUT)
        consumer.subscribe([args.input])
        while not stopping:
            msgs = consumer.consume(num_messages=args.batch, timeout=0.5)
            # The generation these records were fetched under: if the group rebalances before the
            # offsets reach the broker, TxnOffsetCommit fails and the whole transaction aborts.
            group_metadata = consumer.consumer_group_metadata()
            records = []
            for m in msgs:
                if m.error() is None:
                    records.append(m)
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    print(f"consume error: {m.error()}", file=sys.stderr, flush=True)
            if not records:
                continue
            next_offsets: dict[int, int] = {}
            producer.begin_transaction()
            for m in records:
                while True:
                    try:
                        producer.produce(args.output, key=m.key(), value=transform(m.value()),
                                         partition=m.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
                next_offsets[m.partition()] = m.offset() + 1
            if args.work_ms:
                time.sleep(args.work_ms / 1000)
            offsets = [TopicPartition(args.input, p, o) for p, o in sorted(next_offsets.items())]
            producer.send_offsets_to_transaction(offsets, group_metadata, TIMEOUT)
            commit(producer)
            total += len(records)
            print(f"committed {len(records)} total {total}", flush=True)
    except KafkaException as e:
        err = e.args[0]
        print(f"transaction failed ({'abortable' if err.txn_requires_abort() else 'fatal'}): {err}",
              file=sys.stderr, flush=True)
        # Abortable or not, start over from the committed offsets: a fresh process (restarted by
        # the driver) re-reads them, and its InitProducerId aborts this transaction if still open.
        return 3
    finally:
        if stopping:
            consumer.close()
    return 0


def commit(producer: Producer) -> None:
    """commit_transaction, retried while librdkafka says the error is retriable (e.g. a timeout)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            producer.commit_transaction(TIMEOUT)
            return
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise


if __name__ == "__main__":
    sys.exit(main())
