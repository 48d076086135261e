"""The tools as Kafka users type them (issue 33, items 5 to 9), against a real broker.

5. Kafka's flag forms beside the subcommands: ``topics --create|--list|--describe|--alter|--delete``,
   ``--if-not-exists``/``--if-exists``, ``configs --describe|--alter`` (every topic without a name),
   ``groups --list [--state]|--describe|--reset-offsets --group G|--all-groups``, ``--topic t:0,1``,
   ``--all-topics``, ``--shift-by``, ``transactions describe --transactional-id``, ``find-hanging``,
   ``get-offsets --topic-partitions``, ``dump-log --files``.
6. ``-b``/``--bootstrap-server`` and ``--command-config`` in any position for every tool, and a bounded
   give-up with one line on a broker that accepts connections but never answers.
7. ``perf produce`` creates the topic as a producer does and takes ``--producer.config`` /
   ``--producer-props`` (bootstrap.servers there, Java client names).
8. No tracebacks: ``dump-log ... | head``, properties files in ISO-8859-1, a log dir that is a file.
9. ``acls list`` without an authorizer: SECURITY_DISABLED; ``leader-election --all-topic-partitions``
   says what it did; ``reset-offsets`` warns when it clamps; an invalid topic name is called invalid.
"""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from cli import (
    acls,
    configs,
    console_producer,
    get_offsets,
    groups,
    leader_election,
    perf,
    topics,
    transactions,
)
from tests.helpers.broker_proc import REPO_ROOT, free_port
from tests.integration.test_cli_tools import fails, ok
from tests.integration.test_groups_clients import unique


def _cli(*argv: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0, size: int = 10) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=(f"{i:08d}" + "x" * size).encode(), partition=partition)
    assert p.flush(30) == 0


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import KafkaError, KafkaException

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
                return
            except KafkaException as e:
                # The first group of a fresh broker: __consumer_offsets is still being created or loaded.
                retry = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                         KafkaError.COORDINATOR_NOT_AVAILABLE)
                assert e.args[0].code() in retry and time.monotonic() < deadline, e
                time.sleep(0.2)
    finally:
        c.close()


def test_kafka_flag_forms(broker, capsys, tmp_path) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    t, other = unique("kf"), unique("kf2")
    assert ok(topics.main, *b, "--create", "--topic", t, "--partitions", "3") == f"Created topic {t}.\n"
    assert ok(topics.main, "--create", "--topic", t, "--if-not-exists", *b) == ""  # exists: nothing to do
    ok(topics.main, *b, "--create", "--topic", other)
    assert {t, other} <= set(ok(topics.main, *b, "--list").split())
    ok(topics.main, *b, "--alter", "--topic", t, "--partitions", "4")
    assert "PartitionCount: 4" in ok(topics.main, *b, "--describe", "--topic", t)
    assert ok(topics.main, *b, "--delete", "--topic", unique("none"), "--if-exists") == ""

    ok(configs.main, *b, "--alter", "--entity-type", "topics", "--entity-name", t, "--add-config", "retention.ms=5000")
    text = ok(configs.main, *b, "--describe", "--entity-type", "topics")  # no name: every topic
    assert f"Dynamic configs for topic {t} are:\n  retention.ms=5000 " in text
    assert f"Dynamic configs for topic {other} are:" in text
    assert "Dynamic configs for broker 1 are:" in ok(configs.main, *b, "--describe", "--entity-type", "brokers")

    _produce(broker.bootstrap, t, 10, partition=0)
    _produce(broker.bootstrap, t, 6, partition=1)
    group = unique("g")
    _commit(broker.bootstrap, group, t, {0: 8, 1: 6})
    listed = ok(groups.main, *b, "--list", "--state", "empty")
    assert re.search(rf"^{group} +classic +\S* *Empty$", listed, re.M), listed
    assert group not in ok(groups.main, *b, "--list", "--state", "Stable")
    assert f"Group {group} (classic) is Empty" in ok(groups.main, *b, "--describe", "--group", group)
    text = ok(groups.main, *b, "--reset-offsets", "--group", group, "--topic", f"{t}:0", "--shift-by", "-3",
              "--execute")
    assert re.search(rf"^{group} +{t} +0 +5$", text, re.M) and f"{t}  1" not in text, text
    text = ok(groups.main, *b, "--reset-offsets", "--all-groups", "--all-topics", "--to-earliest", "--dry-run")
    assert re.search(rf"^{group} +{t} +0 +0$", text, re.M) and re.search(rf"^{group} +{t} +1 +0$", text, re.M)
    assert "(dry run" in text
    assert re.search(rf"^{group} +{t} +0 +5 ", ok(groups.main, *b, "--describe", "--all-groups"), re.M)

    tid = unique("tx")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(other, b"v")
    p.commit_transaction(30)
    capsys.readouterr()
    assert transactions.main(["describe", "--transactional-id", tid, *b]) == 0
    assert re.search(rf"^\d+ +{tid} +\d+ +\d+ +CompleteCommit ", capsys.readouterr().out, re.M)
    assert transactions.main([*b, "find-hanging", "--topic", t, "--max-transaction-timeout", "0"]) == 0
    assert capsys.readouterr().out.split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                               "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]

    assert ok(get_offsets.main, *b, "--topic-partitions", f"{t}:0-2,{other}") == (
        f"{other}:0:2\n{t}:0:10\n{t}:1:6\n" if other < t else f"{t}:0:10\n{t}:1:6\n{other}:0:2\n")  # record + marker
    fails(capsys, get_offsets.main, *b, "--topic-partitions", "no-such-.*", expect="Could not match any")

    segment = broker.data_dir / f"{t}-1" / "00000000000000000000.log"
    dump = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--files", str(segment)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert f"Dumping {segment}" in dump.stdout and "lastOffset: 5 count: 6" in dump.stdout


