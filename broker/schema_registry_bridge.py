"""The broker's side of the Schema Registry (registry/, issue 30): the interface the registry
reaches ``_schemas`` through (registry.access.RegistryAccess), its start and stop, and the
produce-path validation of topics with ``confluent.key/value.schema.validation``.

``_schemas`` is an ordinary compacted topic with one partition (Confluent's layout), created on
the first write with ``kbroker.schema.registry.topic.replication.factor`` replicas (at most the
live brokers, as Confluent's KafkaStore does). Appends are coordinator-style appends through
coordinator_bridge.LocalPartitionAccess: leader only, refused below min.insync.replicas, answered
once the ISR has them. Other brokers' registry URLs are asked with DescribeConfigs of their
``kbroker.schema.registry.advertised.listener`` over the inter-broker connection.

The validation hook costs a dict lookup per partition batch when no topic validates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kafka.protocol.admin import DescribeConfigsRequest
from kafka.protocol.consumer import FetchRequest

from broker.config import BrokerConfig
from broker.coordinator_bridge import LocalPartitionAccess
from protocol.errors import ErrorCode, KafkaError
from registry.access import TOPIC
from registry.validation import TopicValidation, batch_fields, strategy_name
from storage.batch import BatchHeader, iter_headers, parse_header

if TYPE_CHECKING:
    from broker.services import BrokerServices

log = logging.getLogger("broker.schema_registry")

LISTENER = "kbroker.schema.registry.listener"
ADVERTISED = "kbroker.schema.registry.advertised.listener"
KEY_VALIDATION, VALUE_VALIDATION = "confluent.key.schema.validation", "confluent.value.schema.validation"
KEY_STRATEGY, VALUE_STRATEGY = "confluent.key.subject.name.strategy", "confluent.value.subject.name.strategy"
VALIDATION_CONFIGS = (KEY_VALIDATION, VALUE_VALIDATION, KEY_STRATEGY, VALUE_STRATEGY)


def topic_validation(configs: dict[str, str]) -> TopicValidation | None:
    """A topic's validation settings from its config overrides (None: it validates nothing)."""
    keys = configs.get(KEY_VALIDATION, "false").strip().lower() == "true"
    values = configs.get(VALUE_VALIDATION, "false").strip().lower() == "true"
    if not keys and not values:
        return None
    return TopicValidation(keys, values, strategy_name(configs.get(KEY_STRATEGY)),
                           strategy_name(configs.get(VALUE_STRATEGY)))


class BrokerRegistryAccess:
    """``services``: what the broker hands its parts; ``partitions``: coordinator-style appends."""

    def __init__(self, services: BrokerServices, partitions: LocalPartitionAccess) -> None:
        self.services = services
        self.node_id = services.node_id
        self._partitions = partitions
        self._urls: dict[int, str] = {}
        self._creating: asyncio.Task[None] | None = None

    def _part(self) -> Any:
        return self.services.partitions.get(TOPIC, 0)

    async def ensure_topic(self) -> None:
        if self.services.metadata.get_topic(TOPIC) is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creating)

    async def _create(self) -> None:
        rf = int(self.services.config.get("kbroker.schema.registry.topic.replication.factor")) \
            if self.services.clustered else 1
        live = len(self.services.metadata.brokers())
        if live < rf and self.services.clustered:
            log.warning("creating %s with replication factor %d: only %d brokers are registered (wanted %d)",
                        TOPIC, live, live, rf)
        try:
            await self.services.topics.create_topic(TOPIC, 1, {"cleanup.policy": "compact"}, replication_factor=min(rf, live))
            log.info("created %s (1 partition, compacted, replication factor %d)", TOPIC, min(rf, live))
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    def partition_identity(self) -> tuple | None:
        part = self._part()
        info = self.services.metadata.get_topic(TOPIC)
        if part is None or info is None:
            return None
        return (info.topic_id, part.leader_epoch, self.is_leader())

    def is_leader(self) -> bool:
        part, _ = self.services.partitions.get_leader(TOPIC, 0)
        return part is not None

    def leader(self) -> int | None:
        md = self.services.metadata
        if md.get_topic(TOPIC) is None:
            return None
        leader = md.leader(TOPIC, 0)
        return leader if leader is not None and leader >= 0 else None

    def log_start_offset(self) -> int:
        part = self._part()
        return 0 if part is None else part.log.log_start_offset

    def log_end_offset(self) -> int:
        part = self._part()
        return 0 if part is None else part.log.log_end_offset

    def high_watermark(self) -> int:
        part = self._part()
        return 0 if part is None else part.high_watermark

    def iter_batches(self, start_offset: int) -> Iterator[tuple[BatchHeader, bytes]]:
        part = self._part()
        return iter(()) if part is None else part.log.iter_batches(start_offset)

    async def wait_for_change(self, timeout_s: float) -> None:
        part = self._part()
        if part is None:
            await asyncio.sleep(timeout_s)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        part.add_waiter(fut)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, timeout_s)
        finally:
            part.remove_waiter(fut)

    async def append(self, batch: bytes) -> int:
        base = await self._partitions.append(TOPIC, 0, batch)
        return base + parse_header(batch).records_count

    def topic_id(self) -> object | None:
        info = self.services.metadata.get_topic(TOPIC)
        return None if info is None else info.topic_id

    async def fetch_remote(self, offset: int) -> tuple[list[tuple[BatchHeader, bytes]], int] | None:
        leader = self.leader()
        if leader is None or leader == self.node_id:
            return None
        F = FetchRequest.FetchTopic
        req = FetchRequest(
            version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
            topics=[F(version=12, topic=TOPIC, partitions=[F.FetchPartition(
                version=12, partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=8 << 20)])])
        try:
            resp = await self.services.inter_broker.request(leader, req, 12, 10.0)
        except (ConnectionError, TimeoutError) as e:
            log.info("reading %s from broker %d failed: %r", TOPIC, leader, e)
            return None
        part = resp.responses[0].partitions[0] if resp.responses else None
        if part is None or part.error_code:
            if part is not None and part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                return [], -1  # below the log start or past the end: replay again from the start
            return None
        data = part.records or b""
        batches = []
        for h in iter_headers(data, check=False):  # a trailing partial batch ends the answer
            batches.append((h, bytes(memoryview(data)[h.position:h.position + h.size])))
        return batches, part.high_watermark

    async def registry_url(self, node_id: int) -> str | None:
        if node_id == self.node_id:
            return self.services.config.get(ADVERTISED)
        if node_id in self._urls:
            return self._urls[node_id]
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(version=4, resources=[R(version=4, resource_type=4, resource_name=str(node_id),
                                                             configuration_keys=[ADVERTISED])],
                                     include_synonyms=False, include_documentation=False)
        try:
            resp = await self.services.inter_broker.request(node_id, req, 4, 10.0)
        except (ConnectionError, TimeoutError) as e:
            log.info("cannot ask broker %d for its schema registry URL: %r", node_id, e)
            return None
        result = resp.results[0]
        url = next((c.value for c in result.configs if c.name == ADVERTISED), None) if not result.error_code else None
        if url:
            self._urls[node_id] = url
        return url


