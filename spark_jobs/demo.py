"""``make spark-demo``: run ``uppercase`` against a local kbroker and show what it did.

    python -m spark_jobs.demo [--bootstrap 127.0.0.1:9092] [--records 1000]

Uses the broker at --bootstrap when one answers there (e.g. ``make serve``), otherwise starts a
temporary kbroker in a temp dir for the duration of the demo. Produces --records lines to topic1,
runs the uppercase streaming query once (Trigger.AvailableNow) with a checkpoint that persists
between demo runs against the same broker (so a second run processes only the new records), then
reads topic2 with a read_committed consumer and prints counts and a sample.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from spark_jobs import kafka_io


def broker_answers(bootstrap: str) -> bool:
    # A plain TCP connect first: a Kafka client pointed at a closed port logs every reconnect attempt.
    host, port = bootstrap.split(",")[0].strip().rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    try:
        kafka_io.admin({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 2000}).list_topics(
            timeout=3)
        return True
    except KafkaException:
        return False


def start_temporary_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://{bootstrap}",
           "--override", f"log.dirs={data_dir}", "--override", "num.partitions=2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not broker_answers(bootstrap):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"could not start a temporary kbroker ({' '.join(cmd)})")
        time.sleep(0.2)
    return proc, bootstrap


def committed_records(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kbroker-spark-demo", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), cached=False)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        todo = {p for p, end in ends.items() if end > 0}
        out: list[bytes] = []
        while todo:
            for m in c.consume(1000, 2.0):
                if m.error() is None:
                    out.append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                    todo.discard(m.partition())
        return out
    finally:
        c.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092",
                    help="kbroker to use; a temporary one is started if none answers there (default %(default)s)")
    ap.add_argument("--records", type=int, default=1000, help="records to produce (default %(default)s)")
    ap.add_argument("--input", default="topic1", help="input topic (default %(default)s)")
    ap.add_argument("--output", default="topic2", help="output topic (default %(default)s)")
    args = ap.parse_args(argv)

    tmp = tempfile.TemporaryDirectory(prefix="kbroker-spark-demo-")
    broker = None
    bootstrap = args.bootstrap
    if broker_answers(bootstrap):
        print(f"using the kbroker at {bootstrap}")
        checkpoint = Path(tempfile.gettempdir()) / f"kbroker-spark-demo-{bootstrap.replace(':', '_')}"
    else:
        broker, bootstrap = start_temporary_broker(Path(tmp.name) / "data")
        print(f"no broker at {args.bootstrap}; started a temporary kbroker at {bootstrap}")
        checkpoint = Path(tmp.name) / "checkpoint"
    try:
        adm = kafka_io.admin({"bootstrap.servers": bootstrap})
        kafka_io.ensure_topic(adm, args.input, partitions=2)
        kafka_io.ensure_topic(adm, args.output, partitions=2)
        del adm  # no client may outlive a temporary broker: it would log the refused reconnects
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
        stamp = time.strftime("%H:%M:%S")
        for i in range(args.records):
            p.produce(args.input, f"hello from kbroker #{i} at {stamp}".encode(), f"k{i}".encode())
        p.flush(30)
        del p
        print(f"produced {args.records} records to {args.input}")

        from spark_jobs import uppercase

        print(f"running uppercase ({args.input} -> {args.output}, checkpoint {checkpoint}) ...", flush=True)
        summary = uppercase.main(["--bootstrap", bootstrap, "--input", args.input, "--output", args.output,
                                  "--checkpoint", str(checkpoint), "--available-now",
                                  "--max-offsets-per-trigger", str(max(100, args.records // 2))])
        out = committed_records(bootstrap, args.output)
        print(f"uppercase processed {summary['input_rows']} records in {summary['batches']} micro-batch(es), "
              f"{summary['seconds']} s")
        print(f"{args.output} holds {len(out)} committed records (read_committed), {len(set(out))} distinct; "
              f"sample:")
        for value in out[:5]:
            print(f"  {value.decode()}")
    finally:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
        if broker is not None:
            broker.terminate()
            broker.wait(30)
        tmp.cleanup()


if __name__ == "__main__":
    main()
