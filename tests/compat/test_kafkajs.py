"""Compatibility scenario with kafkajs 2.2.4 (Node.js), driving tests/compat/js/scenario.js step by step.

kafkajs creates the topic, produces and inspects offsets/configs and deletes it; what it produced is
read back independently with confluent-kafka. kafkajs' consumer only exists as a group consumer, so
consuming with it waits for consumer-group support in the broker.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.compat.rdkafka_io import consume_all
from tests.compat.scenario import (
    PARTITIONS,
    TOPIC_CONFIG,
    Consumed,
    Record,
    base_timestamp,
    check_consumed,
    end_offsets,
    make_records,
    max_timestamp,
    offsets_for_time,
    probe_timestamp,
)
from tests.helpers import send_request

NODE = shutil.which("node")
JS_DIR = Path(__file__).parent / "js"
TOPIC = "compat-kafkajs"
DYNAMIC_TOPIC_CONFIG = 1
GROUP_APIS = {8: "OffsetCommit", 9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
              13: "LeaveGroup", 14: "SyncGroup"}

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture(scope="module")
def kafkajs_installed() -> None:
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        npm = shutil.which("npm")
        assert npm is not None, "node is installed but npm is not: cannot install kafkajs"
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"npm ci failed: {proc.stderr[-2000:]}"


def run_js(command: str, args: dict, timeout: float = 90) -> dict:
    proc = subprocess.run([NODE, "scenario.js", command, json.dumps(args)], cwd=JS_DIR, capture_output=True,
                          text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"scenario.js {command} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1])


def write_records(records: list[Record], path: Path) -> None:
    path.write_text(json.dumps([{"key": r.key.decode(), "value": r.value.decode(),
                                 "headers": [[k, v.decode()] for k, v in r.headers],
                                 "timestamp": r.timestamp} for r in records]))


def produce_with_kafkajs(bootstrap: str, records: list[Record], tmp_path: Path, *, idempotent: bool) -> None:
    path = tmp_path / "records.json"
    write_records(records, path)
    out = run_js("produce", {"bootstrap": bootstrap, "topic": TOPIC, "partitions": PARTITIONS,
                             "configs": TOPIC_CONFIG, "recordsFile": str(path), "idempotent": idempotent})
    assert out["created"] is True
    assert out["acks"] and all(a["errorCode"] == 0 for a in out["acks"]), out["acks"][:5]


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kafkajs_scenario(broker, tmp_path, kafkajs_installed, idempotent):
    records = make_records("kafkajs", base_ts=base_timestamp())
    produce_with_kafkajs(broker.bootstrap, records, tmp_path, idempotent=idempotent)

    # Read back with an independent client: kafkajs wrote keys, values, headers and timestamps intact.
    consumed = consume_all(broker.bootstrap, TOPIC, PARTITIONS, len(records))
    by_partition = check_consumed(records, consumed)
    ends = end_offsets(by_partition)

    probe, late = probe_timestamp(by_partition), max_timestamp(by_partition) + 1
    out = run_js("inspect", {"bootstrap": broker.bootstrap, "topic": TOPIC, "timestamps": [probe, late]})
    assert {o["partition"]: (int(o["low"]), int(o["high"]), int(o["offset"])) for o in out["offsets"]} == \
        {p: (0, end, end) for p, end in ends.items()}
    want = offsets_for_time(by_partition, probe)
    # kafkajs substitutes the high watermark when no record is that recent.
    assert {o["partition"]: int(o["offset"]) for o in out["byTimestamp"][str(probe)]} == \
        {p: (ends[p] if o is None else o) for p, o in want.items()}
    assert {o["partition"]: int(o["offset"]) for o in out["byTimestamp"][str(late)]} == ends

    [resource] = out["configs"]["resources"]
    assert (resource["errorCode"], resource["resourceName"]) == (0, TOPIC)
    entries = {e["configName"]: e for e in resource["configEntries"]}
    for name, value in TOPIC_CONFIG.items():
        assert entries[name]["configValue"] == value
        assert entries[name]["configSource"] == DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"]["configValue"] == "delete"
    [topic_md] = out["metadata"]["topics"]
    assert sorted(p["partitionId"] for p in topic_md["partitions"]) == list(range(PARTITIONS))

    out = run_js("delete", {"bootstrap": broker.bootstrap, "topic": TOPIC})
    assert TOPIC not in out["topicsAfter"]


def _missing_group_apis(bootstrap: str) -> list[str]:
    resp = send_request(bootstrap, ApiVersionsRequest(version=0), 0)
    have = {k.api_key for k in resp.api_keys}
    return [name for key, name in GROUP_APIS.items() if key not in have]


def test_kafkajs_group_consumer(broker, tmp_path, kafkajs_installed):
    assert not _missing_group_apis(broker.bootstrap)
    records = make_records("kafkajs", 3000, base_ts=base_timestamp())
    produce_with_kafkajs(broker.bootstrap, records, tmp_path, idempotent=False)
    out = run_js("consume", {"bootstrap": broker.bootstrap, "topic": TOPIC, "expected": len(records),
                             "timeoutMs": 30000})
    consumed = [Consumed(c["partition"], c["offset"], c["key"].encode(), c["value"].encode(),
                         tuple((k, v.encode()) for k, v in c["headers"]), c["timestamp"]) for c in out["consumed"]]
    check_consumed(records, consumed)