def advertised_url(cfg: BrokerConfig, bound: tuple[str, int]) -> str:
    """The URL other brokers forward registry writes to: the configured advertised listener, else
    the listener with its bound port (and, for a wildcard host, the broker's advertised host)."""
    if cfg.get(ADVERTISED):
        return cfg.get(ADVERTISED)
    url = urlsplit(cfg.get(LISTENER))
    host = url.hostname or ""
    if host in ("", "0.0.0.0", "::"):
        host = cfg.advertised_listeners[0].host or "127.0.0.1"
    return f"{url.scheme}://{host}:{bound[1]}"


class SchemaRegistryBridge:
    """Owns the broker's RegistryNode and the per-topic validation settings."""

    def __init__(self) -> None:
        self.node: Any = None
        # topic -> settings, only for topics that validate: the produce path's one lookup.
        self.validated: dict[str, TopicValidation] = {}

    async def start(self, services: BrokerServices, partitions: LocalPartitionAccess) -> None:
        for info in services.metadata.topics().values():
            self.topic_changed(info.name, info.configs)
        cfg = services.config
        listener = cfg.get(LISTENER)
        if not listener:
            if self.validated:
                log.warning("topics %s ask for schema validation but %s is not set: their records are refused",
                            sorted(self.validated), LISTENER)
            return
        from registry.node import RegistryNode

        access = BrokerRegistryAccess(services, partitions)
        server_ssl, client_ssl = self._ssl(cfg, listener)
        self.node = RegistryNode(access, listener, max_schema_bytes=int(cfg.get("kbroker.schema.registry.max.schema.bytes")),
                                 ssl_context=server_ssl, client_ssl=client_ssl, authenticate=self._authenticator(services))
        bound = await self.node.start()
        cfg.originals[ADVERTISED] = advertised_url(cfg, bound)
        cfg._cache.pop(ADVERTISED, None)  # noqa: SLF001 - the resolved value is served by DescribeConfigs

    async def stop(self) -> None:
        if self.node is not None:
            await self.node.stop()
            self.node = None

    def topic_changed(self, name: str, configs: dict[str, str] | None) -> None:
        settings = topic_validation(configs) if configs is not None else None
        if settings is None:
            self.validated.pop(name, None)
        else:
            self.validated[name] = settings

    async def check_batch(self, topic: str, settings: TopicValidation, records: bytes | bytearray | memoryview
                          ) -> tuple[str, list[tuple[int, str]]] | None:
        """None when the batch passes; else (message, record errors). A batch that does not decode
        is left to the append's own validation (it answers CORRUPT_MESSAGE / INVALID_RECORD)."""
        if self.node is None:
            return (f"Schema validation is on for {topic} but this broker serves no schema registry "
                    f"({LISTENER} is not set)", [])
        decoded = batch_fields(records)
        if decoded is None:  # malformed: answered by the append path
            return None
        errors = await self.node.validate(topic, settings, decoded)
        if not errors:
            return None
        log.info("produce to %s refused by schema validation: %d of %d records (first: %s)", topic, len(errors),
                 len(decoded), errors[0][1])
        return errors[0][1], errors

    def _ssl(self, cfg: BrokerConfig, listener: str) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
        """TLS for an https:// listener from the broker's own ssl.* settings (keystore, truststore,
        ssl.client.auth), and the client side used when forwarding to another broker."""
        if not listener.startswith("https://"):
            return None, None
        from broker.schema_registry_security import client_context, server_context

        return server_context(cfg), client_context(cfg)

    def _authenticator(self, services: BrokerServices) -> Any:
        if not services.config.get("kbroker.schema.registry.basic.auth"):
            return None
        from broker.schema_registry_security import make_authenticator

        return make_authenticator(services.config, services.metadata)