def _silent_listener() -> socket.socket:
    s = socket.socket()  # accepts connections (backlog) but never answers
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


# One invocation per tool (cluster is no client): the connection options before the action here,
# after it in the second run.
_TOOL_RUNS = {
    "topics": ["list"], "configs": ["describe", "--topic", "t"], "console-producer": ["--topic", "t"],
    "console-consumer": ["--topic", "t"], "groups": ["list"], "transactions": ["list"], "get-offsets": [],
    "perf": ["produce", "--topic", "t", "--num-records", "1"], "features": ["describe"], "users": ["list"],
    "acls": ["list"], "leader-election": ["--election-type", "preferred", "--all-topic-partitions"],
    "reassign-partitions": ["--list"], "healthcheck": [],
}


def test_every_tool_takes_connection_options_anywhere_and_gives_up_on_a_silent_broker(broker, tmp_path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\n")
    silent = _silent_listener()
    target = f"127.0.0.1:{silent.getsockname()[1]}"
    try:
        started = time.monotonic()
        runs = {}
        for tool, action in _TOOL_RUNS.items():
            conn = ["-b", target, "--command-config", str(props)]
            for where, argv in (("before", [*conn, *action]), ("after", [*action, *conn])):
                runs[(tool, where)] = _cli(tool, *argv, env={"KBROKERTEST_TOOL_TIMEOUT_S": "2"}, stdin="x\n")
        results = {k: (*p.communicate(timeout=120), p.returncode) for k, p in runs.items()}
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    for (tool, where), (_out, err, code) in results.items():
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and "Traceback" not in err, (tool, where, code, err)
        assert lines[0].startswith(f"kbroker {tool}"), (tool, where, err)
    # Every run is bounded: 2 s per request (4 requests' worth for a whole groups/transactions run),
    # 5 s for healthcheck; all ran side by side.
    assert elapsed < 60, elapsed
    assert "no answer" in results[("features", "after")][1], results[("features", "after")][1]
    assert "no answer" in results[("transactions", "before")][1]
    # The same positions against a real broker, for the tools that lacked them.
    b = ["--bootstrap-server", broker.bootstrap]
    good = {"transactions": _cli("transactions", "--command-config", str(props), "list", "-b", broker.bootstrap),
            "features": _cli("features", "describe", *b, "--command-config", str(props)),
            "healthcheck": _cli("healthcheck", "-b", broker.bootstrap, "--command-config", str(props))}
    for name, p in good.items():
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (name, err)
    refused = _cli("features", "describe", "-b", f"127.0.0.1:{free_port()}")
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 1 and "cannot connect to 127.0.0.1:" in err and "refused" in err, err


def test_perf_produce_creates_the_topic_and_takes_kafka_producer_configs(broker, capsys, tmp_path) -> None:
    topic = unique("perf-new")
    conf = tmp_path / "producer.properties"
    # A producer.config written for Kafka's Java tool: its bootstrap.servers, serializers, buffer.memory.
    conf.write_text(f"bootstrap.servers={broker.bootstrap}\n"
                    "key.serializer=org.apache.kafka.common.serialization.ByteArraySerializer\n"
                    "buffer.memory=33554432\nlinger.ms=1\n")
    capsys.readouterr()
    text = ok(perf.main, "produce", "--topic", topic, "--num-records", "20", "--throughput", "-1",
              "--producer.config", str(conf), "--producer-props", "acks=1", "client.id=perf-test")
    assert text.splitlines()[-1].startswith("20 records sent")
    assert "ignoring key.serializer" in capsys.readouterr().err
    assert ok(get_offsets.main, "-b", broker.bootstrap, "--topic", topic) == f"{topic}:0:20\n"
    # --producer-props alone, bootstrap.servers there (Kafka's tool has no other way).
    topic2 = unique("perf-props")
    ok(perf.main, "produce", "--topic", topic2, "--num-records", "5", "--producer-props",
       f"bootstrap.servers={broker.bootstrap}")
    assert ok(get_offsets.main, "-b", broker.bootstrap, "--topic", topic2) == f"{topic2}:0:5\n"
    fails(capsys, perf.main, "produce", "--topic", topic2, "--num-records", "1", "--producer-props", "acks",
          expect="invalid property 'acks'")


def test_no_tracebacks(broker, capsys, tmp_path) -> None:
    topic = unique("pipe")
    _produce(broker.bootstrap, topic, 3000, size=100)  # --print-data output well over a pipe buffer
    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    dump = subprocess.Popen([sys.executable, "-m", "cli", "dump-log", "--print-data", str(segment)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert dump.stdout is not None and dump.stdout.readline().startswith(b"Dumping")
    dump.stdout.close()  # `| head -1`
    err = dump.stderr.read().decode() if dump.stderr else ""
    assert dump.wait(timeout=60) == 0 and err == "", err

    # Properties files are ISO-8859-1, as Kafka reads them: a client config and a broker config.
    latin = tmp_path / "client.properties"
    latin.write_bytes("# client caf\xe9\nclient.id=caf\xe9\n".encode("iso-8859-1"))
    assert topic in ok(topics.main, "-b", broker.bootstrap, "list", "--command-config", str(latin)).split()
    port = free_port()
    server = tmp_path / "server.properties"
    server.write_bytes((f"# r\xe9pertoire\nnode.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                        f"log.dirs={tmp_path / 'data-latin'}\n").encode("iso-8859-1"))
    serve = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(server)], cwd=REPO_ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _cli("healthcheck", "-b", f"127.0.0.1:{port}").wait(timeout=30) != 0:
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.stderr else ""
            time.sleep(0.2)
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=60)
    assert serve.returncode == 0 and "Traceback" not in err, err

    # A log dir that is a plain file: one line, naming it.
    plain = tmp_path / "not-a-dir"
    plain.write_text("x")
    out = subprocess.run([sys.executable, "-m", "broker", "serve", "--override", f"log.dirs={plain}",
                          "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    assert lines[0] == f"kbroker: {plain} is not a readable log directory (it is a file; log.dirs={plain})"


def test_acls_leader_election_reset_warnings_and_invalid_names(broker, capsys) -> None:
    b = ("-b", broker.bootstrap)
    capsys.readouterr()
    assert acls.main([*b, "list"]) == 1
    assert capsys.readouterr().err.strip() == ("kbroker acls: describe ACLs: No Authorizer is configured. "
                                               "(SECURITY_DISABLED)")

    topic = unique("le")
    ok(topics.main, *b, "create", "--topic", topic, "--partitions", "2")
    text = ok(leader_election.main, *b, "--election-type", "preferred", "--all-topic-partitions")
    assert text.startswith("Valid replica already elected for partitions ") and f"{topic}-0, {topic}-1" in text

    _produce(broker.bootstrap, topic, 4, partition=0)
    group = unique("g")
    _commit(broker.bootstrap, group, topic, {0: 2, 1: 0})
    capsys.readouterr()
    text = ok(groups.main, *b, "reset-offsets", group, "--topic", topic, "--to-offset", "100", "--execute")
    err = capsys.readouterr().err
    assert f"WARN New offset (100) is higher than latest offset for topic partition {topic}-0. Value will be set to 4" in err
    assert f"topic partition {topic}-1. Value will be set to 0" in err
    assert re.search(rf"^{group} +{topic} +0 +4$", text, re.M)
    ok(groups.main, *b, "reset-offsets", group, "--topic", topic, "--shift-by", "-10", "--execute")
    assert f"WARN New offset (-6) is lower than earliest offset for topic partition {topic}-0. Value will be set to 0" in (
        capsys.readouterr().err)

    bad = "no good!"
    invalid = f"Topic name is invalid: '{bad}' contains one or more characters other than ASCII alphanumerics"
    for main, argv in ((topics.main, ["create", "--topic", bad]), (topics.main, ["describe", "--topic", bad]),
                       (get_offsets.main, ["--topic", bad]), (console_producer.main, ["--topic", bad])):
        kw = {"stdin": io.StringIO("v\n")} if main is console_producer.main else {}
        fails(capsys, main, *b, *argv, expect=invalid, **kw)
    fails(capsys, topics.main, *b, "create", "--topic", "x" * 250,
          expect="Topic name is invalid: the length of 'xxx")
    fails(capsys, groups.main, *b, "reset-offsets", group, "--topic", f"{bad}:0", "--to-earliest", expect=invalid)

