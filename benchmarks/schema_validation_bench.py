"""What broker-side schema validation costs per record (issue 30).

    .venv/bin/python benchmarks/schema_validation_bench.py [--rounds 3] [--records 100000]
        [--sizes 100,1024] [--codec none]

One broker of this tree with the registry on. Each round produces the same framed records
(magic byte 0, a registered schema id, random bytes) to a fresh topic without validation and
to a fresh topic with ``confluent.value.schema.validation=true``, in an order that flips every
round; confluent-kafka, acks=all, linger.ms=5, batch.size=1 MiB, 4 partitions (as bench.py's
produce). Printed per round and as medians: MB/s and broker CPU µs per record of each, and the
difference of the medians, which is the validation's cost per record. Load averages are printed
too: on a shared machine the numbers move with the load.

The cost of the hook when a topic does *not* validate is measured by benchmarks/produce_paired.py
against a tree without the registry (see docs/schema-registry.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_meter import Meter  # noqa: E402
from lib_workloads import PARTITIONS, _error_sink, _produce_all, unique  # noqa: E402

from tests.helpers.broker_proc import BrokerProcess, free_port  # noqa: E402

SCHEMA = json.dumps({"type": "record", "name": "Bench", "fields": [{"name": "b", "type": "bytes"}]})


def register(url: str, subject: str) -> int:
    req = urllib.request.Request(f"{url}/subjects/{subject}/versions", data=json.dumps({"schema": SCHEMA}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["id"]


def run_one(broker: BrokerProcess, url: str, validated: bool, size: int, codec: str, records: int) -> dict:
    topic = unique("validated" if validated else "plain")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"confluent.value.schema.validation": "true"} if validated else {}
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs)])[topic].result(30)
    schema_id = register(url, f"{topic}-value")
    values = [b"\x00" + struct.pack(">I", schema_id) + os.urandom(size - 5) for _ in range(64)]
    errors: list[str] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "compression.type": codec, "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2 * 1024 * 1024, "delivery.report.only.error": True,
                  "on_delivery": _error_sink(errors)})
    _produce_all(p, topic, 100, values)
    p.flush(30)
    with Meter(broker.proc.pid if broker.proc else None) as m:
        _produce_all(p, topic, records, values)
        left = p.flush(300)
    if left or errors:
        raise RuntimeError(f"{left} undelivered, errors {errors[:3]}")
    u = m.usage
    for f in admin.delete_topics([topic]).values():
        f.result(60)
    return {"mb_per_s": records * size / u.wall / 1e6, "us_per_record": (u.broker_cpu or 0) / records * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--codec", default="none")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="schema-validation-bench-"))
    url = f"http://127.0.0.1:{free_port()}"
    broker = BrokerProcess(tmp / "data", overrides={"num.partitions": str(PARTITIONS),
                                                   "kbroker.schema.registry.listener": url})
    broker.start(60)
    sizes = [int(s) for s in args.sizes.split(",")]
    res: dict[int, dict[bool, list[dict]]] = {s: {False: [], True: []} for s in sizes}
    try:
        print(f"load average at start: {os.getloadavg()}", flush=True)
        for r in range(args.rounds):
            for size in sizes:
                for validated in ((False, True) if r % 2 == 0 else (True, False)):
                    load = os.getloadavg()[0]
                    fig = run_one(broker, url, validated, size, args.codec, args.records)
                    res[size][validated].append(fig)
                    print(f"round {r + 1} {size:>5} B {'validated' if validated else 'plain    '} "
                          f"{fig['mb_per_s']:7.1f} MB/s  broker {fig['us_per_record']:5.2f} us/rec  load {load:.2f}",
                          flush=True)
    finally:
        broker.stop()
    print(f"load average at end: {os.getloadavg()}")
    for size in sizes:
        plain = statistics.median(f["us_per_record"] for f in res[size][False])
        valid = statistics.median(f["us_per_record"] for f in res[size][True])
        mbp = statistics.median(f["mb_per_s"] for f in res[size][False])
        mbv = statistics.median(f["mb_per_s"] for f in res[size][True])
        print(f"{size:>5} B: plain {plain:.2f} us/rec {mbp:.1f} MB/s, validated {valid:.2f} us/rec {mbv:.1f} MB/s; "
              f"validation costs {valid - plain:+.2f} us of broker CPU per record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
