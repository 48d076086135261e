"""Compatibility scenario with kafkajs 2.2.4 (Node.js), driving tests/compat/js/scenario.js step by step.

kafkajs creates the topic, produces the scenario's 10,000 keyed records with headers (plain and
idempotent), consumes every one of them back with its group consumer (kafkajs has no other kind:
JoinGroup/SyncGroup/Heartbeat/OffsetCommit/LeaveGroup against this broker) and checks them with the
shared checker, reads the group's committed offsets, inspects offsets/offsets by timestamp/configs
and deletes the topic. Needs node and kafkajs (`make tools`): skipped without them locally, failed
in CI (tests.helpers.tools.require_tool).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

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
from tests.helpers.tools import require_tool

NODE = shutil.which("node")
JS_DIR = Path(__file__).parent / "js"
TOPIC = "compat-kafkajs"
GROUP = "compat-kafkajs-group"
DYNAMIC_TOPIC_CONFIG = 1
CONSUME_TIMEOUT_MS = 90_000  # 10,000 records normally take a few seconds; generous for a loaded machine


@functools.cache
def _kafkajs_problem() -> str:
    """Why kafkajs cannot be used ("" when it can); installs it with `npm ci` when only that is missing."""
    if (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        return ""
    npm = shutil.which("npm")
    if npm is None:
        return f"{JS_DIR / 'node_modules'} has no kafkajs and npm is not on PATH to install it (run `make tools`)"
    proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        return f"`npm ci` in {JS_DIR} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return ""


def require_kafkajs() -> None:
    require_tool("node", NODE is not None, "node not on PATH (apt-get install nodejs)")
    problem = _kafkajs_problem()
    require_tool("kafkajs", not problem, problem)


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


def consume_with_kafkajs(bootstrap: str, expected: int) -> tuple[list[Consumed], dict[int, int]]:
    """What kafkajs' group consumer delivered (all of it, until `expected`), and the offsets the group committed."""
    out = run_js("consume", {"bootstrap": bootstrap, "topic": TOPIC, "groupId": GROUP, "expected": expected,
                             "timeoutMs": CONSUME_TIMEOUT_MS}, timeout=CONSUME_TIMEOUT_MS / 1000 + 60)
    consumed = [Consumed(c["partition"], c["offset"], None if c["key"] is None else c["key"].encode(),
                         None if c["value"] is None else c["value"].encode(),
                         tuple((k, v.encode()) for k, v in c["headers"]), c["timestamp"]) for c in out["consumed"]]
    [topic] = [t for t in out["committed"] if t["topic"] == TOPIC]
    return consumed, {p["partition"]: int(p["offset"]) for p in topic["partitions"]}


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kafkajs_scenario(broker, tmp_path, idempotent):
    require_kafkajs()
    records = make_records("kafkajs", base_ts=base_timestamp())
    produce_with_kafkajs(broker.bootstrap, records, tmp_path, idempotent=idempotent)

    # kafkajs reads back all it wrote: keys, values, headers, timestamps, contiguous offsets, order.
    consumed, committed = consume_with_kafkajs(broker.bootstrap, len(records))
    by_partition = check_consumed(records, consumed)
    ends = end_offsets(by_partition)
    # Its auto-commit stored the position after the last record of every partition.
    assert committed == ends

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
