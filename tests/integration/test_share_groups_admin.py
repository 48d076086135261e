"""Share-group administration (issue 27, acceptance 6): ``kbroker share-groups`` list / describe /
reset-offsets / delete-offsets / delete against a real broker and confluent-kafka's ShareConsumer,
and the ACL checks of the share-group APIs (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import io
import json
import uuid

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from cli import share_groups
from protocol import share_group_api as S
from protocol.errors import ErrorCode as E
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.share_clients import SHARE_OVERRIDES, ShareWorker, produce_values, set_group_configs
from tests.helpers.waiting import wait_for
from tests.helpers.wire import RawConnection


def cli(bootstrap: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = share_groups.main(["--bootstrap-server", bootstrap, *args], out=out)
    return code, out.getvalue()


def start_offsets(text: str) -> dict[int, str]:
    rows = [line.split() for line in text.splitlines() if line.startswith("sg ")]
    return {int(r[2]): r[4] for r in rows}


def test_list_describe_reset_delete(broker_factory, capsys) -> None:
    b = broker_factory(SHARE_OVERRIDES)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=2)])["orders"].result(30)
    set_group_configs(b.bootstrap, "sg", {"share.auto.offset.reset": "earliest"})
    produce_values(b.bootstrap, "orders", range(100), 2)
    w = ShareWorker(b.bootstrap, "sg", ["orders"], name="first")
    w.start()
    try:
        wait_for(lambda: len(w.acked) >= 100, "the first consumer to acknowledge everything", timeout=60)
        assert cli(b.bootstrap, "list") == (0, "sg\n")
        code, text = cli(b.bootstrap, "describe", "sg")
        assert code == 0 and "Share group sg is Stable, 1 member(s)" in text
        wait_for(lambda: start_offsets(cli(b.bootstrap, "describe", "sg")[1]) == {0: "50", 1: "50"},
                 "start offsets at the log end")
        code, text = cli(b.bootstrap, "describe", "sg", "--members")
        assert code == 0 and "orders:0/1" in text
        code, text = cli(b.bootstrap, "describe", "sg", "--state")
        assert code == 0 and "Stable" in text and "simple" in text
        assert cli(b.bootstrap, "--describe", "--group", "sg", "--state") == (code, text)  # Kafka's form
        code, _ = cli(b.bootstrap, "reset-offsets", "sg", "--topic", "orders", "--to-earliest", "--execute")
        assert code == 1 and "not empty" in capsys.readouterr().err
    finally:
        w.stop()
    assert not w.errors
    wait_for(lambda: "Empty" in cli(b.bootstrap, "describe", "sg", "--state")[1], "the group to be empty")
    code, text = cli(b.bootstrap, "reset-offsets", "sg", "--topic", "orders", "--to-earliest")
    assert code == 0 and "dry run" in text
    assert start_offsets(cli(b.bootstrap, "describe", "sg")[1]) == {0: "50", 1: "50"}  # a dry run changes nothing
    code, text = cli(b.bootstrap, "reset-offsets", "sg", "--topic", "orders", "--to-earliest", "--execute")
    assert code == 0 and "dry run" not in text
    assert start_offsets(cli(b.bootstrap, "describe", "sg")[1]) == {0: "0", 1: "0"}
    # The records are available again: a new member gets every one of them (first delivery of the
    # reset state).
    again = ShareWorker(b.bootstrap, "sg", ["orders"], name="again")
    again.start()
    try:
        wait_for(lambda: len(again.acked) >= 100, "every record again after the reset", timeout=60)
    finally:
        again.stop()
    assert sorted(again.values()) == list(range(100))
    wait_for(lambda: "Empty" in cli(b.bootstrap, "describe", "sg", "--state")[1], "the group to be empty")
    code, text = cli(b.bootstrap, "delete-offsets", "sg", "--topic", "orders")
    assert code == 0 and "Successful" in text
    assert start_offsets(cli(b.bootstrap, "describe", "sg")[1]) == {}
    assert cli(b.bootstrap, "delete", "sg")[0] == 0
    assert cli(b.bootstrap, "list") == (0, "")
    code, _ = cli(b.bootstrap, "describe", "sg")
    assert code == 1 and "does not exist" in capsys.readouterr().err


ANON = "User:ANONYMOUS"


def _acls(*entries: tuple[str, str, str]) -> str:
    return json.dumps({"version": 1, "acls": [
        {"resource_type": rtype, "name": name, "pattern_type": "LITERAL", "principal": ANON, "host": "*",
         "operation": op, "permission": "ALLOW"} for rtype, name, op in entries]})


def test_acl_denials(tmp_path) -> None:
    data = tmp_path / "acl"
    data.mkdir()
    (data / "kbroker-acls.json").write_text(_acls(("CLUSTER", "kafka-cluster", "ALL"), ("TOPIC", "open", "ALL"),
                                                  ("TOPIC", "secret", "ALL"), ("GROUP", "allowed", "ALL")))
    b = BrokerProcess(data, overrides={**SHARE_OVERRIDES, "authorizer.class.name": "standard",
                                       "allow.everyone.if.no.acl.found": "false"})
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for t in ("open", "secret"):
            admin.create_topics([NewTopic(t, num_partitions=1)])[t].result(30)
        with RawConnection(b.bootstrap) as c:
            md = c.request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False), 12)
        ids = {t.name: t.topic_id for t in md.topics}
        # From now on ANONYMOUS may read "open" and use group "allowed" only.
        (data / "kbroker-acls.json").write_text(_acls(("TOPIC", "open", "ALL"), ("GROUP", "allowed", "ALL")))
        b.restart()
        member = "AAAAAAAAAAAAAAAAAAAAAA"
        with RawConnection(b.bootstrap) as c:
            # As a client does first: it creates __consumer_offsets.
            assert c.request(FindCoordinatorRequest(version=3, key="allowed", key_type=0), 3).error_code == E.NONE

            def heartbeat(group: str, topics: list[str]) -> int:
                return c.request(S.ShareGroupHeartbeatRequest(version=1, group_id=group, member_id=member,
                                                              member_epoch=0, rack_id=None,
                                                              subscribed_topic_names=topics), 1).error_code

            assert heartbeat("denied", ["open"]) == E.GROUP_AUTHORIZATION_FAILED
            assert heartbeat("allowed", ["open", "secret"]) == E.TOPIC_AUTHORIZATION_FAILED
            assert heartbeat("allowed", ["open"]) == E.NONE

            F = S.ShareFetchRequest
            T = F.FetchTopic

            def fetch(group: str, epoch: int) -> object:
                return c.request(F(version=1, group_id=group, member_id=member, share_session_epoch=epoch,
                                   max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
                                   topics=[T(version=1, topic_id=ids[n], partitions=[
                                       T.FetchPartition(version=1, partition_index=0, acknowledgement_batches=[])])
                                       for n in ("open", "secret")], forgotten_topics_data=[]), 1)

            assert fetch("denied", 0).error_code == E.GROUP_AUTHORIZATION_FAILED
            resp = fetch("allowed", 0)
            errors = {str(t.topic_id): p.error_code for t in resp.responses for p in t.partitions}
            assert resp.error_code == E.NONE
            assert errors == {str(ids["open"]): E.NONE, str(ids["secret"]): E.TOPIC_AUTHORIZATION_FAILED}
            A = S.AlterShareGroupOffsetsRequest
            AT = A.AlterShareGroupOffsetsRequestTopic

            def alter(group: str, topic: str) -> object:
                return c.request(A(version=0, group_id=group, topics=[AT(version=0, topic_name=topic, partitions=[
                    AT.AlterShareGroupOffsetsRequestPartition(version=0, partition_index=0, start_offset=0)])]), 0)

            assert alter("denied", "open").error_code == E.GROUP_AUTHORIZATION_FAILED
            r = alter("allowed", "secret")
            assert r.responses[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
            D = S.DescribeShareGroupOffsetsRequest
            DG = D.DescribeShareGroupOffsetsRequestGroup
            r = c.request(D(version=0, groups=[DG(version=0, group_id="denied", topics=None)]), 0)
            assert r.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
            r = c.request(S.ShareGroupDescribeRequest(version=1, group_ids=["denied", "allowed"],
                                                      include_authorized_operations=True), 1)
            assert [g.error_code for g in r.groups] == [E.GROUP_AUTHORIZATION_FAILED, E.NONE]
        code = share_groups.main(["--bootstrap-server", b.bootstrap, "delete-offsets", "denied", "--topic", "open"],
                                 out=io.StringIO())
        assert code == 1
    finally:
        b.stop()
        b.kill()
    assert "Traceback" not in b.log_text()
    assert uuid.UUID(str(ids["secret"]))  # the topic existed all along
