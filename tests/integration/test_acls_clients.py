"""ACLs with real clients (issue 17, acceptance 3 and the acls half of 4).

One broker with Kafka's standard authorizer (allow.everyone.if.no.acl.found left at false),
a SASL_PLAINTEXT listener with PLAIN users admin (a super user), alice and bob, and a PLAINTEXT
listener (principal User:ANONYMOUS). confluent-kafka clients: a user with no ACL gets
TOPIC_AUTHORIZATION_FAILED; CreateAcls through the AdminClient grants access; a DENY overrides an
ALLOW; a transactional producer needs WRITE on its TransactionalId; Metadata hides the topics a
user may not DESCRIBE; a request mixing allowed and denied topics succeeds for the allowed ones
only; `kbroker acls` add / list / remove round trip; the ACLs survive a restart.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.admin import CreateTopicsRequest, DeleteAclsRequest, DescribeAclsRequest
from kafka.protocol.producer import ProduceRequest

from protocol.errors import ErrorCode as E
from storage.batch import build_batch
from tests.helpers.broker_proc import REPO_ROOT, BrokerProcess, free_port
from tests.helpers.wire import RawConnection

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TIMEOUT = 30


class AclBroker(BrokerProcess):
    """PLAINTEXT on ``port`` (ready probe, User:ANONYMOUS) and SASL_PLAINTEXT PLAIN on ``sasl_port``."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, overrides={"authorizer.class.name": "standard", "super.users": "User:admin"})
        self.sasl_port = free_port()

    def command(self) -> list[str]:
        jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
        # SASL_PLAINTEXT first: Metadata advertises the first listener to the clients (see the report).
        listeners = f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},PLAINTEXT://127.0.0.1:{self.port}"
        settings = {**self.overrides, "listeners": listeners, "advertised.listeners": listeners,
                    "log.dirs": str(self.data_dir),
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}
        cmd = [self.python, "-m", "broker", "serve", "--log-level", "DEBUG"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def conf(self, user: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[AclBroker]:
    proc = AclBroker(tmp_path_factory.mktemp("acls") / "data")
    proc.start(timeout=60)
    try:
        yield proc
    finally:
        proc.stop()
        proc.kill()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def admin(broker: AclBroker, user: str = "admin") -> AdminClient:
    return AdminClient(broker.conf(user))


def describe(broker: AclBroker, flt: AclBindingFilter) -> list:
    a = admin(broker)
    return a.describe_acls(flt).result(TIMEOUT)


def create_topics(broker: AclBroker, *names: str) -> None:
    a = admin(broker)
    for fut in a.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        fut.result(TIMEOUT)


def grant(broker: AclBroker, user: str, rtype: ResourceType, name: str, *ops: AclOperation,
          deny: bool = False, pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> None:
    perm = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    bindings = [AclBinding(rtype, name, pattern, f"User:{user}", "*", op, perm) for op in ops]
    a = admin(broker)  # kept referenced until the futures resolve (a dropped client cancels them)
    for fut in a.create_acls(bindings).values():
        assert fut.result(TIMEOUT) is None


def produce_one(broker: AclBroker, user: str, topic: str, **extra) -> KafkaError | None:
    """Send one record and flush; the delivery error (None when it was written)."""
    errors: list = []
    p = Producer({**broker.conf(user), "message.timeout.ms": 10000, "retries": 0, **extra})
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(TIMEOUT) == 0
    return errors[0]


def test_no_acl_then_create_acls_grants_access(acl_broker: AclBroker) -> None:
    topic, group = unique("acl-grant"), unique("acl-grant-g")
    create_topics(acl_broker, topic)
    err = produce_one(acl_broker, "alice", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    grant(acl_broker, "alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce_one(acl_broker, "alice", topic) is None

    # Reading needs READ on the topic and on the group.
    c = Consumer({**acl_broker.conf("alice"), "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        deadline, seen = time.monotonic() + TIMEOUT, None
        while seen is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                seen = m.error().code()
        assert seen in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED), seen
    finally:
        c.close()
    grant(acl_broker, "alice", ResourceType.TOPIC, topic, AclOperation.READ)
    grant(acl_broker, "alice", ResourceType.GROUP, group, AclOperation.READ)
    c = Consumer({**acl_broker.conf("alice"), "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        deadline, got = time.monotonic() + 60, None
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got = m.value()
        assert got == b"v"
        c.commit(asynchronous=False)
    finally:
        c.close()


def test_deny_overrides_allow(acl_broker: AclBroker) -> None:
    prefix = unique("acl-deny")
    open_topic, closed_topic = f"{prefix}-open", f"{prefix}-closed"
    create_topics(acl_broker, open_topic, closed_topic)
    grant(acl_broker, "bob", ResourceType.TOPIC, prefix, AclOperation.ALL, pattern=ResourcePatternType.PREFIXED)
    grant(acl_broker, "bob", ResourceType.TOPIC, closed_topic, AclOperation.WRITE, deny=True)
    assert produce_one(acl_broker, "bob", open_topic) is None
    err = produce_one(acl_broker, "bob", closed_topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_transactional_producer_needs_write_on_its_transactional_id(acl_broker: AclBroker) -> None:
    topic, tid = unique("acl-txn"), unique("acl-txn-id")
    create_topics(acl_broker, topic)
    grant(acl_broker, "alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    conf = {**acl_broker.conf("alice"), "transactional.id": tid, "transaction.timeout.ms": 30000}
    p = Producer(conf)
    with pytest.raises(KafkaException) as info:
        p.init_transactions(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, info.value

    grant(acl_broker, "alice", ResourceType.TRANSACTIONAL_ID, tid, AclOperation.WRITE)
    p = Producer(conf)
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"in-txn")
    p.commit_transaction(TIMEOUT)


def test_metadata_hides_topics_the_user_may_not_describe(acl_broker: AclBroker) -> None:
    seen_topic, hidden_topic = unique("acl-seen"), unique("acl-hidden")
    create_topics(acl_broker, seen_topic, hidden_topic)
    grant(acl_broker, "bob", ResourceType.TOPIC, seen_topic, AclOperation.DESCRIBE)
    topics = admin(acl_broker, "bob").list_topics(timeout=TIMEOUT).topics
    assert seen_topic in topics and hidden_topic not in topics
    assert hidden_topic in admin(acl_broker).list_topics(timeout=TIMEOUT).topics  # the super user sees all
    # Asked by name, a hidden topic answers TOPIC_AUTHORIZATION_FAILED.
    named = admin(acl_broker, "bob").list_topics(hidden_topic, timeout=TIMEOUT).topics[hidden_topic]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _end_offset(broker: AclBroker, topic: str) -> int:
    from confluent_kafka import TopicPartition

    c = Consumer({**broker.conf("admin"), "group.id": unique("acl-probe")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)[1]
    finally:
        c.close()


def test_mixed_request_succeeds_for_allowed_topics_only(acl_broker: AclBroker) -> None:
    allowed, denied = unique("acl-mixed-ok"), unique("acl-mixed-no")
    create_topics(acl_broker, allowed, denied)
    grant(acl_broker, "ANONYMOUS", ResourceType.TOPIC, allowed, AclOperation.WRITE)
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P(version=9, name=name, partition_data=[P.PartitionProduceData(version=9, index=0,
                                                                       records=build_batch([(None, b"x")]))])
        for name in (allowed, denied)])
    with RawConnection(acl_broker.bootstrap) as c:  # PLAINTEXT: User:ANONYMOUS
        resp = c.request(req, 9)
    codes = {t.name: t.partition_responses[0].error_code for t in resp.responses}
    assert codes == {allowed: E.NONE, denied: E.TOPIC_AUTHORIZATION_FAILED}
    assert _end_offset(acl_broker, allowed) == 1
    assert _end_offset(acl_broker, denied) == 0  # no effect on the denied topic


def _kbroker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


def test_kbroker_acls_add_list_remove(acl_broker: AclBroker, tmp_path: Path) -> None:
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\n"
                     "sasl.username=admin\nsasl.password=admin-secret\n")
    conn = ["--bootstrap-server", f"127.0.0.1:{acl_broker.sasl_port}", "--command-config", str(props)]
    topic, group = unique("acl-cli"), unique("acl-cli-g")
    out = _kbroker("acls", "add", *conn, "--allow-principal", "User:carol", "--operation", "Read",
                   "--operation", "Describe", "--topic", topic, "--group", group)
    assert out.returncode == 0, out.stderr
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in out.stdout
    out = _kbroker("acls", "add", *conn, "--deny-principal", "User:carol", "--operation", "Write", "--topic",
                   topic, "--resource-pattern-type", "prefixed")
    assert out.returncode == 0, out.stderr

    out = _kbroker("acls", "list", *conn, "--topic", topic, "--resource-pattern-type", "match")
    assert out.returncode == 0, out.stderr
    assert f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:" \
        in out.stdout
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in out.stdout
    assert "(principal=User:carol, host=*, operation=WRITE, permissionType=DENY)" in out.stdout
    out = _kbroker("acls", "list", *conn, "--group", group)
    assert "operation=READ, permissionType=ALLOW" in out.stdout and "DESCRIBE" in out.stdout

    # The ACLs are stored: they survive a restart.
    acl_broker.restart(timeout=60)
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None, AclOperation.ANY,
                           AclPermissionType.ANY)
    assert len(describe(acl_broker, flt)) == 5

    out = _kbroker("acls", "remove", *conn, "--topic", topic, "--resource-pattern-type", "any", "--force")
    assert out.returncode == 0, out.stderr
    assert "Removed ACLs for resource" in out.stdout
    left = describe(acl_broker, flt)
    assert {(b.restype, b.name) for b in left} == {(ResourceType.GROUP, group)}
    out = _kbroker("acls", "remove", *conn, "--allow-principal", "User:carol", "--group", group)
    assert out.returncode == 0, out.stderr
    assert describe(acl_broker, flt) == []


def test_acl_apis_without_authorizer_answer_security_disabled(broker) -> None:
    # librdkafka drops DescribeAcls' top-level error (it answers an empty list): checked raw, as Kafka answers.
    flt = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
               host_filter=None, operation=1, permission_type=1)
    with RawConnection(broker.bootstrap) as c:
        described = c.request(DescribeAclsRequest(version=3, **flt), 3)
        deleted = c.request(DeleteAclsRequest(version=3, filters=[DeleteAclsRequest.DeleteAclsFilter(version=3, **flt)]),
                            3)
    assert (described.error_code, described.error_message) == (E.SECURITY_DISABLED, "No Authorizer is configured.")
    assert [r.error_code for r in deleted.filter_results] == [E.SECURITY_DISABLED]
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as info:
        a.create_acls([binding])[binding].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_create_topics_needs_create_and_shows_configs_only_with_describe_configs(acl_broker: AclBroker) -> None:
    prefix = unique("acl-anon-create")

    def create(name: str):
        req = CreateTopicsRequest(version=7, topics=[CreateTopicsRequest.CreatableTopic(
            version=7, name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=30000, validate_only=False)
        with RawConnection(acl_broker.bootstrap) as c:  # User:ANONYMOUS
            return c.request(req, 7).topics[0]

    assert create(f"{prefix}-a").error_code == E.TOPIC_AUTHORIZATION_FAILED
    grant(acl_broker, "ANONYMOUS", ResourceType.TOPIC, prefix, AclOperation.CREATE,
          pattern=ResourcePatternType.PREFIXED)
    made = create(f"{prefix}-b")
    assert (made.error_code, made.topic_config_error_code) == (E.NONE, E.TOPIC_AUTHORIZATION_FAILED)
    assert not made.configs
    grant(acl_broker, "ANONYMOUS", ResourceType.TOPIC, prefix, AclOperation.DESCRIBE_CONFIGS,
          pattern=ResourcePatternType.PREFIXED)
    made = create(f"{prefix}-c")
    assert (made.error_code, made.topic_config_error_code) == (E.NONE, E.NONE) and made.configs


def test_produce_checks_the_transactional_id_only_for_transactional_batches(acl_broker: AclBroker) -> None:
    topic = unique("acl-txn-batches")
    create_topics(acl_broker, topic)
    grant(acl_broker, "ANONYMOUS", ResourceType.TOPIC, topic, AclOperation.WRITE)

    def produce(tid: str | None, transactional: bool) -> int:
        batch = build_batch([(None, b"x")], producer_id=7 if transactional else -1,
                            producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1,
                            transactional=transactional)
        P = ProduceRequest.TopicProduceData
        req = ProduceRequest(version=9, transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
            P(version=9, name=topic, partition_data=[P.PartitionProduceData(version=9, index=0, records=batch)])])
        with RawConnection(acl_broker.bootstrap) as c:  # User:ANONYMOUS, no ACL on any transactional id
            return c.request(req, 9).responses[0].partition_responses[0].error_code

    # As Kafka: plain batches need no transactional-id ACL, transactional ones need WRITE on it (and an id).
    assert produce(unique("acl-some-tx"), transactional=False) == E.NONE
    assert produce(unique("acl-some-tx"), transactional=True) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert produce(None, transactional=True) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _end_offset(acl_broker, topic) == 1
