"""`kbroker groups` against a running broker (issue 6, acceptance 5): list, describe with members,
assignments, committed offsets, log-end offsets and lag, and reset-offsets (dry run and execute)."""

from __future__ import annotations

import io
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cli.groups import main
from tests.integration.test_groups_clients import produce, unique

OVERRIDES = {"offsets.topic.num.partitions": "3"}


def run(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out) == 0
    return out.getvalue()


def test_groups_cli_describe_list_reset(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    bs = ("--bootstrap-server", broker.bootstrap)
    topic, group = unique("cli"), unique("cligroup")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    produce(broker.bootstrap, topic, 60)  # 10 records per partition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "client.id": "cli-test-client"})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while len(c.assignment()) < 6 and time.monotonic() < deadline:
        c.poll(0.1)
    c.commit(offsets=[TopicPartition(topic, p, 4) for p in range(6)], asynchronous=False)
    try:
        listed = run(*bs, "list")
        assert group in listed and "Stable" in listed and "classic" in listed
        text = run(*bs, "describe", group)
        assert "Stable" in text and "range" in text
        rows = [ln.split() for ln in text.splitlines() if ln.startswith(group)]
        assert len(rows) == 6
        for r in rows:
            assert r[1] == topic and r[3] == "4" and r[4] == "10" and r[5] == "6" and r[8] == "cli-test-client"
        assert f"{topic}:0/1/2/3/4/5" in text  # the member's assignment
        # Resetting a group with active members is refused.
        assert main([*bs, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute"], io.StringIO()) == 1
    finally:
        c.close()
    plan = run(*bs, "reset-offsets", group, "--topic", topic, "--to-offset", "7")
    assert "dry run" in plan and plan.count(" 7\n") == 6
    assert all(r[3] == "4" for r in (ln.split() for ln in run(*bs, "describe", group).splitlines())
               if r and r[0] == group)
    run(*bs, "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
    rows = [ln.split() for ln in run(*bs, "describe", group).splitlines() if ln.startswith(group)]
    assert [(r[3], r[5]) for r in rows] == [("10", "0")] * 6
    run(*bs, "reset-offsets", group, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    rows = [ln.split() for ln in run(*bs, "describe", group).splitlines() if ln.startswith(group)]
    assert [r[3] for r in rows] == ["0"] * 6


def test_groups_cli_bootstrap_after_subcommand_and_unknown_group_fails(broker, capsys) -> None:
    """`--bootstrap-server` is accepted after the subcommand too, and describing a group that does not
    exist prints one line and exits non-zero (both were rough edges: rejected usage, exit 0)."""
    listed = io.StringIO()
    assert main(["list", "--bootstrap-server", broker.bootstrap], listed) == 0
    assert "GROUP" in listed.getvalue()
    missing = unique("nosuchgroup")
    assert main(["describe", missing, "--bootstrap-server", broker.bootstrap], io.StringIO()) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kbroker groups describe: Consumer group '{missing}' does not exist."]
