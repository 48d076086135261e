"""LocalMetadataStore persistence and topic-name rules."""

from __future__ import annotations

import asyncio

import pytest

from broker.handlers.configs import APPEND, DELETE, SET, SUBTRACT, _apply_ops
from cluster.local_store import LocalMetadataStore
from cluster.metadata_store import BrokerInfo, validate_topic_name
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


def test_changes_are_written_off_the_loop_before_they_become_visible(tmp_path, monkeypatch):
    """The metadata file's fsyncs run in an executor; while one is under way the change is not
    yet visible, and a second create of the same name waits and gets TOPIC_ALREADY_EXISTS."""
    import threading

    import cluster.local_store as md

    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    loop_thread = threading.get_ident()
    writers: list[int] = []
    real = md.atomic_write_bytes

    def recording(path, data):  # noqa: ANN001, ANN202
        writers.append(threading.get_ident())
        real(path, data)

    monkeypatch.setattr(md, "atomic_write_bytes", recording)

    async def scenario():  # noqa: ANN202
        first = asyncio.create_task(store.create_topic("t", 2, {}))
        second = asyncio.create_task(store.create_topic("t", 3, {}))
        await asyncio.sleep(0)  # the first is now writing
        assert store.get_topic("t") is None
        info = await first
        with pytest.raises(KafkaError) as e:
            await second
        assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        return info

    info = asyncio.run(scenario())
    assert writers and loop_thread not in writers
    assert store.get_topic("t") is info and info.num_partitions == 2
    assert LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1)).get_topic("t").num_partitions == 2


def test_a_failed_write_changes_nothing(tmp_path, monkeypatch):
    import cluster.local_store as md

    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    asyncio.run(store.create_topic("t", 1, {"retention.ms": "5"}))
    events = []
    store.add_listener(lambda ev, info: events.append(ev))

    def failing(path, data):  # noqa: ANN001, ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(md, "atomic_write_bytes", failing)
    for change in (store.create_topic("u", 1, {}), store.add_partitions("t", 4),
                   store.set_topic_configs("t", {"retention.ms": "9"}), store.delete_topic("t")):
        with pytest.raises(KafkaError) as e:
            asyncio.run(change)
        assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    t = store.get_topic("t")
    assert store.get_topic("u") is None and t is not None
    assert t.num_partitions == 1 and t.configs == {"retention.ms": "5"} and events == []


def test_add_partitions_rechecks_the_count(tmp_path):
    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "h", 1))
    asyncio.run(store.create_topic("t", 3, {}))
    with pytest.raises(KafkaError) as e:
        asyncio.run(store.add_partitions("t", 3))
    assert e.value.code == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KafkaError) as e:
        asyncio.run(store.set_topic_configs("nope", {}))
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
