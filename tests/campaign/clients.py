"""Client adapters of the workloads: one producer and one consumer per logical client, behind one
small interface, for confluent-kafka (librdkafka) and kafka-python.

A send either returns its offset, raises ``Definite`` (the record never left the client: the
operation failed) or raises ``Indefinite`` (it may or may not have been written). Consumers attach
with ``assign`` (their own group id, so committed positions are theirs alone) or ``subscribe``
(the workload's shared group); switching between the two makes a new consumer. Rebalance callbacks
collect the keys whose assignment changed into ``rebalanced``, which the worker attaches to the
next operation it completes. Transactions (confluent-kafka only) follow the librdkafka rules:
an abortable error aborts, a retriable commit is retried, a fatal one ends the client.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from .history import make_key, split_key

SEND_TIMEOUT_S = 25.0
POLL_S = 0.1
MAX_POLL_RECORDS = 200


class Definite(Exception):
    """The operation certainly had no effect."""


class Indefinite(Exception):
    """The operation may or may not have taken effect."""


def decode_value(raw: bytes | None) -> int:
    """A record's value as the workload wrote it (a decimal integer); anything else as a negative
    number no sender used, which the checker reports as a value nobody wrote."""
    try:
        return int(raw or b"")
    except ValueError:
        return -1 - (hash(raw) & 0x7FFFFFFF)


class ConfluentClient:
    def __init__(self, bootstrap: str, group: str, *, assign_group: str, txn_id: str | None = None,
                 group_protocol: str = "classic") -> None:
        self.bootstrap = bootstrap
        self.group, self.assign_group = group, assign_group
        self.group_protocol = group_protocol
        self.txn_id = txn_id
        self.rebalanced: set[str] = set()
        self.mode: str | None = None
        self.consumer: Consumer | None = None
        # Next offset to read per key, kept here: librdkafka's position() is the last consumed
        # offset + 1 and does not follow a seek until a record is consumed again.
        self.next_pos: dict[str, int] = {}
        self.rebalances = 0  # callbacks seen: a transaction that saw one aborts (see Worker.op_txn)
        common = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "reconnect.backoff.max.ms": 1000,
                  "topic.metadata.refresh.interval.ms": 5000, "log_level": 3}
        self._common = common
        pconf = {**common, "acks": "all", "enable.idempotence": True, "linger.ms": 0, "request.timeout.ms": 5000,
                 "retry.backoff.ms": 100}
        if txn_id:
            pconf.update({"transactional.id": txn_id, "transaction.timeout.ms": 10000})
            # Diagnosis of a worker the watchdog ends: librdkafka's debug contexts for the
            # transactional producer (e.g. "eos,protocol"), into the worker's log.
            if debug := os.environ.get("KBROKERTEST_CAMPAIGN_TXN_DEBUG"):
                pconf.update({"debug": debug, "log_level": 7})
        else:
            pconf["message.timeout.ms"] = 20000
        self.producer = Producer(pconf)
        self.in_txn = False
        if txn_id:
            try:
                self.producer.init_transactions(30)
            except KafkaException as e:
                raise Indefinite(f"init_transactions: {e}") from e

    # --- consumer --------------------------------------------------------------------------------

    def _new_consumer(self, mode: str) -> Consumer:
        self._close_consumer()
        conf = {**self._common, "group.id": self.group if mode == "subscribe" else self.assign_group,
                "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100, "enable.partition.eof": False}
        if self.group_protocol == "consumer" and mode == "subscribe":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 120000})
        self.consumer = Consumer(conf)
        self.mode = mode
        self.next_pos.clear()
        return self.consumer

    def _close_consumer(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.consumer = None
            self.mode = None

    def _note(self, _consumer: Consumer, parts: list[TopicPartition]) -> None:
        keys = [make_key(tp.topic, tp.partition) for tp in parts]
        self.rebalanced.update(keys)
        self.rebalances += 1
        for k in keys:
            self.next_pos.pop(k, None)  # (re)assigned: it starts from the group's committed offset

    def assigned_keys(self) -> list[str]:
        if self.consumer is None:
            return []
        try:
            return [make_key(tp.topic, tp.partition) for tp in self.consumer.assignment()]
        except KafkaException:
            return []

    def positions(self) -> dict[str, int]:
        """The next offset to read of each assigned key whose position is known."""
        assigned = set(self.assigned_keys())
        return {k: off for k, off in self.next_pos.items() if k in assigned}

    def assign(self, keys: list[str]) -> list[str]:
        """Attach to exactly ``keys``; returns the keys whose position carried over."""
        pos = self.positions() if self.mode == "assign" else {}
        consumer = self.consumer if self.mode == "assign" else self._new_consumer("assign")
        tps = [TopicPartition(*split_key(k), pos.get(k, OFFSET_STORED)) for k in keys]
        consumer.assign(tps)
        self.next_pos = {k: off for k, off in pos.items() if k in keys}
        return [k for k in keys if k in pos]

    def subscribe(self, topics: list[str]) -> None:
        consumer = self._new_consumer("subscribe")
        consumer.subscribe(topics, on_assign=self._note, on_revoke=self._note, on_lost=self._note)

    def seek(self, rng: random.Random) -> dict[str, int]:
        """Move some assigned partitions back (to the start, or a few records back)."""
        pos = self.positions()
        if not pos:
            raise Definite("nothing to seek")
        chosen = rng.sample(sorted(pos), rng.randint(1, len(pos)))
        done = {}
        for k in chosen:
            target = 0 if rng.random() < 0.3 else max(0, pos[k] - rng.randint(1, 50))
            try:
                self.consumer.seek(TopicPartition(*split_key(k), target if target > 0 else OFFSET_BEGINNING))
            except KafkaException as e:
                if not done:
                    raise Definite(f"seek: {e}") from e
                break
            done[k] = target
            self.next_pos[k] = target
        return done

    def poll(self) -> tuple[dict[str, list[list[int]]], str | None]:
        if self.consumer is None:
            return {}, "not attached"
        # consume() always waits its whole timeout: wait for the first record only, then take
        # what is already there.
        first = self.consumer.poll(POLL_S)
        msgs = [] if first is None else [first, *self.consumer.consume(MAX_POLL_RECORDS - 1, 0)]
        out: dict[str, list[list[int]]] = {}
        errors = []
        for m in msgs:
            if m.error() is not None:
                errors.append(str(m.error()))
                continue
            key = make_key(m.topic(), m.partition())
            out.setdefault(key, []).append([m.offset(), decode_value(m.value())])
            self.next_pos[key] = m.offset() + 1
        return out, ("; ".join(errors[:3]) or None)

    def commit(self) -> str | None:
        """Commit the consumed positions (outside transactions); the error text, if any."""
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as e:
            return f"commit: {e}"
        return None

    # --- producer --------------------------------------------------------------------------------

    def send(self, key: str, value: int) -> int:
        topic, part = split_key(key)
        result: list = []
        try:
            self.producer.produce(topic, value=str(value).encode(), partition=part,
                                  on_delivery=lambda err, msg: result.append((err, msg)))
        except (BufferError, KafkaException) as e:
            raise Definite(f"produce: {e}") from e
        self.producer.flush(SEND_TIMEOUT_S)
        if not result:
            raise Indefinite("no delivery report in time")
        err, msg = result[0]
        if err is not None:
            raise Indefinite(f"delivery: {err}")
        return msg.offset()

    # --- transactions ----------------------------------------------------------------------------

    def begin(self) -> None:
        self.producer.begin_transaction()
        self.in_txn = True

    def send_offsets(self) -> bool:
        """The consumed positions into the transaction; False when there is nothing to send."""
        if self.consumer is None:
            return False
        pos = self.positions()
        if not pos:
            return False
        tps = [TopicPartition(*split_key(k), off) for k, off in pos.items()]
        self.producer.send_offsets_to_transaction(tps, self.consumer.consumer_group_metadata(), 15)
        return True

    def commit_txn(self) -> str:
        """``commit`` done, or raises Definite (aborted: the commit did not happen) / Indefinite."""
        retried = False
        for _ in range(4):
            try:
                self.producer.commit_transaction(20)
                self.in_txn = False
                return "commit"
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if err.txn_requires_abort() and not retried:
                    self.abort_txn()
                    raise Definite(f"commit refused, aborted: {err}") from e
                if err.retriable() and not err.fatal():
                    retried = True
                    continue
                raise Indefinite(f"commit: {err}") from e
        raise Indefinite("commit: retries exhausted")

    def abort_txn(self) -> None:
        self.producer.abort_transaction(20)
        self.in_txn = False

    def rewind(self, positions: dict[str, int]) -> None:
        """After an abort: back to the first offset the transaction read of each key."""
        if self.consumer is None:
            return
        for k, off in positions.items():
            try:
                self.consumer.seek(TopicPartition(*split_key(k), off))
                self.next_pos[k] = off
            except KafkaException:
                self.next_pos.pop(k, None)

    def close(self) -> None:
        self._close_consumer()
        with contextlib.suppress(Exception):
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            self.producer.flush(0.5)


class KafkaPythonClient:
    """The queue workload's second client library (pure-Python kafka-python)."""

    def __init__(self, bootstrap: str, group: str, *, assign_group: str, txn_id: str | None = None,
                 group_protocol: str = "classic") -> None:
        from kafka import KafkaProducer

        assert txn_id is None, "kafka-python runs the queue workload only"
        self.bootstrap = bootstrap.split(",")
        self.group, self.assign_group = group, assign_group
        self.rebalanced: set[str] = set()
        self.mode: str | None = None
        self.consumer = None
        self.producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                      linger_ms=0, request_timeout_ms=5000, delivery_timeout_ms=20000,
                                      max_block_ms=10000, retry_backoff_ms=100)

    def _new_consumer(self, mode: str):
        from kafka import KafkaConsumer

        self._close_consumer()
        self.consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group if mode == "subscribe" else self.assign_group,
            enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed",
            session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=120000,
            fetch_max_wait_ms=100, request_timeout_ms=10000)
        self.mode = mode
        return self.consumer

    def _close_consumer(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close(autocommit=False)
            self.consumer = None
            self.mode = None

    def assigned_keys(self) -> list[str]:
        if self.consumer is None:
            return []
        return [make_key(tp.topic, tp.partition) for tp in self.consumer.assignment()]

    def positions(self) -> dict[str, int]:
        out = {}
        if self.consumer is None:
            return out
        for tp in self.consumer.assignment():
            with contextlib.suppress(Exception):
                off = self.consumer.position(tp, timeout_ms=2000)
                if off is not None and off >= 0:
                    out[make_key(tp.topic, tp.partition)] = off
        return out

    def assign(self, keys: list[str]) -> list[str]:
        from kafka import TopicPartition as TP

        pos = self.positions() if self.mode == "assign" else {}
        consumer = self.consumer if self.mode == "assign" else self._new_consumer("assign")
        consumer.assign([TP(*split_key(k)) for k in keys])
        for k in keys:
            if k in pos:
                consumer.seek(TP(*split_key(k)), pos[k])
        return [k for k in keys if k in pos]

    def subscribe(self, topics: list[str]) -> None:
        from kafka import ConsumerRebalanceListener

        client = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                client.rebalanced.update(make_key(tp.topic, tp.partition) for tp in revoked)

            def on_partitions_assigned(self, assigned):
                client.rebalanced.update(make_key(tp.topic, tp.partition) for tp in assigned)

        self._new_consumer("subscribe").subscribe(topics, listener=Listener())

    def seek(self, rng: random.Random) -> dict[str, int]:
        from kafka import TopicPartition as TP

        pos = self.positions()
        if not pos:
            raise Definite("nothing to seek")
        done = {}
        for k in rng.sample(sorted(pos), rng.randint(1, len(pos))):
            target = 0 if rng.random() < 0.3 else max(0, pos[k] - rng.randint(1, 50))
            self.consumer.seek(TP(*split_key(k)), target)
            done[k] = target
        return done

    def poll(self) -> tuple[dict[str, list[list[int]]], str | None]:
        if self.consumer is None:
            return {}, "not attached"
        batches = self.consumer.poll(timeout_ms=int(POLL_S * 1000), max_records=MAX_POLL_RECORDS)
        out: dict[str, list[list[int]]] = {}
        for tp, records in batches.items():
            out[make_key(tp.topic, tp.partition)] = [[r.offset, decode_value(r.value)] for r in records]
        return out, None

    def commit(self) -> str | None:
        try:
            self.consumer.commit()
        except Exception as e:  # noqa: BLE001 - any commit failure is only noted
            return f"commit: {e!r}"
        return None

    def send(self, key: str, value: int) -> int:
        from kafka.errors import KafkaError as KPError

        topic, part = split_key(key)
        try:
            fut = self.producer.send(topic, value=str(value).encode(), partition=part)
        except KPError as e:
            raise Definite(f"send: {e!r}") from e
        try:
            return fut.get(timeout=SEND_TIMEOUT_S).offset
        except Exception as e:  # noqa: BLE001 - timeouts and broker errors alike: unknown outcome
            raise Indefinite(f"delivery: {e!r}") from e

    def close(self) -> None:
        self._close_consumer()
        with contextlib.suppress(Exception):
            self.producer.close(timeout=1)


ClientFactory = Callable[..., ConfluentClient | KafkaPythonClient]
CLIENTS: dict[str, ClientFactory] = {"confluent": ConfluentClient, "kafka-python": KafkaPythonClient}
