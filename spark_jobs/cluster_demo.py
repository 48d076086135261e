"""``make spark-cluster-demo``: ``uppercase`` on a standalone Spark cluster, code shipped with --py-files.

    python -m spark_jobs.cluster_demo [--bootstrap 127.0.0.1:9092] [--records 2000]

Starts a master and two 1-core workers on 127.0.0.1 in a temp dir (spark_jobs/standalone.py),
builds the shipped package (spark_jobs/package.py), produces --records records to a fresh input
topic of the kbroker at --bootstrap (or of a temporary kbroker when none answers there), submits
``uppercase`` with ``spark-submit --master spark://... --py-files kbroker_spark.zip``, prints what the
output topic holds (read_committed) and where the executors imported the code from, and stops
every process it started, by pid (the temp dir with the Spark logs is kept when something failed).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from spark_jobs import kafka_io
from spark_jobs.demo import broker_answers, committed_records, start_temporary_broker
from spark_jobs.package import build
from spark_jobs.standalone import StandaloneCluster, executor_python, submit_command, submit_env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092",
                    help="kbroker to use; a temporary one is started if none answers there (default %(default)s)")
    ap.add_argument("--records", type=int, default=2000, help="records to produce (default %(default)s)")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="kbroker-spark-cluster-demo-"))
    broker, bootstrap = None, args.bootstrap
    cluster = StandaloneCluster(tmp / "cluster")
    ok = False
    try:
        if not broker_answers(bootstrap):
            broker, bootstrap = start_temporary_broker(tmp / "data")
            print(f"no broker at {args.bootstrap}; started a temporary kbroker at {bootstrap}")
        suffix = time.strftime("%H%M%S")
        topic_in, topic_out = f"cluster-demo-in-{suffix}", f"cluster-demo-out-{suffix}"
        adm = kafka_io.admin({"bootstrap.servers": bootstrap})
        kafka_io.ensure_topic(adm, topic_in, partitions=2)
        kafka_io.ensure_topic(adm, topic_out, partitions=2)
        del adm
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
        for i in range(args.records):
            p.produce(topic_in, f"hello from a spark cluster #{i}".encode(), f"k{i}".encode())
        p.flush(30)
        del p
        print(f"produced {args.records} records to {topic_in}; starting a master and 2 workers ...", flush=True)
        print(f"cluster: {cluster.start()} (logs in {cluster.work})", flush=True)
        package = build(tmp / "package").parent
        cmd = submit_command(cluster.master_url, package, "spark_jobs.uppercase",
                             ["--bootstrap", bootstrap, "--input", topic_in, "--output", topic_out,
                              "--checkpoint", str(tmp / "checkpoint"), "--available-now",
                              "--max-offsets-per-trigger", str(max(100, args.records // 2))],
                             python=executor_python(tmp / "executor-python"))
        print("$ " + " ".join(cmd), flush=True)
        (tmp / "driver").mkdir()
        res = subprocess.run(cmd, cwd=tmp / "driver", env=submit_env(cluster.work, package),
                             capture_output=True, text=True, timeout=900)
        for line in res.stdout.splitlines() + res.stderr.splitlines():
            if line.startswith(("kbroker:", '{"job"')):
                print(line)
        if res.returncode != 0:
            print(res.stderr[-4000:])
            return res.returncode
        out = committed_records(bootstrap, topic_out)
        print(f"{topic_out} holds {len(out)} committed records, {len(set(out))} distinct; sample: "
              f"{[v.decode() for v in out[:3]]}")
        ok = True
        return 0
    finally:
        cluster.stop()
        if broker is not None:
            broker.terminate()
            broker.wait(30)
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs kept in {tmp}")


if __name__ == "__main__":
    raise SystemExit(main())
