"""``txn_ctp``: Kafka's transactional consume-transform-produce loop, one loop per Spark task.

This is the seeds' pattern run by Spark rather than Spark's micro-batch model: the job has one
task per input partition, and each task is a full transactional client of kbroker —

    consumer (group --group, read_committed, assign() to its partition, starts at the group's
    committed offset)  ->  transform (upper-case)  ->  producer (transactional.id
    ``<prefix>.<input>.<partition>``): begin; produce; sendOffsetsToTransaction(position, group);
    commit; repeat

until the partition's last stable offset as of job start is consumed. Consumed offsets are
committed to the consumer group inside the same transaction as the output, so output and
progress can never disagree. A task that dies (executor loss, ``--kill-task`` test hook) is
retried by Spark; the retry's InitProducerId with the same transactional.id fences the dead
attempt and aborts its open transaction, and the retry resumes at the group's committed offset.
Nothing in this job uses Spark's checkpoint: the consumer group is the checkpoint.

    python -m spark_jobs.txn_ctp --bootstrap 127.0.0.1:9092 --input topic1 --output topic2 --group ctp
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from spark_jobs import kafka_io

# Records consumed per transaction (upper bound; one consume() call per transaction).
DEFAULT_BATCH = 2000


@dataclass
class TaskResult:
    partition: int
    attempt: int
    start_offset: int
    end_offset: int
    records: int
    transactions: int


def transform(value: bytes | None) -> bytes | None:
    return None if value is None else value.decode("utf-8", "replace").upper().encode()


def run_partition(conf: dict[str, str], input_topic: str, output_topic: str, group: str, txn_prefix: str,
                  partition: int, end_offset: int, batch: int, attempt: int,
                  kill: tuple[int, int] | None) -> TaskResult:
    """The consume-transform-produce loop for one input partition, until ``end_offset``."""
    tp = TopicPartition(input_topic, partition)
    producer = Producer({
        **{k: v for k, v in conf.items() if k != "isolation.level"},
        "transactional.id": f"{txn_prefix}.{input_topic}.{partition}",
        "enable.idempotence": True,
        "linger.ms": 5,
        "transaction.timeout.ms": 60000,
    })
    # First fence any earlier attempt (its open transaction is aborted), *then* read the committed
    # offset: a zombie can no longer move it.
    producer.init_transactions(60)
    consumer = Consumer({
        **conf,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    try:
        committed = consumer.committed([tp], timeout=60)[0]
        if committed.error is not None:
            raise KafkaException(committed.error)
        low, _ = consumer.get_watermark_offsets(tp, cached=False, timeout=30)
        position = committed.offset if committed.offset >= 0 else low
        start = position
        consumer.assign([TopicPartition(input_topic, partition, position)])
        records = transactions = 0
        while position < end_offset:
            # consume() waits until it has num_messages or the timeout passed: cap both.
            msgs = consumer.consume(num_messages=max(1, min(batch, end_offset - position)), timeout=0.2)
            data = []
            for m in msgs:
                err = m.error()
                if err is None:
                    if m.offset() < end_offset:
                        data.append(m)
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
            # The consumer's position also moves over aborted records and transaction markers.
            new_pos = consumer.position([tp])[0].offset
            if data:
                new_pos = max(new_pos, data[-1].offset() + 1)
            new_pos = min(new_pos, end_offset) if new_pos >= 0 else position
            if new_pos <= position:
                continue
            producer.begin_transaction()
            for m in data:
                producer.produce(output_topic, transform(m.value()), m.key(), partition=partition)
            if kill is not None and attempt == 0 and kill[0] == partition and transactions == kill[1]:
                producer.flush()  # the half transaction is on the broker when the worker dies
                os.kill(os.getpid(), signal.SIGKILL)
            producer.send_offsets_to_transaction([TopicPartition(input_topic, partition, new_pos)],
                                                 consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(120)
            records += len(data)
            transactions += 1
            position = new_pos
        return TaskResult(partition, attempt, start, position, records, transactions)
    finally:
        consumer.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="kbroker bootstrap servers (default %(default)s)")
    p.add_argument("--input", default="topic1", help="input topic (default %(default)s)")
    p.add_argument("--output", default="topic2",
                   help="output topic, created with the input's partition count if missing (default %(default)s)")
    p.add_argument("--group", default="kbroker-txn-ctp",
                   help="consumer group whose committed offsets are the job's progress (default %(default)s)")
    p.add_argument("--transactional-id-prefix", default="kbroker-txn-ctp",
                   help="task transactional.id = <prefix>.<input>.<partition> (default %(default)s)")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                   help="records per transaction, at most (default %(default)s)")
    p.add_argument("--master", default=None, help="Spark master (default local[2,4], or spark-submit's --master)")
    p.add_argument("--kill-task", default=None, metavar="PARTITION:TXNS",
                   help="test hook: SIGKILL the first attempt of that task in the middle of its "
                        "transaction number TXNS")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from spark_jobs.session import spark_session

    conf = {"bootstrap.servers": args.bootstrap}
    adm = kafka_io.admin(conf)
    tps = kafka_io.list_partitions(adm, subscribe=args.input)
    ends = kafka_io.list_offsets(adm, tps, "latest", isolation_level="read_committed")
    kafka_io.ensure_topic(adm, args.output, partitions=len(tps))
    kill = tuple(int(x) for x in args.kill_task.split(":")) if args.kill_task else None
    spark = spark_session("kbroker-txn-ctp", master=args.master)
    sc = spark.sparkContext
    plan = [(p, ends[(t, p)]) for t, p in tps]
    input_topic, output_topic, group, prefix, batch = (args.input, args.output, args.group,
                                                       args.transactional_id_prefix, args.batch)
    # Imported by name so tasks unpickle it from the installed module, also when this file runs
    # as __main__ (python -m / spark-submit), whose functions would otherwise be shipped by value.
    from spark_jobs.txn_ctp import run_partition as run_loop

    def task(index: int, _rows: Any) -> Any:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, end = plan[index]
        res = run_loop(conf, input_topic, output_topic, group, prefix, part, end, batch,
                            ctx.attemptNumber() if ctx else 0, kill)  # type: ignore[arg-type]
        yield asdict(res)

    results = sc.parallelize(range(len(plan)), len(plan)).mapPartitionsWithIndex(task).collect()
    check = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                      "isolation.level": "read_committed", "enable.auto.commit": False})
    committed = check.committed([TopicPartition(args.input, p) for _, p in tps], timeout=60)
    check.close()
    summary = {
        "job": "txn_ctp",
        "records": sum(r["records"] for r in results),
        "tasks": results,
        "end_offsets": {str(p): ends[(t, p)] for t, p in tps},
        "committed_offsets": {str(c.partition): c.offset for c in committed},
    }
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
