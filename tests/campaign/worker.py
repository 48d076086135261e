"""A workload worker: one subprocess driving one logical client after another, recording every
operation in its own history file.

    python -m tests.campaign.worker --workload queue|txn --client confluent|kafka-python --worker N \
        --restart R --bootstrap H:P,... --keys t/0,t/1,... --epoch-ns E --until-s S --seed X --out FILE
    python -m tests.campaign.worker --drain --workload W --client C --keys ... --out FILE ...

Operations, as ``jepsen.tests.kafka``'s generator draws them (``queue``): ``send`` of one unique
value to a random key, ``poll`` (then the consumed positions are committed, as Jepsen's clients
``commitSync``; an assigned consumer has a group of its own for that), and now and then ``assign`` (a random set of keys; a third of the time the keys
this client sent to but has not read back yet, Jepsen's ``poll-unseen``), ``subscribe`` (the
topics of random keys, in the workload's shared group), ``seek`` (assigned partitions moved back)
and ``crash`` (the client is torn down). ``txn``: every read/write operation is a transaction of 1
to 4 micro-operations (sends to several partitions, polls), whose consumed positions go into the
transaction with ``send_offsets_to_transaction`` (consume-transform-produce); it commits, or aborts
on purpose with probability ``--abort-p``. An aborted transaction's consumer goes back to where it
started reading, so what it read is read again by the next one.

After an indeterminate operation the client is torn down and a new one (a new Jepsen "process")
takes over. A watchdog ends the worker (exit 3) when one operation blocks for ``--hang-s`` (a
librdkafka call stuck past its timeout, e.g. librdkafka#5511), after printing every thread's stack
to the worker's log: the open invocation stays in the history, which makes it indeterminate; the
runner starts the worker again with the next ``--restart``.

``--drain``: the final read. A fresh consumer assigns every key from the beginning and polls until
each partition's position reaches its high watermark (read_committed: also past every transaction
that was still open) or ``--until-s`` passes.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import random
import sys
import threading
import time

from confluent_kafka import KafkaException

from .clients import CLIENTS, Definite, Indefinite
from .history import WORKER_VALUE_SHIFT, HistoryWriter, split_key

QUEUE_WEIGHTS = {"send": 0.47, "poll": 0.46, "assign": 0.025, "subscribe": 0.025, "seek": 0.015, "crash": 0.005}
TXN_WEIGHTS = {"txn": 0.93, "assign": 0.025, "subscribe": 0.025, "seek": 0.015, "crash": 0.005}
DEFAULT_HANG_S = 60.0


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.keys: list[str] = args.keys.split(",")
        self.topics = sorted({split_key(k)[0] for k in self.keys})
        self.rng = random.Random(f"{args.seed}:{args.workload}:{args.worker}:{args.restart}")
        self.history = HistoryWriter(args.out, args.epoch_ns)
        self.until_ns = int(args.until_s * 1e9)
        self.incarnation = 0
        self.seq = 0
        # Unique across workers and their restarts: (worker, restart) in the high bits.
        self.value_base = ((args.worker * 1000 + args.restart) << WORKER_VALUE_SHIFT)
        self.client = None
        self.process = ""
        self.sent_max: dict[str, int] = {}  # this worker's highest acknowledged offset per key
        self.read_max: dict[str, int] = {}
        self.op_started = 0.0  # monotonic, 0 when idle (the watchdog's view)
        wl = args.workload
        self.group = f"c{wl[0]}"  # shared subscribe group of the workload
        self.weights = TXN_WEIGHTS if wl == "txn" else QUEUE_WEIGHTS

    # --- lifecycle ---------------------------------------------------------------------------

    def new_client(self) -> None:
        a = self.args
        self.process = f"{a.workload[0]}{a.worker}.{a.restart * 1000 + self.incarnation}"
        self.incarnation += 1
        while self.history.now() < self.until_ns:
            try:
                self.client = CLIENTS[a.client](
                    a.bootstrap, self.group, assign_group=f"{self.group}-a{a.worker}",
                    txn_id=f"cx-w{a.worker}" if a.workload == "txn" else None, group_protocol=a.group_protocol)
                return
            except Indefinite as e:  # init_transactions did not get through: try again
                print(f"worker {a.worker}: {e}", file=sys.stderr, flush=True)
                time.sleep(1)
        self.client = None

    def crash_client(self) -> None:
        c, self.client = self.client, None
        if c is not None:
            c.close()
        self.new_client()

    def watchdog(self) -> None:
        while True:
            time.sleep(1)
            started = self.op_started
            if started and time.monotonic() - started > self.args.hang_s:
                print(f"worker {self.args.worker}: an operation blocked for {self.args.hang_s:.0f} s; exiting "
                      f"at {time.time():.3f}; where each thread was:", file=sys.stderr, flush=True)
                faulthandler.dump_traceback(sys.stderr, all_threads=True)  # which call did not return
                os._exit(3)

    # --- events ------------------------------------------------------------------------------

    def invoke(self, f: str, value) -> None:
        self.op_started = time.monotonic()
        self.history.write({"p": self.process, "type": "invoke", "f": f, "value": value,
                            "mode": self.client.mode if self.client else None, "wl": self.args.workload})

    def complete(self, type_: str, f: str, value, **extra) -> None:
        ev = {"p": self.process, "type": type_, "f": f, "value": value, "wl": self.args.workload,
              "client": self.args.client, "mode": extra.pop("mode", self.client.mode if self.client else None)}
        if self.client is not None and self.client.rebalanced:
            ev["rebalance"] = sorted(self.client.rebalanced)
            self.client.rebalanced.clear()
        ev.update({k: v for k, v in extra.items() if v is not None})
        self.history.write(ev)
        self.op_started = 0.0

    def next_value(self) -> int:
        self.seq += 1
        return self.value_base | self.seq

    # --- operations --------------------------------------------------------------------------

    def run(self) -> None:
        threading.Thread(target=self.watchdog, daemon=True).start()
        self.new_client()
        if self.client is not None:
            self.attach()
        while self.client is not None and self.history.now() < self.until_ns:
            if self.args.rate > 0:
                time.sleep(self.rng.expovariate(self.args.rate))
            f = self.rng.choices(list(self.weights), list(self.weights.values()))[0]
            if self.client.mode is None and f in ("send", "poll", "txn", "seek"):
                f = "assign" if self.rng.random() < 0.5 else "subscribe"
            if f == "send":
                self.op_send()
            elif f == "poll":
                self.op_poll()
            elif f == "txn":
                self.op_txn()
            elif f in ("assign", "subscribe"):
                self.attach(f)
            elif f == "seek":
                self.op_seek()
            elif f == "crash":
                self.invoke("crash", None)
                self.complete("info", "crash", None)
                self.crash_client()
        if self.client is not None:
            self.client.close()
        self.history.close()

    def attach(self, f: str | None = None) -> None:
        f = f or ("assign" if self.rng.random() < 0.5 else "subscribe")
        if f == "assign":
            keys = self.rng.sample(self.keys, self.rng.randint(1, len(self.keys)))
            unseen = [k for k, off in self.sent_max.items() if self.read_max.get(k, -1) < off]
            if unseen and self.rng.random() < 1 / 3:
                keys = sorted(set(keys) | set(unseen))
            keys.sort()
            self.invoke("assign", keys)
            try:
                resumed = self.client.assign(keys)
            except Exception as e:  # noqa: BLE001 - an assign that raised did not happen
                self.complete("fail", "assign", keys, error=repr(e))
                return
            self.complete("ok", "assign", keys, resumed=resumed, mode="assign")
        else:
            topics = sorted(self.rng.sample(self.topics, self.rng.randint(1, len(self.topics))))
            keys = sorted(k for k in self.keys if split_key(k)[0] in topics)
            self.invoke("subscribe", keys)
            try:
                self.client.subscribe(topics)
            except Exception as e:  # noqa: BLE001
                self.complete("fail", "subscribe", keys, error=repr(e))
                return
            self.complete("ok", "subscribe", keys, mode="subscribe")

    def op_send(self) -> None:
        key, value = self.rng.choice(self.keys), self.next_value()
        self.invoke("send", [["send", key, value]])
        try:
            offset = self.client.send(key, value)
        except Definite as e:
            self.complete("fail", "send", [["send", key, [None, value]]], error=str(e))
            return
        except Indefinite as e:
            self.complete("info", "send", [["send", key, [None, value]]], error=str(e))
            self.crash_client()
            return
        self.sent_max[key] = max(self.sent_max.get(key, -1), offset)
        self.complete("ok", "send", [["send", key, [offset, value]]])

    def _note_reads(self, reads: dict[str, list[list[int]]]) -> None:
        for k, pairs in reads.items():
            if pairs:
                self.read_max[k] = max(self.read_max.get(k, -1), pairs[-1][0])

    def op_poll(self) -> None:
        self.invoke("poll", [["poll"]])
        try:
            reads, err = self.client.poll()
        except Exception as e:  # noqa: BLE001 - a poll that raised read nothing
            self.complete("fail", "poll", [["poll", {}]], error=repr(e))
            return
        if reads:
            self._note_reads(reads)
            # As Jepsen's clients commitSync; under assign too (the client's own group), so that a
            # new assignment resumes there instead of reading the partitions from the start again
            # (which costs the pure-Python client more CPU than the brokers can spare).
            cerr = self.client.commit()
            err = "; ".join(x for x in (err, cerr) if x) or None
        self.complete("ok", "poll", [["poll", reads]], error=err)

    def op_seek(self) -> None:
        self.invoke("seek", None)
        try:
            done = self.client.seek(self.rng)
        except Exception as e:  # noqa: BLE001 - nothing moved
            self.complete("fail", "seek", {}, error=repr(e))
            return
        self.complete("ok", "seek", done)

    def op_txn(self) -> None:
        c = self.client
        plan = []
        for _ in range(self.rng.randint(1, 4)):
            if self.rng.random() < 0.5:
                plan.append(["send", self.rng.choice(self.keys), self.next_value()])
            else:
                plan.append(["poll"])
        abort = self.rng.random() < self.args.abort_p
        self.invoke("txn", plan)
        rebalances = c.rebalances
        done: list = []
        try:
            c.begin()
            for mop in plan:
                if mop[0] == "send":
                    try:
                        off = c.send(mop[1], mop[2])
                    except (Definite, Indefinite) as e:
                        done.append(["send", mop[1], [None, mop[2]]])
                        raise Definite(str(e)) from e  # not committed: the transaction is aborted below
                    done.append(["send", mop[1], [off, mop[2]]])
                else:
                    reads, _ = c.poll()
                    self._note_reads(reads)
                    done.append(["poll", reads])
            c.send_offsets()
        except (KafkaException, Definite) as e:
            self._txn_failed(done, plan, f"before commit: {e}")
            return
        if c.rebalances != rebalances:
            # What was read before the rebalance may be handed to another member (or re-read
            # here from the group's committed offsets): committing it would process it twice.
            self._txn_failed(done, plan, "rebalanced during the transaction")
            return
        if abort:
            self._txn_failed(done, plan, None)
            return
        try:
            c.commit_txn()
        except Definite as e:
            self._txn_failed(done, plan, str(e), aborted=True)
            return
        except (Indefinite, KafkaException) as e:
            self.complete("info", "txn", self._with_unsent(done, plan), outcome="commit", error=str(e))
            self.crash_client()
            return
        for m in done:
            if m[0] == "send" and m[2][0] is not None:
                self.sent_max[m[1]] = max(self.sent_max.get(m[1], -1), m[2][0])
        self.complete("ok", "txn", done, outcome="commit")

    @staticmethod
    def _with_unsent(done: list, plan: list) -> list:
        """The performed mops plus the sends never reached (they may not be left out of a failed
        transaction's writes: it is the transaction that failed, with all it meant to send)."""
        sent = {m[2][1] for m in done if m[0] == "send"}
        return done + [["send", m[1], [None, m[2]]] for m in plan if m[0] == "send" and m[2] not in sent]

    def _txn_failed(self, done: list, plan: list, error: str | None, aborted: bool = False) -> None:
        """No commit was ever sent (or the commit was refused): the transaction did not happen."""
        c = self.client
        healthy = True
        if not aborted:
            try:
                c.abort_txn()
            except KafkaException as e:
                error = f"{error or ''}; abort: {e}"
                healthy = False
        self.complete("fail", "txn", self._with_unsent(done, plan), outcome="abort", error=error)
        first: dict[str, int] = {}
        for m in done:
            if m[0] == "poll":
                for k, pairs in m[1].items():
                    if pairs:
                        first.setdefault(k, pairs[0][0])
        c.rewind(first)
        if not healthy:
            self.crash_client()


def drain(args: argparse.Namespace) -> None:
    """Read every key from the beginning up to its high watermark; one poll op per consume."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    keys = args.keys.split(",")
    hist = HistoryWriter(args.out, args.epoch_ns)
    process = f"drain-{args.workload}-{args.client}.{args.restart}"
    until_ns = int(args.until_s * 1e9)
    if args.client == "kafka-python":
        from kafka import KafkaConsumer
        from kafka import TopicPartition as TP

        consumer = KafkaConsumer(bootstrap_servers=args.bootstrap.split(","), group_id=None,
                                 enable_auto_commit=False, isolation_level="read_committed",
                                 auto_offset_reset="earliest", request_timeout_ms=15000)
        tps = [TP(*split_key(k)) for k in keys]
        hist.write({"p": process, "type": "invoke", "f": "assign", "value": keys})
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        hist.write({"p": process, "type": "ok", "f": "assign", "value": keys, "resumed": [], "mode": "assign",
                    "client": args.client, "wl": args.workload})
        ends = consumer.end_offsets(tps)
        end = {f"{tp.topic}/{tp.partition}": off for tp, off in ends.items()}

        def poll() -> dict[str, list[list[int]]]:
            batches = consumer.poll(timeout_ms=500, max_records=2000)
            return {f"{tp.topic}/{tp.partition}": [[r.offset, _dv(r.value)] for r in rs] for tp, rs in batches.items()}

        def position(k: str) -> int:
            return consumer.position(TP(*split_key(k)))
    else:
        consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"drain-{args.workload}",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest", "log_level": 3})
        hist.write({"p": process, "type": "invoke", "f": "assign", "value": keys})
        consumer.assign([TopicPartition(*split_key(k), OFFSET_BEGINNING) for k in keys])
        hist.write({"p": process, "type": "ok", "f": "assign", "value": keys, "resumed": [], "mode": "assign",
                    "client": args.client, "wl": args.workload})
        end = {}
        for k in keys:
            _low, high = consumer.get_watermark_offsets(TopicPartition(*split_key(k)), timeout=30)
            end[k] = high

        def poll() -> dict[str, list[list[int]]]:
            out: dict[str, list[list[int]]] = {}
            for m in consumer.consume(2000, 0.5):
                if m.error() is None:
                    out.setdefault(f"{m.topic()}/{m.partition()}", []).append([m.offset(), _dv(m.value())])
            return out

        def position(k: str) -> int:
            (tp,) = consumer.position([TopicPartition(*split_key(k))])
            return tp.offset
    remaining = {k for k in keys if end.get(k, 0) > 0}
    while remaining and hist.now() < until_ns:
        hist.write({"p": process, "type": "invoke", "f": "poll", "value": [["poll"]]})
        reads = poll()
        hist.write({"p": process, "type": "ok", "f": "poll", "value": [["poll", reads]], "mode": "assign",
                    "client": args.client, "wl": args.workload})
        for k in list(remaining):
            with contextlib.suppress(Exception):
                if position(k) >= end[k]:
                    remaining.discard(k)
    print(f"drain {args.workload}/{args.client}: high watermarks {end}; not reached: {sorted(remaining)}",
          flush=True)
    with contextlib.suppress(Exception):
        consumer.close()
    hist.close()
    sys.exit(0 if not remaining else 4)


def _dv(raw: bytes | None) -> int:
    from .clients import decode_value

    return decode_value(raw)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=["queue", "txn"], required=True)
    p.add_argument("--client", choices=sorted(CLIENTS), default="confluent")
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--restart", type=int, default=0)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--keys", required=True)
    p.add_argument("--epoch-ns", type=int, required=True)
    p.add_argument("--until-s", type=float, required=True, help="seconds after the epoch to stop at")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--abort-p", type=float, default=0.2)
    p.add_argument("--rate", type=float, default=0.0, help="operations per second at most (0: as fast as it goes)")
    p.add_argument("--hang-s", type=float, default=DEFAULT_HANG_S)
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    p.add_argument("--drain", action="store_true")
    args = p.parse_args(argv)
    if args.drain:
        drain(args)
    else:
        Worker(args).run()


if __name__ == "__main__":
    main()
