"""The Kafka tool set as ``kbroker`` subcommands (issue 18, item 2) against a real broker: topics,
configs, console-producer, console-consumer, groups delete, get-offsets, perf and --version.

Each tool's ``main()`` runs in-process for its happy path and its failure paths (unknown topic or
group, bad bootstrap, missing file): a failure is exactly one line on stderr, exit status 1, no
traceback. One subprocess per family checks the ``python -m cli`` entry point.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from cli import configs, console_consumer, console_producer, get_offsets, groups, perf, topics
from tests.helpers.broker_proc import REPO_ROOT, free_port
from tests.integration.test_groups_clients import unique

Main = Callable[..., int]


def ok(main: Main, *argv: str, **kw: object) -> str:
    out = io.StringIO()
    assert main(list(argv), out, **kw) == 0
    return out.getvalue()


def fails(capsys: pytest.CaptureFixture[str], main: Main, *argv: str, expect: str, **kw: object) -> str:
    """Run a tool that must fail: exit status 1 and one stderr line (containing ``expect``)."""
    capsys.readouterr()
    assert main(list(argv), io.StringIO(), **kw) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert expect in lines[0], err
    return lines[0]


def dead_bootstrap() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there: connection refused


def test_topics(broker, capsys, tmp_path) -> None:
    b = ("-b", broker.bootstrap)
    topic = unique("tt")
    assert ok(topics.main, *b, "create", "--topic", topic, "--partitions", "2", "--config",
              "retention.ms=123456") == f"Created topic {topic}.\n"
    # --bootstrap-server after the action works too.
    assert topic in ok(topics.main, "list", "--bootstrap-server", broker.bootstrap).split()
    ok(topics.main, *b, "alter", "--topic", topic, "--partitions", "3")
    text = ok(topics.main, "describe", "--topic", topic, *b)
    head, *parts = text.splitlines()
    assert head.startswith(f"Topic: {topic}\tTopicId: ") and "PartitionCount: 3" in head
    assert "ReplicationFactor: 1" in head and "Configs: retention.ms=123456" in head
    assert [p.split("\t")[2:] for p in parts] == [[f"Partition: {i}", "Leader: 1", "Replicas: 1", "Isr: 1"]
                                                  for i in range(3)]
    fails(capsys, topics.main, *b, "create", "--topic", topic, expect="TOPIC_ALREADY_EXISTS")
    fails(capsys, topics.main, *b, "describe", "--topic", "no-such-topic", expect="'no-such-topic' does not exist")
    fails(capsys, topics.main, *b, "alter", "--topic", "no-such-topic", "--partitions", "4", expect="does not exist")
    fails(capsys, topics.main, *b, "alter", "--topic", topic, "--partitions", "1", expect="INVALID_PARTITIONS")
    assert ok(topics.main, *b, "delete", "--topic", topic) == f"Deleted topic {topic}.\n"
    deadline = time.monotonic() + 30
    while topic in ok(topics.main, *b, "list").split() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in ok(topics.main, *b, "list").split()
    fails(capsys, topics.main, *b, "delete", "--topic", topic, expect="does not exist")
    fails(capsys, topics.main, "-b", dead_bootstrap(), "list", expect="cannot connect to the bootstrap server")
    fails(capsys, topics.main, *b, "list", "--command-config", str(tmp_path / "none.properties"),
          expect="file not found")
    # A --command-config file is handed to the client (a bad property is reported, not ignored).
    props = tmp_path / "client.properties"
    props.write_text("client.id=kbroker-tools-test\n")
    assert topic not in ok(topics.main, *b, "list", "--command-config", str(props))
    props.write_text("no.such.property=1\n")
    fails(capsys, topics.main, *b, "list", "--command-config", str(props), expect="no.such.property")


def test_configs(broker, capsys) -> None:
    b = ("-b", broker.bootstrap)
    topic = unique("ct")
    ok(topics.main, *b, "create", "--topic", topic)
    ok(configs.main, *b, "alter", "--entity-type", "topics", "--entity-name", topic,
       "--add-config", "cleanup.policy=[compact,delete],max.message.bytes=2000")
    text = ok(configs.main, "describe", "--topic", topic, *b)
    assert text.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    assert "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:" in text
    assert "  max.message.bytes=2000 " in text
    ok(configs.main, *b, "alter", "--topic", topic, "--delete-config", "max.message.bytes")
    assert "max.message.bytes" not in ok(configs.main, *b, "describe", "--topic", topic)
    assert "segment.bytes=" in ok(configs.main, *b, "describe", "--topic", topic, "--all")
    # Brokers: one broker's dynamic config, and the cluster-wide default.
    ok(configs.main, *b, "alter", "--broker", "1", "--add-config", "log.retention.ms=86400000")
    assert "  log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" in ok(
        configs.main, *b, "describe", "--entity-type", "brokers", "--entity-name", "1")
    ok(configs.main, *b, "alter", "--entity-type", "brokers", "--entity-default", "--add-config",
       "log.retention.ms=3600000")
    text = ok(configs.main, *b, "describe", "--broker-defaults")
    assert "Default configs for brokers in the cluster are:" in text and "log.retention.ms=3600000" in text
    ok(configs.main, *b, "alter", "--broker-defaults", "--delete-config", "log.retention.ms")
    assert "log.retention.ms" not in ok(configs.main, *b, "describe", "--broker-defaults")
    fails(capsys, configs.main, *b, "describe", "--topic", "no-such-topic", expect="UNKNOWN_TOPIC_OR_PART")
    fails(capsys, configs.main, *b, "alter", "--topic", "no-such-topic", "--add-config", "retention.ms=1",
          expect="does not exist")
    fails(capsys, configs.main, *b, "alter", "--topic", topic, "--add-config", "bogus=1", expect="INVALID_CONFIG")
    fails(capsys, configs.main, *b, "alter", "--broker", "1", "--add-config", "log.cleaner.enable=false",
          expect="Cannot update these configs dynamically")
    fails(capsys, configs.main, *b, "describe", "--broker", "7", expect="broker 7 is not in the cluster")
    fails(capsys, configs.main, *b, "alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1",
          expect="--entity-name or --entity-default is required")
    fails(capsys, configs.main, "-b", dead_bootstrap(), "describe", "--topic", topic, expect="cannot connect")


def test_console_producer_consumer_and_get_offsets(broker, capsys, tmp_path) -> None:
    b = ("-b", broker.bootstrap)
    topic = unique("cc")
    ok(topics.main, *b, "create", "--topic", topic)
    # Kafka's line format with parse.headers and parse.key: headers TAB key TAB value.
    ok(console_producer.main, *b, "--topic", topic, "--property", "parse.key=true", "--property",
       "parse.headers=true", stdin=io.StringIO("h1:v1,h2\tk1\tone\nh3:x\tk2\ttwo\n"))
    lines = tmp_path / "lines.txt"
    lines.write_text("k3:three\nk4:four\n")
    ok(console_producer.main, "--topic", topic, "--file", str(lines), "--property", "parse.key=true",
       "--property", "key.separator=:", "--transactional-id", unique("txn"), "--acks", "all", *b)
    out = ok(console_consumer.main, *b, "--topic", topic, "--from-beginning", "--max-messages", "4",
             "--isolation-level", "read_committed", "--property", "print.key=true", "--property",
             "print.headers=true", "--property", "print.timestamp=true", "--property", "print.partition=true",
             "--property", "print.offset=true")
    rows = [ln.split("\t") for ln in out.splitlines()]
    assert [r[1:] for r in rows] == [
        ["Partition:0", "Offset:0", "h1:v1,h2:null", "k1", "one"],
        ["Partition:0", "Offset:1", "h3:x", "k2", "two"],
        ["Partition:0", "Offset:2", "NO_HEADERS", "k3", "three"],
        ["Partition:0", "Offset:3", "NO_HEADERS", "k4", "four"]]
    assert all(re.fullmatch(r"CreateTime:\d{13}", r[0]) for r in rows)
    group = unique("ccg")
    first = json.loads(ok(console_consumer.main, *b, "--topic", topic, "--from-beginning", "--group", group,
                          "--max-messages", "1", "--formatter", "json"))
    assert (first["key"], first["value"], first["headers"], first["offset"]) == ("k1", "one", [["h1", "v1"], ["h2", None]], 0)
    # The group committed offset 1: the same group resumes there; --timeout-ms ends the run.
    rest = ok(console_consumer.main, *b, "--topic", topic, "--group", group, "--timeout-ms", "3000")
    assert rest.splitlines() == ["two", "three", "four"]
    fails(capsys, console_consumer.main, *b, "--topic", "no-such-topic", "--timeout-ms", "100",
          expect="'no-such-topic' does not exist")
    fails(capsys, console_producer.main, *b, "--topic", topic, "--file", str(tmp_path / "missing.txt"),
          expect="file not found")
    fails(capsys, console_producer.main, *b, "--topic", topic, "--property", "parse.key=true",
          stdin=io.StringIO("no separator\n"), expect="no key separator found on line 1")
    fails(capsys, console_consumer.main, "-b", dead_bootstrap(), "--topic", topic, expect="cannot connect")
    fails(capsys, console_producer.main, "-b", dead_bootstrap(), "--topic", topic, stdin=io.StringIO("x\n"),
          expect="cannot connect")

    # get-offsets: 4 records and a commit marker (offset 4) in partition 0.
    assert ok(get_offsets.main, *b, "--topic", topic) == f"{topic}:0:5\n"
    assert ok(get_offsets.main, *b, "--topic", topic, "--time", "-2") == f"{topic}:0:0\n"
    assert ok(get_offsets.main, *b, "--topic", topic, "--time", "earliest", "--partitions", "0") == f"{topic}:0:0\n"
    assert ok(get_offsets.main, *b, "--topic", topic, "--time", str(int(rows[0][0].split(":")[1]))) == f"{topic}:0:0\n"
    assert ok(get_offsets.main, *b, "--topic", topic, "--time", str(2**50)) == f"{topic}:0:-1\n"
    assert f"{topic}:0:5" in ok(get_offsets.main, *b, "--exclude-internal-topics").splitlines()
    fails(capsys, get_offsets.main, *b, "--topic", "no-such-topic", expect="does not exist")
    fails(capsys, get_offsets.main, *b, "--topic", topic, "--partitions", "3", expect="has no partition 3")
    fails(capsys, get_offsets.main, "-b", dead_bootstrap(), "--topic", topic, expect="cannot connect")


def test_groups_delete(broker, capsys) -> None:
    b = ("-b", broker.bootstrap)
    topic, group = unique("gd"), unique("gdg")
    ok(console_producer.main, *b, "--topic", topic, stdin=io.StringIO("a\n"))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while c.poll(0.2) is None and time.monotonic() < deadline:
            pass
        c.commit(asynchronous=False)
        fails(capsys, groups.main, *b, "delete", group, expect="NON_EMPTY_GROUP")
    finally:
        c.close()
    assert ok(groups.main, "delete", group, *b) == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    fails(capsys, groups.main, *b, "delete", group, expect="GROUP_ID_NOT_FOUND")
    fails(capsys, groups.main, *b, "describe", group, expect="does not exist")
    fails(capsys, groups.main, "-b", dead_bootstrap(), "list", expect="cannot connect")


SUMMARY = re.compile(r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                     r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.")


def test_perf(broker, capsys) -> None:
    b = ("-b", broker.bootstrap)
    topic = unique("pf")
    ok(topics.main, *b, "create", "--topic", topic, "--partitions", "2")
    out = ok(perf.main, *b, "produce", "--topic", topic, "--num-records", "3000", "--record-size", "200",
             "--throughput", "-1", "--producer-props", "linger.ms=5")
    m = SUMMARY.fullmatch(out.splitlines()[-1])
    assert m and m.group(1) == "3000", out
    out = ok(perf.main, "consume", *b, "--topic", topic, "--messages", "3000")
    header, line = out.splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg")
    fields = line.split(", ")
    assert fields[4] == "3000" and abs(float(fields[2]) - 3000 * 200 / 2**20) < 0.001
    # Asking for more than there is ends at --timeout: the summary, then one error line.
    fails(capsys, perf.main, *b, "consume", "--topic", topic, "--num-records", "5000", "--timeout", "2",
          expect="Exiting before consuming the expected number of messages")
    fails(capsys, perf.main, *b, "produce", "--topic", "no-such-topic-x", "--num-records", "1",
          "--producer-props", "allow.auto.create.topics=false", expect="does not exist")
    fails(capsys, perf.main, "-b", dead_bootstrap(), "produce", "--topic", topic, "--num-records", "1",
          expect="cannot connect")


def _kbroker(*argv: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def test_entry_point(broker) -> None:
    """``python -m cli <family> ...`` for every family (run side by side to keep the cost low)."""
    b = ("-b", broker.bootstrap)
    topic = unique("ep")
    ok(topics.main, *b, "create", "--topic", topic)
    ok(console_producer.main, *b, "--topic", topic, stdin=io.StringIO("x\ny\n"))
    silent = socket.socket()  # accepts connections (backlog) but never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        runs = {
            "version": (_kbroker("--version"), None),
            "topics": (_kbroker("topics", "list", *b), None),
            "configs": (_kbroker("configs", "describe", "--topic", topic, *b), None),
            "producer": (_kbroker("console-producer", "--topic", topic, *b), "z\n"),
            "consumer": (_kbroker("console-consumer", *b, "--topic", topic, "--from-beginning",
                                  "--max-messages", "2"), None),
            "get-offsets": (_kbroker("get-offsets", "--topic", topic, *b), None),
            "groups": (_kbroker("groups", "list", *b), None),
            "perf": (_kbroker("perf", "produce", *b, "--topic", topic, "--num-records", "10"), None),
            "refused": (_kbroker("topics", "describe", "-b", dead_bootstrap()), None),
            "silent": (_kbroker("topics", "list", "-b", f"127.0.0.1:{silent.getsockname()[1]}",
                                env={"KBROKERTEST_TOOL_TIMEOUT_S": "2"}), None),
        }
        results = {name: p.communicate(stdin, timeout=120) + (p.returncode,) for name, (p, stdin) in runs.items()}
    finally:
        silent.close()
    for name, (_, err, code) in results.items():
        assert "Traceback" not in err, (name, err)
        assert code == (1 if name in ("refused", "silent") else 0), (name, err)
    assert re.fullmatch(r"kbroker \S+\n", results["version"][0])
    assert topic in results["topics"][0].split()
    assert results["configs"][0].startswith(f"Dynamic configs for topic {topic} are:")
    assert results["consumer"][0] == "x\ny\n"
    # x, y, then the concurrent console-producer and perf runs: 2 to 13 records.
    m = re.fullmatch(rf"{topic}:0:(\d+)\n", results["get-offsets"][0])
    assert m and 2 <= int(m.group(1)) <= 13
    assert results["groups"][0].startswith("GROUP")
    assert SUMMARY.fullmatch(results["perf"][0].splitlines()[-1])
    for name in ("refused", "silent"):
        err = results[name][1].strip().splitlines()
        assert len(err) == 1 and err[0].startswith("kbroker topics "), (name, err)
    assert "cannot connect to the bootstrap server" in results["refused"][1]
    assert "cannot get metadata from the cluster within 2 s" in results["silent"][1]
