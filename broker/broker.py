"""The broker process: wires config, metadata, storage, coordinators and the server together,
runs the background schedulers (flush, retention, checkpoints, cleaner) and shuts down cleanly.

The broker is the composition root: it builds the parts in order (metadata store, logs, the
replica manager, coordinators, the services handlers see, the listeners) and hands each one only
what it uses; no part holds the broker itself. The flush scheduler (flush.ms, segments rolled
since the last flush) goes through broker.log_flusher like the produce path: plan on the loop,
fsync in the executor, complete on the loop, never two flushes of one log at once. Shutdown waits
for flushes in flight before the final synchronous flush of every log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from broker import inter_broker_security, log_flusher
from broker.config import BrokerConfig, log_config_properties, topic_log_config
from broker.config.dynamic_watch import DynamicConfigWatch
from broker.config.listeners import unimplemented_listeners
from broker.config_effects import apply_config_effects
from broker.coordinator_bridge import LocalPartitionAccess
from broker.fetch_sessions import FetchSessionCache
from broker.handlers import load_handlers
from broker.inter_broker import InterBrokerClients
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from broker.replication.env import ReplicaEnv
from broker.schema_registry_bridge import SchemaRegistryBridge
from broker.server import KafkaServer
from broker.services import BrokerServices
from broker.share.persister import SharePersister
from broker.share.services import ShareServices
from broker.share.share_partition_manager import SharePartitionManager
from broker.share.share_sessions import ShareSessionCache
from broker.topic_admin import TopicAdmin
from broker.txn_marker_channel import MarkerChannel
from broker.txn_marker_writer import MarkerWriter
from broker.txn_verification import TxnVerifier
from cluster.local_store import LocalMetadataStore
from cluster.metadata_store import INTERNAL_TOPICS, BrokerInfo, MetadataStore, TopicInfo
from coordinator.group_coordinator import GroupCoordinator
from coordinator.producer_id_manager import ProducerIdManager
from coordinator.share_coordinator import ShareCoordinator
from coordinator.txn_coordinator import TransactionCoordinator
from security.authorizer import authorizer_from_config
from security.quotas import ClientQuotaManager
from storage import dir_failure
from storage.cleaner import LogCleaner, should_clean
from storage.dir_lock import lock_dirs
from storage.log_manager import LogManager
from storage.producer_state import ProducerStateManager

log = logging.getLogger("broker")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _halt_on_log_dir_failure(log_dir: Path, error: OSError) -> None:
    """A write into a log dir failed (storage/dir_failure.py): as Kafka's LogManager when every log
    dir has failed, halt at once, from whichever thread saw it. No shutdown: nothing more may be
    written, acknowledged or served from a dir that may hold part of a write; the leaderships move
    to the other replicas when the etcd lease expires, and the next start recovers the dir."""
    log.critical("Shutdown broker because all log dirs in %s have failed: %s (halting)", log_dir, error)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(1)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.log_dirs = [Path(d).resolve() for d in config.log_dirs]
        # Built by start(), in this order.
        self.metadata: MetadataStore
        self.log_manager: LogManager
        self.inter_broker: InterBrokerClients | None = None  # cluster mode: markers, KIP-890 verification
        self.verifier: TxnVerifier
        self.replica_manager: ReplicaManager
        self.topics: TopicAdmin
        self.producer_ids: ProducerIdManager
        self.txn_coordinator: TransactionCoordinator
        self.group_coordinator: GroupCoordinator | None = None
        self.marker_writer: MarkerWriter
        self.partition_access: LocalPartitionAccess
        self.services: BrokerServices
        # Followers' incremental fetch sessions (KIP-227), served by the Fetch handler.
        self.fetch_sessions = FetchSessionCache(int(config.get("max.incremental.fetch.session.cache.slots")))
        self.quotas = ClientQuotaManager(lambda: self.metadata.client_quotas(), int(config.get("quota.window.num")),
                                         int(config.get("quota.window.size.seconds")))
        self.server = KafkaServer(config, self.quotas)
        # KIP-932 share groups: share sessions (they end with their connection), the share-partitions
        # this broker leads and the share-state client (broker/share/), the share coordinator.
        self.share_sessions = ShareSessionCache(int(config.get("group.share.max.share.sessions")))
        self.share: ShareServices | None = None
        self.server.disconnect_listeners.append(self._share_connection_closed)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._cleaner: Any = None
        self._uncleanable: set[str] = set()
        self.bound: list[tuple[str, int]] = []
        self.cluster: Any = None  # cluster.node.ClusterNode in cluster mode
        self.metrics_endpoint: Any = None  # broker.metrics.endpoint.MetricsEndpoint when configured
        # Schema Registry (kbroker.schema.registry.listener) and produce-path schema validation.
        self.schema_registry = SchemaRegistryBridge()

    def topic_properties(self, overrides: dict[str, str]) -> dict[str, str]:
        return log_config_properties(overrides, self.config)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        load_handlers()
        # Refuse before touching anything: never serve plaintext where TLS or SASL was asked for.
        if refused := unimplemented_listeners(self.config.listeners, self.config.security_protocol_map):
            raise OSError("; ".join(f"listener {li} has security protocol {proto}, which kbroker does not implement"
                                    for li, proto in refused) + " (only PLAINTEXT is served); refusing to start")
        self.server.check_listeners()  # TLS / SASL settings usable: refuse before touching the dirs
        if self.config.get("kbroker.etcd.endpoints"):  # and the client side of the inter-broker listener
            inter_broker_security.check(self.config)
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        # Before anything in the dirs is read or written; held until the process exits.
        self._dir_locks = lock_dirs(self.log_dirs)
        dir_failure.set_handler(_halt_on_log_dir_failure)
        advertised = self.config.advertised_listeners[0]
        if self.config.get("kbroker.etcd.endpoints"):
            self.metadata = await self._join_cluster(advertised)
        else:
            endpoints = {li.name: (li.host, li.port) for li in self.config.advertised_listeners}
            self.metadata = LocalMetadataStore(self.log_dirs[0], BrokerInfo(self.node_id, advertised.host,
                                                                            advertised.port, None, endpoints),
                                               cluster_id=self.config.get("cluster.id") or None)
        self._write_meta_properties()
        # The dynamic broker configs the store holds now, and every later change of the cluster
        # default or of this broker's own (broker/config/dynamic_watch.py), with their effects.
        self.config_watch = DynamicConfigWatch(self.config, self.metadata, self.node_id)
        self.config_watch.add_effect(lambda names: apply_config_effects(self, names))
        self.config_watch.start()
        topics = self.metadata.topics()
        cfg = self.config
        # Logs are opened (and recovered) with their topic's configuration, as Kafka does.
        self.log_manager = LogManager(
            self.log_dirs, topic_log_config({}, cfg), producer_state_factory=self._producer_state_factory(),
            config_for_topic=lambda t: topic_log_config(topics[t].configs, cfg) if t in topics else None)
        t0 = time.perf_counter()
        self.log_manager.startup()
        self._build_partitions()
        for info in self.metadata.topics().values():
            lm = self.log_manager
            if info.internal or all(lm.get_log(info.name, p) is not None for p in range(info.num_partitions)):
                self.replica_manager.ensure_topic(info.name, info.num_partitions, info.configs)
            else:
                # A creation a stop interrupted: finished in the background, like a new one, so
                # thousands of missing partitions do not hold up the start.
                self.replica_manager.start_creation(info.name, info.topic_id)
        known = set(self.metadata.topics())
        for lg in list(self.log_manager.all_logs()):
            if lg.topic not in known:
                log.warning("log %s belongs to no known topic; leaving it untouched", lg.dir)
        log.info("loaded %d partitions of %d topics in %.1f ms", len(self.replica_manager.partitions),
                 len(known), (time.perf_counter() - t0) * 1000)
        self.metadata.add_listener(self._on_metadata_event)
        self._init_producer_ids()
        if self.cluster is not None:
            await self.producer_ids.ready()
        await self._start_coordinators()
        if self.cluster is not None:
            for part in list(self.replica_manager.all()):
                self.partition_role_changed(part)
        self.services = BrokerServices(
            node_id=self.node_id, config=cfg, log_dirs=self.log_dirs, metadata=self.metadata,
            partitions=self.replica_manager, topics=self.topics, txn_coordinator=self.txn_coordinator,
            group_coordinator=self.group_coordinator, producer_ids=self.producer_ids, verifier=self.verifier,
            markers=self.marker_writer, fetch_sessions=self.fetch_sessions, quotas=self.quotas,
            authorizer=authorizer_from_config(cfg.get, lambda: self.metadata.acls()),
            listener_security=self.server.check_listeners, schemas=self.schema_registry,
            inter_broker=self.inter_broker, clustered=self.cluster is not None, share=self.share)
        # The registry listens before the Kafka listeners: a client that reached the broker finds it.
        await self.schema_registry.start(self.services, self.partition_access)
        self.bound = await self.server.start(self.services)
        if listener := self.config.get("kbroker.prometheus.listener"):
            from broker.metrics.endpoint import MetricsEndpoint

            self.metrics_endpoint = MetricsEndpoint(self, listener)
            await self.metrics_endpoint.start()
        if self.bound and self.cluster is None:
            # Ephemeral listener ports (tests): advertise what was actually bound.
            me = self.metadata.brokers()[0]
            bound = self.server.bound_ports
            for name, (host, port) in list(me.endpoints.items()):
                if port == 0 and name in bound:
                    me.endpoints[name] = (host, bound[name])
            if me.port == 0:
                me.host, me.port = me.endpoints.get(advertised.name, (me.host, self.bound[0][1]))
        self._start_schedulers()
        self.replica_manager.start_replication()
        log.info("kbroker node %d started (cluster id %s), log dirs %s", self.node_id, self.metadata.cluster_id,
                 ", ".join(map(str, self.log_dirs)))

    def _build_partitions(self) -> None:
        """The replica manager over the opened logs, with what it needs: the transaction verifier
        and, in a cluster, inter-broker connections (followers' fetchers, markers, verification)."""
        cfg = self.config
        clustered = self.cluster is not None
        if clustered:
            self.inter_broker = InterBrokerClients(self.node_id, cfg, self.metadata)

        async def connect(host: str, port: int, client_id: str) -> Any:
            return await inter_broker_security.connect(cfg, host, port, client_id=client_id)

        env = ReplicaEnv(self.node_id, cfg, self.metadata, self.cluster, connect if clustered else None)
        self.verifier = TxnVerifier(self.node_id, self.metadata, self.inter_broker)
        self.replica_manager = ReplicaManager(env, self.log_manager, self.verifier,
                                              on_role_change=self.partition_role_changed)
        self.replica_manager.fetch_sessions = self.fetch_sessions
        self.topics = TopicAdmin(cfg, self.metadata, self.replica_manager, clustered=clustered)

    async def _start_coordinators(self) -> None:
        cfg = self.config
        self.marker_writer = MarkerWriter(self.replica_manager, lambda: self.group_coordinator)
        channel = MarkerChannel(self.node_id, self.metadata, self.marker_writer, self.inter_broker)
        access = self.partition_access = LocalPartitionAccess(self.node_id, cfg, self.replica_manager, self.topics,
                                                              channel)
        share_coordinator = ShareCoordinator(access, cfg, partition_count=self._topic_partition_count)
        share_coordinator.follows_leadership = self.cluster is not None
        persister = SharePersister(self.node_id, cfg, self.metadata, share_coordinator, self.inter_broker)
        access.share_state = persister  # what the group coordinator initializes share-partitions with
        self.share = ShareServices(self.share_sessions,
                                   SharePartitionManager(cfg, self.metadata, self.replica_manager, persister),
                                   persister, share_coordinator)
        self.txn_coordinator = TransactionCoordinator(access, cfg, self.producer_ids)
        self.verifier.coordinator = self.txn_coordinator
        # Cluster mode (issue 15): coordinators serve the internal partitions this broker leads.
        self.txn_coordinator.follows_leadership = self.cluster is not None
        await self.txn_coordinator.start()
        self.group_coordinator = GroupCoordinator(access, cfg, self.node_id)
        self.group_coordinator.follows_leadership = self.cluster is not None
        self.group_coordinator.group_configs = lambda g: self.metadata.group_configs().get(g, {})
        await self.group_coordinator.start()
        await share_coordinator.start()

    async def _join_cluster(self, advertised: Any) -> MetadataStore:
        """Cluster mode (kbroker.etcd.endpoints set; cluster/node.py): etcd session, cluster id
        checked against meta.properties, registration (a live duplicate node.id refuses the
        start), controller election. Imported here so single-node mode never loads aetcd."""
        from cluster.node import ClusterNode, ClusterStartError
        from cluster.records import Endpoint

        cfg = self.config
        if not (cfg.is_set("node.id") or int(cfg.get("broker.id")) >= 0):
            raise OSError("cluster mode (kbroker.etcd.endpoints) needs an explicit node.id, unique in the cluster")
        if advertised.port == 0:
            raise OSError("cluster mode needs a fixed listener port (other brokers and clients must reach it)")
        settings = {name: cfg.get(name) for name in (
            "kbroker.etcd.endpoints", "kbroker.etcd.username", "kbroker.etcd.password", "kbroker.etcd.ssl.cafile",
            "kbroker.etcd.ssl.certfile", "kbroker.etcd.ssl.keyfile",
            "broker.session.timeout.ms", "broker.heartbeat.interval.ms", "initial.broker.registration.timeout.ms")}
        settings.update({name: cfg.get(name) for name in (  # the controller's preferred-leader rebalance
            "auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds",
            "leader.imbalance.per.broker.percentage", "unclean.leader.election.enable")})
        try:
            self.cluster = await ClusterNode.start(
                settings, node_id=self.node_id,
                endpoints=[Endpoint(li.name, li.host, li.port) for li in cfg.advertised_listeners],
                rack=cfg.get("broker.rack") or None, log_dirs=self.log_dirs,
                default_replication_factor=lambda: int(cfg.get("default.replication.factor")))
        except ClusterStartError as e:
            raise OSError(str(e)) from None
        return self.cluster.store

    def _producer_state_factory(self) -> Callable[[Path], ProducerStateManager]:
        # Read at each creation: producer.id.expiration.ms is dynamic (broker/config_effects.py).
        return lambda d: ProducerStateManager(d, producer_id_expiration_ms=int(self.config.get("producer.id.expiration.ms")))

    def _init_producer_ids(self) -> None:
        source = None
        if self.cluster is not None:  # blocks from etcd: unique across the brokers of the cluster
            allocator, node = self.cluster.producer_ids, self.node_id

            async def source() -> tuple[int, int]:
                block = await allocator.allocate(node)
                return block.first, block.last

        self.producer_ids = ProducerIdManager(self.log_dirs[0] / "kbroker-producer-id-block", block_source=source)
        self.producer_ids.prefetch()  # the first block is durable before the first InitProducerId, off the loop

    def _write_meta_properties(self) -> None:
        for d in self.log_dirs:
            path = d / "meta.properties"
            if path.exists():
                continue
            dir_id = uuid.uuid4()
            path.write_text(
                "#\n#kbroker\n"
                f"node.id={self.node_id}\n"
                f"directory.id={_uuid_str(dir_id)}\n"
                "version=1\n"
                f"cluster.id={self.metadata.cluster_id}\n"
            )

    def _on_metadata_event(self, event: str, info: TopicInfo) -> None:
        if event in ("created", "partitions"):
            # In steps off the loop (a topic may have thousands of partitions); create_topic and
            # add_partitions wait for it before answering.
            self.replica_manager.start_creation(info.name, info.topic_id)
        elif event == "deleted":
            self.replica_manager.remove_topic(info.name)
            if self.share is not None:
                self.share.partitions.drop_partition(info.name)
                task = asyncio.create_task(self.share.coordinator.delete_topic_states({info.topic_id}),
                                           name=f"share-state-cleanup-{info.name}")
                self._tasks.append(task)
        elif event == "configs":
            self.replica_manager.update_configs(info.name, info.configs)
        elif event == "leaders":
            self.replica_manager.update_leadership(info.name)
        if event in ("created", "configs", "deleted"):
            self.schema_registry.topic_changed(info.name, None if event == "deleted" else info.configs)
        if event in ("created", "deleted") and self.group_coordinator is not None:
            self.group_coordinator.on_topics_changed()  # KIP-848 regex subscriptions are resolved again

    def partition_role_changed(self, part: Partition) -> None:
        """Cluster mode (issue 15): a coordinator serves exactly the internal partitions this
        broker leads. It loads one when this broker becomes its leader (the transaction
        coordinator at the leader epoch, its coordinator epoch) and unloads it when the
        leadership moves away (NOT_COORDINATOR from then on). Called by the replica manager
        after every role decision."""
        share = self.share
        if part.leader_state is None and self.cluster is not None and share is not None:
            share.partitions.drop_partition(part.topic, part.index)  # share-partitions follow leadership
        if self.cluster is None or part.topic not in INTERNAL_TOPICS:
            return
        coord = next((c for c in (self.group_coordinator, getattr(self, "txn_coordinator", None),
                                  share.coordinator if share is not None else None)
                      if c is not None and c.topic == part.topic and hasattr(c, "unload_partition")), None)
        if coord is None:
            return
        p = part.index
        if part.leader_state is None:
            if coord.is_loaded(p):
                coord.unload_partition(p)
            return
        if coord is self.txn_coordinator:
            coord.load_partition(p, part.leader_epoch)
        elif share is not None and coord is share.coordinator:
            coord.load_partition(p)
        elif not coord.is_loaded(p):
            task = asyncio.create_task(coord.load_partition(p), name=f"load-{part.topic}-{p}")
            self._tasks.append(task)

    def _topic_partition_count(self, topic_id: uuid.UUID) -> int | None:
        info = self.metadata.get_topic_by_id(topic_id)
        return None if info is None else info.num_partitions

    def _share_connection_closed(self, connection_id: int) -> None:
        """A connection closed: the share sessions it opened end, as with a final ShareFetch
        (Kafka's ConnectionDisconnectListener): their members' acquired records are released."""
        sessions = self.share_sessions.on_disconnect(connection_id)
        share = self.share
        if not sessions or share is None:
            return

        async def release() -> None:
            for s in sessions:
                group_id, member_id = s.key
                log.info("share session of group %s member %s ended with its connection; releasing its records",
                         group_id, member_id)
                await share.partitions.release(group_id, member_id, list(s.partitions))
                if not self.share_sessions.group_has_sessions(group_id):
                    share.partitions.drop_group(group_id)

        task = asyncio.get_running_loop().create_task(release(), name="share-session-release")
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    # --- schedulers --------------------------------------------------------------------------

    def _every(self, interval_ms: int | Callable[[], int], fn: Callable[[], Awaitable[None]], name: str) -> None:
        """Run ``fn`` every ``interval_ms`` (a callable: read again before each sleep, for a dynamic
        config). As Kafka's scheduler does for a period <= 0 (an accepted value of e.g.
        log.flush.offset.checkpoint.interval.ms), such a task runs once."""
        async def loop() -> None:
            while True:
                interval = interval_ms() if callable(interval_ms) else interval_ms
                await asyncio.sleep(max(interval, 0) / 1000)
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("background task %s failed", name)
                if interval <= 0:
                    return

        self._tasks.append(asyncio.create_task(loop(), name=name))

    def _start_schedulers(self) -> None:
        cfg = self.config
        # Kafka's default scheduler interval is "never"; topics with flush.ms still need checking.
        self._every(min(int(cfg.get("log.flush.scheduler.interval.ms")), 1000), self._flush_due, "log-flusher")
        self._every(int(cfg.get("log.retention.check.interval.ms")), self._retention, "log-retention")
        self._every(int(cfg.get("log.flush.offset.checkpoint.interval.ms")), self._checkpoint, "checkpoint")
        self._every(int(cfg.get("producer.id.expiration.check.interval.ms")), self._expire_producers,
                    "producer-expiration")
        if cfg.get("log.cleaner.enable"):
            self._every(lambda: int(cfg.get("log.cleaner.backoff.ms")), self._clean, "log-cleaner")

    async def _flush_due(self) -> None:
        now = _now_ms()
        pending = []
        for part in list(self.replica_manager.all()):
            target = part.log.flush_target(now)
            if target is not None:
                pending.append(log_flusher.flush(part, target))
        if pending:
            # Failures are logged by the flusher; the next round retries (the segments stay dirty).
            await asyncio.gather(*pending, return_exceptions=True)

    async def _retention(self) -> None:
        now = _now_ms()
        for part in list(self.replica_manager.all()):
            deleted = part.log.apply_retention(now)
            if deleted:
                log.info("retention deleted %d segment(s) of %s-%d; log start offset now %d", deleted,
                         part.topic, part.index, part.log.log_start_offset)

    async def _expire_producers(self) -> None:
        now = _now_ms()
        for part in list(self.replica_manager.all()):
            if part.producer_state is not None:
                part.producer_state.remove_expired(now)

    async def _checkpoint(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.checkpoint)

    async def _clean(self) -> None:
        if self._cleaner is None:
            self._cleaner = LogCleaner()
        now = _now_ms()
        for part in list(self.replica_manager.all()):
            if "compact" not in part.log.config.cleanup_policy or part.log.topic in self._uncleanable:
                continue
            lso = part.last_stable_offset
            if not should_clean(part.log, now, last_stable_offset=lso):
                continue
            try:
                stats = await self._cleaner.clean_log_async(part.log, now, last_stable_offset=lso)
            except Exception:
                # Kafka marks such a partition uncleanable rather than retrying forever.
                log.exception("cleaning %s-%d failed; marking the topic uncleanable until restart",
                              part.topic, part.index)
                self._uncleanable.add(part.log.topic)
                continue
            log.info("cleaned %s-%d: %s", part.topic, part.index, stats)

    async def run_until_stopped(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    async def stop(self) -> None:
        log.info("shutting down")
        if self.cluster is not None and (cfg := self.config).get("controlled.shutdown.enable"):  # first: hand over
            await self.cluster.controlled_shutdown(max_retries=cfg.get("controlled.shutdown.max.retries"),
                                                   retry_backoff_s=cfg.get("controlled.shutdown.retry.backoff.ms") / 1000)
        # Partition creation stops at its current step (the topics are registered: the next
        # start completes them); the process-level deadline (kbroker.shutdown.timeout.ms, see
        # broker.serve) bounds the rest.
        await self.replica_manager.cancel_creations()
        await self.replica_manager.stop_replication()  # first: no acks=all request may hold the listeners
        await self.server.stop()
        await self.schema_registry.stop()
        if self.inter_broker is not None:
            await self.inter_broker.close()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        await self.txn_coordinator.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.stop()
        if self.share is not None:
            await self.share.partitions.stop()
            await self.share.coordinator.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.replica_manager.wait_flushes()
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        if self.cluster is not None:
            await self.cluster.stop()  # last: deregistering hands this broker's leaderships over
        log.info("shut down cleanly")


def _uuid_str(u: uuid.UUID) -> str:
    import base64

    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")
