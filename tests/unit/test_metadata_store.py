"""LocalMetadataStore persistence and topic-name rules."""

from __future__ import annotations

import asyncio

import pytest

from broker.handlers.configs import APPEND, DELETE, SET, SUBTRACT, _apply_ops
from broker.metadata import BrokerInfo, LocalMetadataStore, validate_topic_name
from protocol.errors import ErrorCode, KafkaError


def test_topics_persist_across_reopen(tmp_path):
    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "127.0.0.1", 9092))
    events = []
    store.add_listener(lambda ev, info: events.append((ev, info.name)))
    info = asyncio.run(store.create_topic("t1", 3, {"retention.ms": "1000"}))
    asyncio.run(store.add_partitions("t1", 5))
    asyncio.run(store.create_topic("gone", 1, {}))
    asyncio.run(store.delete_topic("gone"))
    assert events == [("created", "t1"), ("partitions", "t1"), ("created", "gone"), ("deleted", "gone")]
    again = LocalMetadataStore(tmp_path, BrokerInfo(1, "127.0.0.1", 9092))
    assert again.cluster_id == store.cluster_id and len(store.cluster_id) == 22
    t = again.get_topic("t1")
    assert t is not None and t.num_partitions == 5 and t.configs == {"retention.ms": "1000"}
    assert again.get_topic_by_id(info.topic_id) is t
    assert again.get_topic("gone") is None


def test_duplicate_create_and_collision(tmp_path):
    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    asyncio.run(store.create_topic("a.b", 1, {}))
    with pytest.raises(KafkaError) as e:
        asyncio.run(store.create_topic("a.b", 1, {}))
    assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaError) as e:
        store.check_collision("a_b")
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", ["ok", "with.dot", "under_score", "da-sh", "x" * 249])
def test_valid_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "é"])
def test_invalid_names(name):
    with pytest.raises(KafkaError) as e:
        validate_topic_name(name)
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_incremental_config_ops():
    cur = {"cleanup.policy": "delete", "retention.ms": "5"}
    lists = {"cleanup.policy"}
    assert _apply_ops(cur, [("retention.ms", SET, "7")], lists)["retention.ms"] == "7"
    assert "retention.ms" not in _apply_ops(cur, [("retention.ms", DELETE, None)], lists)
    assert _apply_ops(cur, [("cleanup.policy", APPEND, "compact")], lists)["cleanup.policy"] == "delete,compact"
    assert _apply_ops(cur, [("cleanup.policy", SUBTRACT, "delete")], lists)["cleanup.policy"] == ""
