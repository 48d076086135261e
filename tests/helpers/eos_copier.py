"""Transactional message copier (confluent-kafka), the kbroker counterpart of Kafka's
TransactionalMessageCopier used by tests/kafkatest/tests/core/transactions_test.py.

    python -m tests.helpers.eos_copier --bootstrap H:P --transactional-id ID --group G \
        --input IN --output OUT [--partition P] [--group-protocol classic|consumer] ...

Reads IN with read_committed (a member of group G that subscribes to IN, or with ``--partition`` a
manual assignment of that one partition), and copies each record unchanged (same key and value) to
OUT in transactions of up to ``--txn-size`` records, committing the consumed offsets in the same
transaction with send_offsets_to_transaction(consumer_group_metadata()) (KIP-447: a stale generation
or member epoch is fenced by the coordinator). A fraction ``--abort-rate`` of the transactions is
aborted on purpose after everything was produced and the offsets were sent; the consumer then goes
back to the group's committed offsets and the records are copied again later. Every output record
carries a header ``src`` = ``<tid>:<input partition>:<input offset>:<transaction number>`` so a
duplicate found by the test can be traced to the transactions that wrote it.

Records of one transaction are collected before it begins; a rebalance seen meanwhile (assign or
revoke callback) drops them and starts over from the committed offsets, so a transaction never
mixes records fetched under two generations. Errors: an abortable one aborts and rewinds; a
retriable commit is retried; a fatal one (e.g. the producer was fenced by a newer instance) exits
with code 2, as does an error nothing can retry. The test restarts a copier that exits by itself.

Runs until SIGTERM (stops between transactions; a transaction in flight is finished first).
SIGUSR1 lifts the ``--max-rate`` throttle (the test paces the copy while it bounces brokers).
Prints one line per transaction: ``committed <n> total <t>`` / ``aborted <n> <why>``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

TIMEOUT = 60.0
# librdkafka 2.16's send_offsets_to_transaction can block past its timeout when the group
# coordinator's broker went away (confluentinc/librdkafka#5511, #5456: the coordinator request
# waits for a state change of a broker it no longer watches). A call blocked this long ends the
# process; the test starts a new instance, whose InitProducerId aborts what was left open.
WATCHDOG_S = 100.0
ABORT_TRIES = 3  # then exit: a fresh instance's InitProducerId aborts what is left open


class Copier:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = False
        self.throttled = args.max_rate > 0
        self.rebalanced = False
        self.rng = random.Random(args.seed)
        self.total = 0
        self.txn_no = 0
        self.last_idle_report = 0.0
        self.blocked: tuple[str, float] | None = None  # (client call, since) for the watchdog
        threading.Thread(target=self._watchdog, daemon=True).start()
        conf = {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "group.protocol": args.group_protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 2000,
        }
        if args.group_protocol == "classic":
            # The consumer protocol takes its timeouts from the broker (group.consumer.*); librdkafka
            # refuses these settings with it.
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
        conf["max.poll.interval.ms"] = 120000
        self.consumer = Consumer(conf)
        self.producer = Producer({
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "transaction.timeout.ms": args.transaction_timeout_ms,
            "linger.ms": 5,
            "topic.metadata.refresh.interval.ms": 2000,
            "error_cb": lambda err: print(f"client error: {err}", file=sys.stderr, flush=True),
            # librdkafka's transaction-manager log (a few lines per transaction): where a stuck
            # transaction waits (AddPartitions, TxnOffsetCommit, EndTxn, the coordinator's answers).
            "debug": "eos",
        })

    @contextlib.contextmanager
    def _watch(self, call: str) -> Iterator[None]:
        self.blocked = (call, time.monotonic())
        try:
            yield
        finally:
            self.blocked = None

    def _watchdog(self) -> None:
        while True:
            time.sleep(1)
            blocked = self.blocked
            if blocked is not None and time.monotonic() - blocked[1] > WATCHDOG_S:
                print(f"watchdog: {blocked[0]} blocked for more than {WATCHDOG_S:.0f} s "
                      "(librdkafka#5511); exiting", file=sys.stderr, flush=True)
                os._exit(3)

    # -- group callbacks: a transaction never spans a rebalance ---------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalanced = True
        print(f"assigned {[p.partition for p in partitions]}", flush=True)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalanced = True
        print(f"revoked {[p.partition for p in partitions]}", flush=True)

    def run(self) -> int:
        a = self.args
        with self._watch("init_transactions"):
            self.producer.init_transactions(TIMEOUT)
        if a.partition is None:
            self.consumer.subscribe([a.input], on_assign=self._on_assign, on_revoke=self._on_revoke)
        else:
            self._assign_from_committed()
        print("ready", flush=True)
        started = time.monotonic()
        while not self.stopping:
            records = self._collect()
            if not records:
                continue
            self.txn_no += 1
            try:
                self._copy(records)
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if err.fatal() or not (err.txn_requires_abort() or err.retriable()):
                    print(f"fatal: {err}", file=sys.stderr, flush=True)
                    return 2
                print(f"aborted {len(records)} error: {err}", flush=True)
                self._abort()
                self._rewind()
                continue
            self._pace(started)
        self.consumer.close()
        self.producer.flush(10)
        return 0

    def _collect(self) -> list:
        """Up to --txn-size records fetched under one generation (empty after a rebalance)."""
        a = self.args
        self.rebalanced = False
        self.metadata = self.consumer.consumer_group_metadata()
        records: list = []
        deadline = time.monotonic() + 5
        while len(records) < a.txn_size and not self.stopping and time.monotonic() < deadline:
            msgs = self.consumer.consume(num_messages=a.txn_size - len(records), timeout=0.5)
            fresh = 0
            for m in msgs:
                if m.error() is None:
                    records.append(m)
                    fresh += 1
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    print(f"consume error: {m.error()}", file=sys.stderr, flush=True)
            if self.rebalanced:
                self._unread(records)
                return []
            if not fresh and records:
                break  # the input's tail: copy what there is
        if not records and not self.rebalanced:
            self._report_idle()
        return records

    def _report_idle(self) -> None:
        """Every ~10 s without input: where the consumer stands (for a test that waits on us)."""
        now = time.monotonic()
        if now - self.last_idle_report < 10:
            return
        self.last_idle_report = now
        try:
            positions = self.consumer.position(self.consumer.assignment())
            print(f"idle: positions {[(tp.partition, tp.offset) for tp in positions]}", flush=True)
        except KafkaException as e:
            print(f"idle: positions unknown ({e})", flush=True)

    def _unread(self, records: list) -> None:
        """Put the consumer back before records it fetched but will not copy (a rebalance came in
        while collecting them): their partitions, if still ours, resume at the first of them. Our
        transactions are all complete here, so that is the committed offset. A seek that fails
        ends the process: a fresh instance starts from the committed offsets."""
        first: dict[int, int] = {}
        for m in records:
            first.setdefault(m.partition(), m.offset())
        owned = {tp.partition for tp in self.consumer.assignment()}
        for q, offset in first.items():
            if q in owned:
                self.consumer.seek(TopicPartition(self.args.input, q, offset))

    def _copy(self, records: list) -> None:
        a = self.args
        p = self.producer
        p.begin_transaction()
        next_offsets: dict[int, int] = {}
        for m in records:
            header = f"{a.transactional_id}:{m.partition()}:{m.offset()}:{self.txn_no}".encode()
            while True:
                try:
                    p.produce(a.output, key=m.key(), value=m.value(), headers=[("src", header)])
                    break
                except BufferError:
                    p.poll(0.05)
            next_offsets[m.partition()] = m.offset() + 1
        offsets = [TopicPartition(a.input, q, o) for q, o in sorted(next_offsets.items())]
        with self._watch("send_offsets_to_transaction"):
            p.send_offsets_to_transaction(offsets, self.metadata, TIMEOUT)
        if self.rng.random() < a.abort_rate:
            with self._watch("abort_transaction"):
                p.abort_transaction(TIMEOUT)
            print(f"aborted {len(records)} random", flush=True)
            self._rewind()
            return
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                with self._watch("commit_transaction"):
                    p.commit_transaction(TIMEOUT)
                break
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
        self.total += len(records)
        print(f"committed {len(records)} total {self.total}", flush=True)

    def _abort(self) -> None:
        for _ in range(ABORT_TRIES):
            try:
                with self._watch("abort_transaction"):
                    self.producer.abort_transaction(TIMEOUT)
                return
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    raise
                if err.code() == KafkaError._STATE:  # no transaction open: nothing to abort
                    return
                print(f"abort failed: {err}", file=sys.stderr, flush=True)
        print(f"fatal: abort_transaction failed {ABORT_TRIES} times", file=sys.stderr, flush=True)
        raise SystemExit(2)

    def _committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        # read_committed makes librdkafka ask with require_stable: a pending transactional offset
        # commit (another copier's, or ours being completed) is waited for, not read as absent.
        with self._watch("committed"):
            out = self.consumer.committed(partitions, timeout=TIMEOUT)
        return [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                for tp in out]

    def _assign_from_committed(self) -> None:
        self.consumer.assign(self._committed([TopicPartition(self.args.input, self.args.partition)]))

    def _rewind(self) -> None:
        """Back to the group's committed offsets for everything assigned (after an abort)."""
        if self.args.partition is not None:
            self._assign_from_committed()
            return
        assignment = self.consumer.assignment()
        if not assignment:
            return
        for tp in self._committed(assignment):
            # A failed seek (e.g. revoked meanwhile) raises: the process ends and a fresh instance
            # starts from the committed offsets, rather than reading on past uncopied records.
            self.consumer.seek(tp)

    def _pace(self, started: float) -> None:
        rate = self.args.max_rate
        while self.throttled and not self.stopping and self.total > rate * (time.monotonic() - started):
            time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--partition", type=int, help="assign this input partition instead of subscribing")
    ap.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    ap.add_argument("--txn-size", type=int, default=750)
    ap.add_argument("--abort-rate", type=float, default=0.1)
    ap.add_argument("--transaction-timeout-ms", type=int, default=40000)
    ap.add_argument("--max-rate", type=float, default=0, help="records/s committed at most (0: no limit)")
    ap.add_argument("--seed", type=int)
    args = ap.parse_args()
    copier = Copier(args)

    def on_term(signum, frame) -> None:
        copier.stopping = True

    def on_usr1(signum, frame) -> None:
        copier.throttled = False

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_usr1)
    try:
        return copier.run()
    except KafkaException as e:
        print(f"fatal: {e.args[0]}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
