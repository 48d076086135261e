"""EtcdMetadataStore: the ``MetadataStore`` of cluster mode, kept in etcd and mirrored locally by a watch.

Every broker holds a local view of everything under the cluster's prefix (brokers, topics with their
replica assignments, partition state, controller, broker dynamic configs, finalized features). It is
loaded from one ``get_prefix`` snapshot and then kept current by a watch on the prefix that starts
at the snapshot's revision + 1, so no change is missed. Changes reach the broker's listeners on the
event loop ("created", "deleted", "partitions", "configs", and "leaders" when a partition's leader,
leader epoch or ISR changed). A broken watch (etcd restart, compaction) is replaced by a fresh
snapshot that is compared with the view, and the differences are notified the same way.

Writes go to etcd only, never to the local view: a write returns once the watch brought it back,
so the writer's own view (and its listeners: the replica manager) already has it. Topic writes are
transactions guarded by the topic key's revision (creation: create revision 0, so two brokers
creating the same topic cannot both win); a topic and its partition states are written together.
Partition-state changes after creation are compare-and-swaps on the partition epoch
(``cluster.partition_state``), done by the controller (``cluster.controller``), or on the partition
key's mod revision by the broker receiving ElectLeaders or AlterPartitionReassignments (as for
CreateTopics, it writes itself instead of forwarding to the controller). A reassignment keeps the
union replica list in the topic record's ``assignment`` (so ``replicas()`` returns it) and the
adding/removing sets in ``reassignments``, written with the partition states in one transaction
guarded by the topic key's mod revision; a change of a partition's replicas is notified as "leaders".

Placement: the broker that receives CreateTopics/CreatePartitions computes it (``cluster.placement``)
from its view of the live brokers and writes it in one guarded transaction; Kafka forwards the
request to the controller instead, with the same effect. Internal topics (``__consumer_offsets``,
``__transaction_state``) are placed entirely on the broker that creates them, RF 1: their
coordinators do not move between brokers yet (issue 15).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import replace

from aetcd.utils import prefix_range_end

from protocol.errors import ErrorCode, KafkaError
from security import quotas as client_quotas
from security import scram_credentials as scram
from security.authorizer import AclBinding, acls_applied, decode_acls, encode_acls

from . import reassignment
from .etcd_keys import KeyLayout
from .etcd_session import TRANSIENT_ERRORS, EtcdSession
from .leader_election import PREFERRED, elect
from .metadata_store import (
    INTERNAL_TOPICS,
    NEW_CLUSTER_FEATURES,
    BrokerInfo,
    MetadataStore,
    TopicInfo,
)
from .placement import place_replicas
from .records import BrokerRegistration, PartitionState, Reassignment, TopicRecord

log = logging.getLogger("cluster.etcd_store")

# etcd refuses transactions of more than --max-txn-ops operations (128 by default).
TXN_OPS = 120
# How long a write waits for the watch to bring it back before answering REQUEST_TIMED_OUT.
APPLY_TIMEOUT_S = 30.0


def _etcd_error(e: BaseException) -> KafkaError:
    return KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"etcd did not answer: {e!r}")


class EtcdMetadataStore(MetadataStore):
    def __init__(self, session: EtcdSession, keys: KeyLayout, node_id: int, *,
                 default_replication_factor: Callable[[], int] = lambda: 1) -> None:
        super().__init__()
        self.session = session
        self.keys = keys
        self.node_id = node_id
        self.cluster_id = keys.cluster_id
        self.controller_id = -1
        self._default_rf = default_replication_factor
        self._records: dict[str, TopicRecord] = {}
        self._topic_rev: dict[str, int] = {}  # mod revision of each topic key (the guard of its changes)
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        # Mod revision of each partition-state key: the guard of writes decided from the view.
        self._state_rev: dict[tuple[str, int], int] = {}
        self._brokers: dict[int, BrokerRegistration] = {}
        # Dynamic broker configs per resource (None: the cluster default), their keys' mod revisions,
        # and the single JSON object of earlier versions (a fallback for resources without a key).
        self._broker_configs: dict[int | None, dict[str, str]] = {}
        self._broker_config_rev: dict[int | None, int] = {}
        self._legacy_broker_configs: dict[str, str] = {}
        self._features: dict[str, int] = {}
        self._features_epoch = -1
        self._features_rev = 0
        self._scram: scram.Credentials = {}
        self._scram_rev = 0  # mod revision of the credentials key (0: never written)
        self._quotas: client_quotas.Quotas = {}
        self._quotas_rev = 0
        self._group_configs: dict[str, dict[str, str]] = {}
        self._group_configs_rev = 0
        self._acls: tuple[AclBinding, ...] = ()
        self._acls_rev = 0
        self.revision = 0
        self._started = False
        self._watch_task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()  # replaced after every applied change (see wait_for)
        # Set on every change of the live brokers or partition states: the controller's cue.
        self.cluster_changed = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Finalize the new-cluster feature levels once, load the snapshot, start the watch."""
        client = self.session.client
        tx = client.transactions
        doc = json.dumps({"version": 1, "levels": NEW_CLUSTER_FEATURES, "epoch": 1}).encode()
        await client.transaction(compare=[tx.create(self.keys.features) == 0],
                                 success=[tx.put(self.keys.features, doc)], failure=[])
        revision = await self._resync()
        self._started = True
        self._watch_task = asyncio.create_task(self._watch_loop(revision), name="etcd-metadata-watch")

    async def stop(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            # Bounded: cancelling an aetcd watch is a request to etcd, which may not answer.
            await asyncio.wait([self._watch_task], timeout=5)
            self._watch_task = None

    async def _resync(self) -> int:
        """Load a snapshot of the prefix and apply its differences from the view; its revision."""
        result = await self.session.client.get_prefix(self.keys.prefix)
        seen = set()
        for kv in result:
            seen.add(kv.key)
            self._apply(True, kv.key, kv.value, kv.mod_revision)
        for key in self._known_keys() - seen:
            self._apply(False, key, b"", result.header.revision)
        self.revision = max(self.revision, result.header.revision)
        self._wake()
        return result.header.revision

    def _known_keys(self) -> set[bytes]:
        k = self.keys
        keys = {k.topic(t) for t in self._records} | {k.partition(t, p) for t, p in self._states}
        keys |= {k.broker(n) for n in self._brokers}
        keys |= {k.broker_config(r) for r in self._broker_configs}
        if self._legacy_broker_configs:
            keys.add(k.broker_configs)
        if self.controller_id >= 0:
            keys.add(k.controller)
        return keys

    async def _watch_loop(self, revision: int) -> None:
        while True:
            try:
                # Bounded: aetcd can block a watch creation forever after etcd restarted (its
                # request queue no longer drained); the loop then resyncs and tries again.
                watch = await asyncio.wait_for(
                    self.session.client.watch_prefix(self.keys.prefix, start_revision=revision + 1), 10)
                try:
                    async for event in watch:
                        self._apply(event.kind == "PUT", event.kv.key, event.kv.value, event.kv.mod_revision)
                        revision = max(revision, event.kv.mod_revision)
                        self.revision = max(self.revision, revision)
                        self._wake()
                finally:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(watch.cancel(), 2)
                raise ConnectionError("etcd watch ended")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("etcd metadata watch failed (%r); reloading the snapshot", e)
                await asyncio.sleep(0.5)
                with contextlib.suppress(*TRANSIENT_ERRORS, ConnectionError):
                    revision = await self._resync()

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + APPLY_TIMEOUT_S
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what} was written to etcd but not seen back in time")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    # --- applying etcd changes to the view ------------------------------------------------
    def _apply(self, put: bool, key: bytes, value: bytes, mod_revision: int) -> None:
        k = self.keys
        if not key.startswith(k.prefix):
            return
        try:
            if key.startswith(k.topics_prefix):
                name = key[len(k.topics_prefix):].decode()
                self._apply_topic(name, TopicRecord.from_json(value) if put else None, mod_revision)
            elif key.startswith(k.partitions_prefix):
                topic, p = k.topic_partition_of(key)
                if put:
                    state = PartitionState.from_json(value)
                    self._state_rev[(topic, p)] = mod_revision
                    if self._states.get((topic, p)) != state:
                        self._states[(topic, p)] = state
                        self._changed_leaders(topic)
                else:
                    self._states.pop((topic, p), None)
                    self._state_rev.pop((topic, p), None)
            elif key.startswith(k.brokers_prefix):
                node = k.node_id_of(key)
                if put:
                    # The view needs no broker epoch (writers with one read it from etcd).
                    self._brokers[node] = BrokerRegistration.from_json(value, epoch=-1)
                else:
                    self._brokers.pop(node, None)
                self.cluster_changed.set()
            elif key == k.controller:
                self.controller_id = json.loads(value)["node_id"] if put else -1
            elif key.startswith(k.broker_configs_prefix):
                self._apply_broker_configs(k.broker_config_resource(key),
                                           dict(json.loads(value)["configs"]) if put else None, mod_revision)
            elif key == k.broker_configs:
                old = self.broker_dynamic_configs(None), self.broker_dynamic_configs(self.node_id)
                self._legacy_broker_configs = dict(json.loads(value)["configs"]) if put else {}
                if old != (self.broker_dynamic_configs(None), self.broker_dynamic_configs(self.node_id)):
                    self._broker_configs_changed(None)
                    self._broker_configs_changed(self.node_id)
            elif key == k.features:
                if put:
                    doc = json.loads(value)
                    self._features = {n: int(v) for n, v in doc["levels"].items()}
                    self._features_epoch = int(doc["epoch"])
                    self._features_rev = mod_revision
            elif key == k.scram_credentials:
                self._scram = scram.decode(value) if put else {}
                self._scram_rev = mod_revision if put else 0
            elif key == k.client_quotas:
                self._quotas = client_quotas.decode(value) if put else {}
                self._quotas_rev = mod_revision if put else 0
            elif key == k.group_configs:
                self._group_configs = json.loads(value) if put else {}
                self._group_configs_rev = mod_revision if put else 0
            elif key == k.acls:
                self._acls = decode_acls(value) if put else ()
                self._acls_rev = mod_revision if put else 0
        except (ValueError, KeyError, TypeError) as e:
            log.error("ignoring unreadable etcd value of %r: %r", key, e)

    def _apply_topic(self, name: str, rec: TopicRecord | None, mod_revision: int) -> None:
        old = self._records.get(name)
        info = self._topics.get(name)
        if old is not None and info is not None and (rec is None or rec.topic_id != old.topic_id):
            del self._records[name], self._topics[name]
            self._topic_rev.pop(name, None)
            self._by_id.pop(info.topic_id, None)
            for key in [key for key in self._states if key[0] == name]:
                del self._states[key]
                self._state_rev.pop(key, None)
            self._notify_started("deleted", info)
            old = info = None
        if rec is None:
            return
        self._records[name] = rec
        self._topic_rev[name] = mod_revision
        if info is None:
            info = TopicInfo(name, rec.topic_id, len(rec.assignment), dict(rec.configs), name in INTERNAL_TOPICS)
            self._topics[name] = info
            self._by_id[rec.topic_id] = info
            self._notify_started("created", info)
            return
        if len(rec.assignment) != info.num_partitions:
            info.num_partitions = len(rec.assignment)
            self._notify_started("partitions", info)
        if old is not None and (rec.reassignments != old.reassignments or any(
                old.assignment.get(p) != r for p, r in rec.assignment.items() if p in old.assignment)):
            # A reassignment moved replicas: the replica manager opens logs for replicas newly
            # assigned here and drops the ones no longer assigned; the controller checks completion.
            self._changed_leaders(name)
        if rec.configs != info.configs:
            info.configs = dict(rec.configs)
            self._notify_started("configs", info)

    def _apply_broker_configs(self, resource: int | None, configs: dict[str, str] | None, mod_revision: int) -> None:
        before = self.broker_dynamic_configs(resource)
        if configs is None:
            self._broker_configs.pop(resource, None)
            self._broker_config_rev.pop(resource, None)
        else:
            self._broker_configs[resource] = configs
            self._broker_config_rev[resource] = mod_revision
        if self.broker_dynamic_configs(resource) != before:
            self._broker_configs_changed(resource)

    def _broker_configs_changed(self, resource: int | None) -> None:
        # The controller's cue too: it reads unclean.leader.election.enable from these configs.
        self.cluster_changed.set()
        if self._started:
            try:
                self._notify_broker_configs(resource)
            except Exception:
                log.exception("broker config listener failed on the configs of %s",
                              "the cluster default" if resource is None else f"broker {resource}")

    def _changed_leaders(self, topic: str) -> None:
        self.cluster_changed.set()
        info = self._topics.get(topic)
        if info is not None:
            self._notify_started("leaders", info)

    def _notify_started(self, event: str, info: TopicInfo) -> None:
        if self._started:
            try:
                self._notify(event, info)
            except Exception:
                log.exception("metadata listener failed on %s of %s", event, info.name)

    # --- reads -----------------------------------------------------------------------------
    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return dict(self._brokers)

    def partition_states(self) -> dict[tuple[str, int], PartitionState]:
        return dict(self._states)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

    def partition_state_revision(self, topic: str, partition: int) -> int | None:
        """The etcd mod revision of the cached state (the watch's view), or None."""
        return self._state_rev.get((topic, partition))

    def brokers(self) -> list[BrokerInfo]:
        out = []
        for node, reg in sorted(self._brokers.items()):
            ep = reg.endpoints[0]
            out.append(BrokerInfo(node, ep.host, ep.port, reg.rack,
                                  {e.name: (e.host, e.port) for e in reg.endpoints}))
        return out

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def leader(self, topic: str, partition: int) -> int:
        state = self._states.get((topic, partition))
        return -1 if state is None else state.leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        state = self._states.get((topic, partition))
        return 0 if state is None else state.leader_epoch

    def replicas(self, topic: str, partition: int) -> list[int]:
        rec = self._records.get(topic)
        return [] if rec is None else list(rec.assignment.get(partition, []))

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self._states.get((topic, partition))
        return [] if state is None else list(state.isr)

    def offline_replicas(self, topic: str, partition: int) -> list[int]:
        return [r for r in self.replicas(topic, partition) if r not in self._brokers]

    def fenced(self) -> bool:
        return self.session.fenced()

    def broker_dynamic_configs(self, resource: int | None) -> dict[str, str]:
        stored = self._broker_configs.get(resource)
        if stored is not None:
            return dict(stored)
        # Not written since per-resource keys exist: the earlier single object, read as it was
        # applied (its defaults by every broker, its other entries by every broker at start).
        legacy = self._legacy_broker_configs
        if resource is None:
            return {n.removeprefix("cluster-default:"): v for n, v in legacy.items() if n.startswith("cluster-default:")}
        return {n: v for n, v in legacy.items() if not n.startswith("cluster-default:")}

    def finalized_features(self) -> dict[str, int]:
        return {k: v for k, v in self._features.items() if v > 0}

    def features_epoch(self) -> int:
        return self._features_epoch

    # --- writes ----------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.session.fenced():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker's etcd session is fenced; try another broker")

    async def _txn(self, compare: list, success: list) -> bool:
        self._check_writable()
        try:
            ok, _ = await self.session.client.transaction(compare=compare, success=success, failure=[])
        except TRANSIENT_ERRORS as e:
            raise _etcd_error(e) from e
        return ok

    def _initial_states(self, assignment: dict[int, list[int]]) -> list[tuple[int, PartitionState]]:
        # As Kafka: a new partition's ISR is its live replicas (all empty, so all in sync); the
        # leader is the first live one. Followers that then fall behind leave the ISR through
        # their leader (broker.replication).
        live = self.live_brokers()
        states = []
        for p, replicas in sorted(assignment.items()):
            isr = tuple(r for r in replicas if r in live) or (replicas[0],)
            states.append((p, PartitionState(isr[0], 0, isr, 0)))
        return states

    async def _write_partitions(self, topic: str, states: list[tuple[int, PartitionState]]) -> None:
        tx = self.session.client.transactions
        for i in range(0, len(states), TXN_OPS):
            ops = [tx.put(self.keys.partition(topic, p), s.to_json()) for p, s in states[i:i + TXN_OPS]]
            await self._txn([], ops)

    def _placement(self, first: int, count: int, rf: int, internal: bool) -> dict[int, list[int]]:
        # Internal topics are placed like any other (issue 15): their replication factor comes
        # from offsets.topic.replication.factor / transaction.state.log.replication.factor, and
        # with fewer live brokers the creation fails (INVALID_REPLICATION_FACTOR), so
        # FindCoordinator answers COORDINATOR_NOT_AVAILABLE until enough brokers have registered.
        racks = {n: r.rack for n, r in self._brokers.items()}
        return place_replicas(racks, count, rf, first_partition=first)

    async def create_topic(self, name: str, num_partitions: int, configs: dict[str, str], *,
                           internal: bool = False, replication_factor: int = -1,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self.check_collision(name)
        internal = internal or name in INTERNAL_TOPICS
        if assignment:
            placed = {p: list(r) for p, r in assignment.items()}
        else:
            rf = replication_factor if replication_factor > 0 else self._default_rf()
            placed = self._placement(0, num_partitions, rf, internal)
        rec = TopicRecord(name, uuid.uuid4(), placed, dict(configs))
        states = self._initial_states(placed)
        tx = self.session.client.transactions
        key = self.keys.topic(name)
        first = [tx.put(key, rec.to_json())] + [tx.put(self.keys.partition(name, p), s.to_json())
                                                 for p, s in states[:TXN_OPS]]
        if not await self._txn([tx.create(key) == 0], first):
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        log.info("created topic %s (%d partitions, leaders on %s)", name, num_partitions,
                 sorted({r[0] for r in placed.values()}))
        if (delay_s := _delay_after_create()) is not None:
            log.warning("fault injection: delaying etcd_store.after_create by %.3f s", delay_s)
            await asyncio.sleep(delay_s)
        await self._write_partitions(name, states[TXN_OPS:])
        await self.wait_for(lambda: (t := self._topics.get(name)) is not None and t.topic_id == rec.topic_id,
                             f"topic {name}")
        return self._topics[name]

    def _existing(self, name: str) -> tuple[TopicRecord, int]:
        rec = self._records.get(name)
        if rec is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        return rec, self._topic_rev[name]

    async def delete_topic(self, name: str) -> TopicInfo:
        rec, rev = self._existing(name)
        info = self._topics[name]
        tx = self.session.client.transactions
        key = self.keys.topic(name)
        prefix = self.keys.partitions_of(name)
        if not await self._txn([tx.mod(key) == rev],
                               [tx.delete(key), tx.delete(prefix, range_end=prefix_range_end(prefix))]):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' changed meanwhile; retry")
        await self.wait_for(lambda: (t := self._topics.get(name)) is None or t.topic_id != rec.topic_id,
                             f"deletion of {name}")
        return info

    async def add_partitions(self, name: str, total: int, *, assignment: list[list[int]] | None = None) -> TopicInfo:
        info = self.check_partition_increase(name, total)
        rec, rev = self._existing(name)
        current = len(rec.assignment)
        if assignment:
            new = {current + i: list(r) for i, r in enumerate(assignment)}
        else:
            first = rec.assignment.get(0, [])
            moving = rec.reassignments.get(0)  # while partition 0 moves, its target is the replication factor
            rf = len(reassignment.target_of(first, moving) if moving else first) or 1
            new = self._placement(current, total - current, rf, info.internal)
        grown = replace(rec, assignment={**rec.assignment, **new})
        states = self._initial_states(new)
        tx = self.session.client.transactions
        key = self.keys.topic(name)
        first = [tx.put(key, grown.to_json())] + [tx.put(self.keys.partition(name, p), s.to_json())
                                                   for p, s in states[:TXN_OPS]]
        if not await self._txn([tx.mod(key) == rev], first):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The topic '{name}' changed meanwhile; retry")
        await self._write_partitions(name, states[TXN_OPS:])
        await self.wait_for(lambda: (t := self._topics.get(name)) is not None and t.num_partitions >= total,
                             f"partitions of {name}")
        return self._topics[name]

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        rec, rev = self._existing(name)
        changed = replace(rec, configs=dict(configs))
        tx = self.session.client.transactions
        key = self.keys.topic(name)
        if not await self._txn([tx.mod(key) == rev], [tx.put(key, changed.to_json())]):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The topic '{name}' changed meanwhile; retry")
        await self.wait_for(lambda: (t := self._topics.get(name)) is None or t.configs == dict(configs),
                             f"configs of {name}")
        info = self._topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' was deleted meanwhile.")
        return info

    async def set_broker_dynamic_configs(self, resource: int | None, configs: dict[str, str]) -> None:
        tx = self.session.client.transactions
        key = self.keys.broker_config(resource)
        doc = json.dumps({"version": 1, "configs": dict(configs)}).encode()
        # Guarded by the revision the change was computed from: a concurrent change is not overwritten.
        rev = await self._swap([tx.mod(key) == self._broker_config_rev.get(resource, 0)], [tx.put(key, doc)])
        if rev is None:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the dynamic broker configs changed meanwhile; retry")
        await self._wait_revision(rev, APPLY_TIMEOUT_S, "broker configs")

    def scram_credentials(self) -> scram.Credentials:
        return self._scram

    async def alter_scram_credentials(self, deletions: list[tuple[str, str]],
                                      upserts: list[tuple[str, str, scram.ScramCredential]]) -> None:
        tx = self.session.client.transactions
        creds = scram.applied(self._scram, deletions, upserts)
        doc = scram.encode(creds)
        # Guarded by the revision this change was computed from: a concurrent change is not overwritten.
        if not await self._txn([tx.mod(self.keys.scram_credentials) == self._scram_rev],
                               [tx.put(self.keys.scram_credentials, doc)]):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "SCRAM credentials changed meanwhile; retry")
        await self.wait_for(lambda: self._scram == creds, "SCRAM credentials")

    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls

    async def alter_acls(self, creations: list[AclBinding], deletions: list[AclBinding]) -> None:
        tx = self.session.client.transactions
        acls = acls_applied(self._acls, creations, deletions)
        # Guarded by the revision this change was computed from: a concurrent change is not overwritten.
        if not await self._txn([tx.mod(self.keys.acls) == self._acls_rev], [tx.put(self.keys.acls, encode_acls(acls))]):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "ACLs changed meanwhile; retry")
        await self.wait_for(lambda: self._acls == acls, "ACLs")

    def client_quotas(self) -> client_quotas.Quotas:
        return self._quotas

    async def alter_client_quotas(self, quotas: client_quotas.Quotas) -> None:
        tx = self.session.client.transactions
        # Guarded by the revision the change was computed from: a concurrent change is not overwritten.
        if not await self._txn([tx.mod(self.keys.client_quotas) == self._quotas_rev],
                               [tx.put(self.keys.client_quotas, client_quotas.encode(quotas))]):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "client quotas changed meanwhile; retry")
        await self.wait_for(lambda: self._quotas == quotas, "client quotas")

    def group_configs(self) -> dict[str, dict[str, str]]:
        return self._group_configs

    async def alter_group_configs(self, configs: dict[str, dict[str, str]]) -> None:
        tx = self.session.client.transactions
        doc = json.dumps(configs, sort_keys=True).encode()
        if not await self._txn([tx.mod(self.keys.group_configs) == self._group_configs_rev],
                               [tx.put(self.keys.group_configs, doc)]):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "group configs changed meanwhile; retry")
        await self.wait_for(lambda: self._group_configs == configs, "group configs")

    async def set_finalized_feature(self, name: str, level: int) -> None:
        tx = self.session.client.transactions
        levels = {**self._features, name: level}
        epoch = max(self._features_epoch, 0) + 1
        doc = json.dumps({"version": 1, "levels": levels, "epoch": epoch}).encode()
        if not await self._txn([tx.mod(self.keys.features) == self._features_rev], [tx.put(self.keys.features, doc)]):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "feature levels changed meanwhile; retry")
        await self.wait_for(lambda: self._features_epoch >= epoch, "feature levels")


    # --- elections and reassignments (ElectLeaders, AlterPartitionReassignments) ---------------
    # Like CreateTopics, these are done by the broker that receives the request, from its view,
    # with compare-and-swaps on the mod revisions the decision was made from (Kafka forwards them
    # to the controller; the effect is the same). Completing a reassignment is the controller's.
    def eligible_leaders(self) -> set[int]:
        """Brokers that may take leadership: the live (registered) ones not in controlled shutdown."""
        return {n for n, reg in self._brokers.items() if not reg.shutting_down}

    def reassignments(self) -> dict[tuple[str, int], tuple[list[int], Reassignment]]:
        """Every ongoing reassignment: (topic, partition) -> (current union replica list, adding/removing)."""
        return {(name, p): (list(rec.assignment.get(p, [])), ongoing)
                for name, rec in self._records.items() for p, ongoing in rec.reassignments.items()}

    async def _wait_revision(self, revision: int, timeout_s: float, what: str) -> None:
        try:
            await asyncio.wait_for(self.wait_for(lambda: self.revision >= revision, what), max(timeout_s, 0.0))
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what} was written to etcd but not seen back in time") from None

    async def _swap(self, compare: list, success: list) -> int | None:
        """One guarded transaction; the revision it wrote, or None when a guard failed."""
        self._check_writable()
        try:
            ok, responses = await self.session.client.transaction(compare=compare, success=success, failure=[])
        except TRANSIENT_ERRORS as e:
            raise _etcd_error(e) from e
        return responses[0].response_put.header.revision if ok else None

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None, election_type: int, *,
                            timeout_s: float = APPLY_TIMEOUT_S) -> dict[tuple[str, int], KafkaError | None]:
        """ElectLeaders: each partition's outcome (None: elected). ``partitions`` None means all of them,
        and then partitions that need no election are left out of the answer, as in Kafka."""
        every = partitions is None
        wanted = sorted(self._states) if every else partitions
        results: dict[tuple[str, int], KafkaError | None] = {}
        written = 0
        eligible = self.eligible_leaders()
        tx = self.session.client.transactions
        for topic, p in wanted:
            state = self._states.get((topic, p))
            if state is None:
                results[(topic, p)] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                 f"No such partition as {topic}-{p}")
                continue
            decided = elect(state, self.replicas(topic, p), eligible, election_type)
            if isinstance(decided, ErrorCode):
                if not (every and decided == ErrorCode.ELECTION_NOT_NEEDED):
                    results[(topic, p)] = KafkaError(decided)
                continue
            key = self.keys.partition(topic, p)
            new = replace(decided, partition_epoch=state.partition_epoch + 1)
            rev = await self._swap([tx.mod(key) == self._state_rev[(topic, p)]], [tx.put(key, new.to_json())])
            if rev is None:
                # Someone else changed the partition meanwhile: not retried blindly (the caller may ask again).
                results[(topic, p)] = KafkaError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                                                 if election_type == PREFERRED else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                                 f"{topic}-{p} changed during the election; try again")
                continue
            log.info("election (%s) of %s-%d: leader %d -> %d (epoch %d)", "preferred" if election_type == PREFERRED
                     else "unclean", topic, p, state.leader, new.leader, new.leader_epoch)
            written = max(written, rev)
            results[(topic, p)] = None
        if written:
            try:
                await self._wait_revision(written, timeout_s, "the elected leaders")
            except KafkaError as e:  # elected, but not seen back within timeout_ms (Kafka: REQUEST_TIMED_OUT)
                results = {k: e if r is None else r for k, r in results.items()}
        return results

    async def commit_assignment(self, name: str, record: TopicRecord, record_rev: int,
                                states: dict[int, tuple[PartitionState, PartitionState]]) -> int | None:
        """Write a topic record and partition states (old -> new) in one transaction, guarded by the topic
        key's mod revision and every partition key's view revision; the revision written, or None."""
        tx = self.session.client.transactions
        key = self.keys.topic(name)
        compare = [tx.mod(key) == record_rev]
        success = [tx.put(key, record.to_json())]
        for p, (old, new) in sorted(states.items()):
            pkey = self.keys.partition(name, p)
            compare.append(tx.mod(pkey) == self._state_rev.get((name, p), 0))
            if new != old:
                success.append(tx.put(pkey, replace(new, partition_epoch=old.partition_epoch + 1).to_json()))
        return await self._swap(compare, success)

    def _reassigned(self, name: str, changes: dict[int, list[int] | None], eligible: set[int]
                    ) -> tuple[TopicRecord, dict[int, tuple[PartitionState, PartitionState]], dict[int, KafkaError]]:
        """The record and states ``changes`` (partition -> target replicas, None: cancel) lead to, and the
        partitions refused with their error."""
        rec = self._records[name]
        assignment = {p: list(r) for p, r in rec.assignment.items()}
        moving = dict(rec.reassignments)
        states: dict[int, tuple[PartitionState, PartitionState]] = {}
        errors: dict[int, KafkaError] = {}
        for p, target in changes.items():
            state = self._states.get((name, p))
            if p not in assignment or state is None:
                errors[p] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{p}")
                continue
            ongoing = moving.get(p)
            if target is None:
                if ongoing is None:
                    errors[p] = KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                           f"No ongoing reassignment for {name}-{p}")
                    continue
                assignment[p], new = reassignment.revert(state, assignment[p], ongoing, eligible)
                del moving[p]
                states[p] = (state, new)
                continue
            try:
                reassignment.validate_target(target, self._brokers)
            except KafkaError as e:
                errors[p] = e
                continue
            assignment[p], ongoing = reassignment.plan(assignment[p], target)
            new = state
            if ongoing is not None and (done := reassignment.complete(state, assignment[p], ongoing, eligible)):
                (assignment[p], new), ongoing = done, None  # every target replica is in the ISR already
            if ongoing is None:
                moving.pop(p, None)
            else:
                moving[p] = ongoing
            states[p] = (state, new)
        return replace(rec, assignment=assignment, reassignments=moving), states, errors

    async def alter_reassignments(self, name: str, changes: dict[int, list[int] | None], *,
                                  timeout_s: float = APPLY_TIMEOUT_S) -> dict[int, KafkaError | None]:
        """AlterPartitionReassignments for one topic: each partition's outcome (None: accepted)."""
        if name not in self._records:
            err = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            return {p: err for p in changes}
        for _attempt in range(5):
            rec = self._records.get(name)
            if rec is None:
                err = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' was deleted meanwhile.")
                return {p: err for p in changes}
            new_rec, states, errors = self._reassigned(name, changes, self.eligible_leaders())
            if not states:
                return {p: errors.get(p) for p in changes}
            seen = self.revision
            rev = await self.commit_assignment(name, new_rec, self._topic_rev[name], states)
            if rev is not None:
                log.info("reassignment of %s: %s", name, {p: new_rec.assignment[p] for p in states})
                await self._wait_revision(rev, timeout_s, f"the reassignment of {name}")
                return {p: errors.get(p) for p in changes}
            # The topic or a partition changed since the view was read: decide again from the new view.
            with contextlib.suppress(KafkaError):
                await self._wait_revision(seen + 1, 2.0, "a newer view")
        err = KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The topic '{name}' kept changing; retry")
        return {p: err for p in changes}

    async def complete_reassignments(self, name: str) -> int:
        """Controller duty: finish the reassignments of ``name`` whose target replicas are all in the ISR;
        how many partitions were finished (0 also when the swap was lost: decided again next pass)."""
        rec = self._records.get(name)
        if rec is None or not rec.reassignments:
            return 0
        eligible = self.eligible_leaders()
        assignment = {p: list(r) for p, r in rec.assignment.items()}
        moving = dict(rec.reassignments)
        states: dict[int, tuple[PartitionState, PartitionState]] = {}
        for p, ongoing in rec.reassignments.items():
            state = self._states.get((name, p))
            done = None if state is None else reassignment.complete(state, assignment[p], ongoing, eligible)
            if done is not None:
                assignment[p], new = done
                del moving[p]
                states[p] = (state, new)
        if not states:
            return 0
        new_rec = replace(rec, assignment=assignment, reassignments=moving)
        if await self.commit_assignment(name, new_rec, self._topic_rev[name], states) is None:
            return 0
        log.info("reassignment of %s completed: %s", name, {p: assignment[p] for p in states})
        return len(states)


def _delay_after_create() -> float | None:
    """Test-only: ``KBROKERTEST_DELAY_POINT=etcd_store.after_create:<ms>`` holds every topic creation
    between its etcd write and its wait for the watch, so a request cancelled (client gone) after
    the write is testable deterministically."""
    name, _, ms = os.environ.get("KBROKERTEST_DELAY_POINT", "").rpartition(":")
    return int(ms) / 1000 if name == "etcd_store.after_create" and ms.isdigit() else None
