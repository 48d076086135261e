"""Compatibility scenario with kcat (librdkafka 2.0 as Debian ships it): produce, consume, query, metadata.

kcat has no admin commands: the topic is auto-created by the first produce (num.partitions=3 on this
broker), and the confluent-kafka AdminClient reads its config and deletes it. Without kcat on PATH
the test is skipped locally and fails in CI (tests.helpers.tools.require_tool).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.compat.scenario import (
    PARTITIONS,
    Consumed,
    Record,
    check_consumed,
    end_offsets,
    make_records,
    max_timestamp,
    offsets_for_time,
)
from tests.helpers.tools import require_tool

KCAT = shutil.which("kcat")

TOPIC = "compat-kcat"
TIMEOUT = 60
# kcat's -H applies the same headers to every message it produces.
HEADERS = (("src", b"kcat"), ("empty", b""))
FORMAT = r"%p\t%o\t%T\t%k\t%s\t%h\n"


def kcat(bootstrap: str, *args: str, timeout: float = TIMEOUT) -> str:
    proc = subprocess.run([KCAT, "-b", bootstrap, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def produce(bootstrap: str, records: list[Record], path: Path) -> None:
    path.write_bytes(b"".join(r.key + b":" + r.value + b"\n" for r in records))
    header_args = [a for k, v in HEADERS for a in ("-H", f"{k}={v.decode()}")]
    kcat(bootstrap, "-P", "-t", TOPIC, "-K:", *header_args, "-X", "acks=all", "-l", str(path))


def parse_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    if not text:
        return ()
    return tuple((k, v.encode()) for k, v in (item.split("=", 1) for item in text.split(",")))


def test_kcat_scenario(broker_factory, tmp_path):
    require_tool("kcat", KCAT is not None, "kcat not on PATH (apt-get install kcat, or `make tools` as root)")
    broker = broker_factory({"num.partitions": str(PARTITIONS)})
    bs = broker.bootstrap
    records = [dataclasses.replace(r, headers=HEADERS) for r in make_records("kcat", with_headers=False)]
    half = len(records) // 2

    # Two waves with a gap between them, so a lookup by timestamp has a boundary to find.
    t_start = int(time.time() * 1000)
    produce(bs, records[:half], tmp_path / "wave1.txt")
    time.sleep(0.05)
    t_mid = int(time.time() * 1000)
    time.sleep(0.05)
    produce(bs, records[half:], tmp_path / "wave2.txt")
    t_end = int(time.time() * 1000)

    meta = json.loads(kcat(bs, "-L", "-J", "-t", TOPIC))
    [topic] = meta["topics"]
    assert topic["topic"] == TOPIC and "error" not in topic
    assert sorted(p["partition"] for p in topic["partitions"]) == list(range(PARTITIONS))
    assert all(p["leader"] == meta["controllerid"] for p in topic["partitions"])

    out = kcat(bs, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", FORMAT)
    consumed = []
    for line in out.splitlines():
        p, o, ts, k, v, h = line.split("\t")
        consumed.append(Consumed(int(p), int(o), k.encode(), v.encode(), parse_headers(h), int(ts)))
    by_partition = check_consumed(records, consumed)
    assert all(t_start - 1000 <= c.timestamp <= t_end + 1000 for c in consumed)
    wave = {r.key: r.index < half for r in records}
    assert all(wave[c.key] == (c.timestamp < t_mid) for c in consumed), "timestamps do not separate the waves"

    def query(ts: int) -> dict[int, int]:
        args = [a for p in range(PARTITIONS) for a in ("-t", f"{TOPIC}:{p}:{ts}")]
        res = json.loads(kcat(bs, "-Q", "-J", *args))[TOPIC]
        return {int(p): v["offset"] for p, v in res.items() if p != "topic"}

    ends = end_offsets(by_partition)
    assert query(-2) == dict.fromkeys(ends, 0)  # -2 = earliest
    assert query(-1) == ends  # -1 = latest
    want = offsets_for_time(by_partition, t_mid)
    assert query(t_mid) == {p: (-1 if o is None else o) for p, o in want.items()}
    assert all(want[p] == sum(1 for c in rows if wave[c.key]) for p, rows in by_partition.items())
    assert query(max_timestamp(by_partition) + 1) == dict.fromkeys(ends, -1)

    # A partition consumed on its own from an absolute offset.
    tail = kcat(bs, "-C", "-t", TOPIC, "-p", "1", "-o", str(ends[1] - 3), "-e", "-q", "-f", "%o\\n")
    assert tail.split() == [str(o) for o in range(ends[1] - 3, ends[1])]

    admin = AdminClient({"bootstrap.servers": bs})
    resource = ConfigResource(ResourceType.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["cleanup.policy"].value == "delete"
    admin.delete_topics([TOPIC], operation_timeout=10)[TOPIC].result(TIMEOUT)
    meta = json.loads(kcat(bs, "-L", "-J"))
    assert TOPIC not in [t["topic"] for t in meta["topics"]]
