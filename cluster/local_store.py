"""The single-node metadata store: ``LocalMetadataStore`` implements ``cluster.metadata_store.MetadataStore``
(the interface handlers and coordinators use) for one broker and persists it to
``<first log dir>/kbroker-metadata.json`` with atomic writes; ``cluster.etcd_store.EtcdMetadataStore``
implements the same interface on etcd for a cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from cluster.metadata_store import (
    INTERNAL_TOPICS,
    NEW_CLUSTER_FEATURES,
    BrokerInfo,
    MetadataStore,
    NewTopic,
    TopicInfo,
    unify_collision_chars,
)
from protocol.errors import ErrorCode, KafkaError
from security import quotas as client_quotas
from security import scram_credentials as scram
from security.authorizer import AclBinding, acls_applied, decode_acls, encode_acls
from storage.checkpoints import atomic_write_bytes

log = logging.getLogger("cluster.local_store")
_DEFAULT_PREFIX = "cluster-default:"  # the cluster-wide default's entries in the file's broker_configs
T = TypeVar("T")


class LocalMetadataStore(MetadataStore):
    """Single-node metadata persisted as one JSON document (tmp + fsync + rename, in an executor).
    Changes run one at a time, each written before it is applied, and each runs to completion
    even when the request that asked for it is cancelled (see ``_serialised``)."""

    FILE_NAME = "kbroker-metadata.json"

    def __init__(self, data_dir: Path, node: BrokerInfo, cluster_id: str | None = None) -> None:
        super().__init__()
        self.path = data_dir / self.FILE_NAME
        self.node = node
        self.controller_id = node.node_id
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._broker_configs: dict[str, str] = {}
        self._features: dict[str, int] = {}
        self._features_epoch = -1
        # ACLs in a file of their own (kbroker-acls.json), written with the same atomic write.
        self._acl_path = data_dir / ACL_FILE_NAME
        self._acls: tuple[AclBinding, ...] = _read_acls(self._acl_path)
        # Serialises changes: each is checked, written, then applied while no other runs.
        self._lock = asyncio.Lock()
        # Changes in progress, each in its own task (see _serialised); referenced until done.
        self._changes: set[asyncio.Task] = set()
        self.cluster_id = cluster_id or ""
        self._load()
        # Kept in a file of their own (security/scram_credentials.py's format), which
        # `kbroker users bootstrap` can write before the broker first starts.
        self._scram_path = data_dir / scram.FILE_NAME
        self._scram = scram.decode(self._scram_path.read_bytes()) if self._scram_path.exists() else {}
        self._quota_path = data_dir / client_quotas.FILE_NAME
        self._quotas: client_quotas.Quotas = (client_quotas.decode(self._quota_path.read_bytes())
                                              if self._quota_path.exists() else {})
        self._group_config_path = data_dir / GROUP_CONFIG_FILE_NAME
        self._group_configs: dict[str, dict[str, str]] = (json.loads(self._group_config_path.read_text())
                                                          if self._group_config_path.exists() else {})

    def _load(self) -> None:
        if self.path.exists():
            doc = json.loads(self.path.read_text())
            self.cluster_id = self.cluster_id or doc.get("cluster_id", "")
            for t in doc.get("topics", []):
                info = TopicInfo.from_json(t)
                self._topics[info.name] = info
                self._by_id[info.topic_id] = info
            self._broker_configs = dict(doc.get("broker_configs", {}))
            # A data dir written before features existed keeps none finalized (as Kafka does
            # for an upgraded cluster: the operator upgrades transaction.version explicitly).
            self._features = {k: int(v) for k, v in doc.get("features", {}).items()}
            self._features_epoch = int(doc.get("features_epoch", -1))
        else:
            # A new cluster finalizes the default feature levels (Kafka 4.0 formats new clusters
            # with transaction.version=2).
            self._features = dict(NEW_CLUSTER_FEATURES)
            self._features_epoch = 1
        if not self.cluster_id:
            self.cluster_id = _new_cluster_id()
            self._save()

    def _document(self, topics: Iterable[TopicInfo], broker_configs: dict[str, str],
                  features: tuple[dict[str, int], int] | None = None) -> bytes:
        levels, epoch = features if features is not None else (self._features, self._features_epoch)
        doc = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "topics": [t.to_json() for t in topics],
            "broker_configs": broker_configs,
            "features": levels,
            "features_epoch": epoch,
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    def _save(self) -> None:
        """Synchronous write, for start-up only (no loop to block yet)."""
        atomic_write_bytes(self.path, self._document(self._topics.values(), self._broker_configs))

    async def _serialised(self, change: Callable[[], Awaitable[T]]) -> T:
        """Run ``change`` (check, write, apply in memory) under the lock, to completion even when
        the caller is cancelled (the server cancels a request whose client disconnected).

        The change runs in its own task and the caller only waits for it (``asyncio.shield``).
        Cancelling the caller inside the lock would release the lock while the executor write
        (fixed ``.tmp`` name) still runs, so the next write could share its temporary file and
        fail, and a write that reached disk would never be applied in memory. Shielded, the lock
        is released only once the write is on disk and applied. As in Kafka, a request whose
        client went away is still carried out."""
        async def run() -> T:
            async with self._lock:
                return await change()

        task = asyncio.ensure_future(run())
        self._changes.add(task)
        task.add_done_callback(self._changes.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_report_orphaned_change)
            raise

    async def _persist(self, topics: Iterable[TopicInfo], broker_configs: dict[str, str],
                       features: tuple[dict[str, int], int] | None = None) -> None:
        """Write the state a change is about to produce, in an executor (its fsyncs stay off the
        loop); the caller applies the change only once this returned, so nothing is visible
        that a crash could take back. Callers hold ``self._lock`` (inside ``_serialised``):
        writes land in order, one at a time."""
        delay = _write_delay()
        hook = {"before_rename": delay} if delay is not None else {}
        await self._write_file(self.path, self._document(topics, broker_configs, features), "cluster metadata",
                               **hook)

    async def _write_file(self, path: Path, data: bytes, what: str, **hook: Any) -> None:
        """Atomic write of one of the store's files in an executor (its fsyncs stay off the loop),
        by a change holding ``self._lock``; a failure answers KAFKA_STORAGE_ERROR."""
        write = asyncio.get_running_loop().run_in_executor(
            None, functools.partial(atomic_write_bytes, path, data, **hook))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            # Only shutdown cancels a change task itself. A thread cannot be stopped: wait for the
            # write to end before the lock is released, so two writes never share the .tmp file.
            await asyncio.wait([write])
            if not write.cancelled():
                write.exception()  # retrieved: the cancellation is what the caller sees
            raise
        except OSError as e:
            log.error("cannot write %s: %s", path, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot write {what}: {e}") from e

    def brokers(self) -> list[BrokerInfo]:
        return [self.node]

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def leader(self, topic: str, partition: int) -> int:
        return self.node.node_id

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0

    async def create_topic(self, name: str, num_partitions: int, configs: dict[str, str],
                           *, internal: bool = False) -> TopicInfo:
        async def change() -> TopicInfo:
            # checked again here: the handler's checks and this change are an await apart
            if name in self._topics:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            self.check_collision(name)
            info = TopicInfo(name, uuid.uuid4(), num_partitions, dict(configs), internal or name in INTERNAL_TOPICS)
            await self._persist([*self._topics.values(), info], self._broker_configs)
            self._topics[name] = info
            self._by_id[info.topic_id] = info
            self._notify("created", info)
            return info

        return await self._serialised(change)

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicInfo | KafkaError]:
        """All the request's topics in one write of the file (a CreateTopics of fifty topics cost
        fifty rewrites of every topic's entry and their fsyncs)."""
        async def change() -> list[TopicInfo | KafkaError]:
            out: list[TopicInfo | KafkaError] = []
            new: dict[str, TopicInfo] = {}
            for t in topics:
                try:
                    if t.name in self._topics or t.name in new:
                        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
                    self.check_collision(t.name)
                    unified = unify_collision_chars(t.name)
                    other = next((n for n in new if unify_collision_chars(n) == unified), None)
                    if other is not None:
                        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                         f"Topic '{t.name}' collides with existing topic: {other}")
                    info = TopicInfo(t.name, uuid.uuid4(), t.num_partitions, dict(t.configs),
                                     t.internal or t.name in INTERNAL_TOPICS)
                    new[t.name] = info
                    out.append(info)
                except KafkaError as e:
                    out.append(e)
            if new:
                await self._persist([*self._topics.values(), *new.values()], self._broker_configs)
                for info in new.values():
                    self._topics[info.name] = info
                    self._by_id[info.topic_id] = info
                    self._notify("created", info)
            return out

        return await self._serialised(change)

    async def delete_topic(self, name: str) -> TopicInfo:
        async def change() -> TopicInfo:
            info = self._topics.get(name)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            await self._persist([t for t in self._topics.values() if t is not info], self._broker_configs)
            del self._topics[name]
            self._by_id.pop(info.topic_id, None)
            self._notify("deleted", info)
            return info

        return await self._serialised(change)

    async def add_partitions(self, name: str, total: int) -> TopicInfo:
        async def change() -> TopicInfo:
            info = self.check_partition_increase(name, total)  # again: the handler's check was an await ago
            await self._persist(self._with(dataclasses.replace(info, num_partitions=total)), self._broker_configs)
            info.num_partitions = total
            self._notify("partitions", info)
            return info

        return await self._serialised(change)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        async def change() -> TopicInfo:
            info = self._existing(name)
            await self._persist(self._with(dataclasses.replace(info, configs=dict(configs))), self._broker_configs)
            info.configs = dict(configs)
            self._notify("configs", info)
            return info

        return await self._serialised(change)

    def _existing(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        return info

    def _with(self, changed: TopicInfo) -> list[TopicInfo]:
        return [changed if t.name == changed.name else t for t in self._topics.values()]

    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls

    async def alter_acls(self, creations: list[AclBinding], deletions: list[AclBinding]) -> None:
        async def change() -> None:
            acls = acls_applied(self._acls, creations, deletions)
            await self._write_file(self._acl_path, encode_acls(acls), "ACLs")
            self._acls = acls

        await self._serialised(change)

    # The file keeps both resources in one map (its format since dynamic configs existed): this
    # node's own configs by name, the cluster-wide defaults as "cluster-default:<name>".
    def broker_dynamic_configs(self, resource: int | None) -> dict[str, str]:
        if resource is None:
            return {k.removeprefix(_DEFAULT_PREFIX): v for k, v in self._broker_configs.items()
                    if k.startswith(_DEFAULT_PREFIX)}
        if resource != self.node.node_id:
            return {}
        return {k: v for k, v in self._broker_configs.items() if not k.startswith(_DEFAULT_PREFIX)}

    async def set_broker_dynamic_configs(self, resource: int | None, configs: dict[str, str]) -> None:
        if resource is not None and resource != self.node.node_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id {resource}")

        async def change() -> None:
            other = self.broker_dynamic_configs(self.node.node_id if resource is None else None)
            mine = {_DEFAULT_PREFIX + k if resource is None else k: v for k, v in configs.items()}
            kept = {k if resource is None else _DEFAULT_PREFIX + k: v for k, v in other.items()}
            merged = {**kept, **mine}
            await self._persist(self._topics.values(), merged)
            self._broker_configs = merged
            self._notify_broker_configs(resource)  # here: also when the request was cancelled

        await self._serialised(change)

    def finalized_features(self) -> dict[str, int]:
        return {k: v for k, v in self._features.items() if v > 0}

    def features_epoch(self) -> int:
        return self._features_epoch

    async def set_finalized_feature(self, name: str, level: int) -> None:
        async def change() -> None:
            levels = {**self._features, name: level}
            epoch = max(self._features_epoch, 0) + 1
            await self._persist(self._topics.values(), self._broker_configs, (levels, epoch))
            self._features, self._features_epoch = levels, epoch

        await self._serialised(change)

    def scram_credentials(self) -> scram.Credentials:
        return self._scram

    async def alter_scram_credentials(self, deletions: list[tuple[str, str]],
                                      upserts: list[tuple[str, str, scram.ScramCredential]]) -> None:
        async def change() -> None:
            creds = scram.applied(self._scram, deletions, upserts)
            await self._write_file(self._scram_path, scram.encode(creds), "SCRAM credentials")
            self._scram = creds

        await self._serialised(change)

    def client_quotas(self) -> client_quotas.Quotas:
        return self._quotas

    async def alter_client_quotas(self, quotas: client_quotas.Quotas) -> None:
        async def change() -> None:
            await self._write_file(self._quota_path, client_quotas.encode(quotas), "client quotas")
            self._quotas = quotas

        await self._serialised(change)

    def group_configs(self) -> dict[str, dict[str, str]]:
        return self._group_configs

    async def alter_group_configs(self, configs: dict[str, dict[str, str]]) -> None:
        async def change() -> None:
            data = json.dumps(configs, indent=1, sort_keys=True).encode()
            await self._write_file(self._group_config_path, data, "group configs")
            self._group_configs = configs

        await self._serialised(change)


GROUP_CONFIG_FILE_NAME = "kbroker-group-configs.json"


def _report_orphaned_change(task: asyncio.Task) -> None:
    """A change whose caller was cancelled has nobody to answer: log how it ended."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        log.info("metadata change completed after its request was cancelled (client gone)")
    elif isinstance(exc, KafkaError):
        log.info("metadata change of a cancelled request failed: %s", exc)
    else:
        log.error("metadata change of a cancelled request failed", exc_info=exc)


def _write_delay() -> Callable[[], None] | None:
    """Test-only: ``KBROKERTEST_DELAY_POINT=metadata.before_rename:<ms>`` holds every metadata write in
    its executor thread for ``ms`` between its complete temporary file and the rename, so a request
    cancelled (client gone) in the middle of a write is testable deterministically."""
    name, _, ms = os.environ.get("KBROKERTEST_DELAY_POINT", "").rpartition(":")
    if name != "metadata.before_rename" or not ms.isdigit():
        return None

    def delay() -> None:
        log.warning("fault injection: delaying metadata.before_rename by %s ms", ms)
        time.sleep(int(ms) / 1000)

    return delay


ACL_FILE_NAME = "kbroker-acls.json"


def _read_acls(path: Path) -> tuple[AclBinding, ...]:
    return decode_acls(path.read_bytes()) if path.exists() else ()


def _new_cluster_id() -> str:
    """22-character URL-safe base64 of a random UUID, like Kafka's Uuid.randomUuid().toString()."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
