"""Request handlers, one module per Kafka API family, and the registry that maps an api key
to the versions kbroker serves and the coroutine that serves them.

A handler is ``async def handle(ctx: RequestContext, request) -> response | None`` where
``request`` is the decoded kafka-python struct and the response is a kafka-python struct of
the same version (None when no response is due, e.g. Produce with acks=0).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from security.authorizer import CLUSTER_NAME, AclOperation, Authorizer, ResourceType

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.replica_manager import ReplicaManager
    from broker.services import BrokerServices
    from cluster.metadata_store import MetadataStore


class CloseConnection(Exception):
    """Protocol violation (or a failed acks=0 produce): log it and close this connection only."""


@dataclass(slots=True)
class RequestContext:
    services: BrokerServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    client_port: int
    connection_id: int
    # Who sent the request: User:<SASL name>, User:<certificate subject> (SSL with client auth),
    # or User:ANONYMOUS.
    principal: str = "User:ANONYMOUS"
    # The listener the request came in on: brokers are advertised with that listener's address.
    listener: str = ""
    # Pipelined Produce (broker/connection.py): called by the handler once its appends are done and
    # what is left is waiting (replication, a flush), so the connection's next request may start.
    release: Callable[[], None] | None = None

    @property
    def metadata(self) -> MetadataStore:
        return self.services.metadata

    @property
    def partitions(self) -> ReplicaManager:
        return self.services.partitions

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def node_id(self) -> int:
        return self.services.node_id

    def broker_addresses(self) -> list[tuple[int, str, int, str | None]]:
        """(node id, host, port, rack) of the live brokers on this request's listener; as Kafka's
        metadataCache.getAliveBrokerNodes(listenerName), brokers without it are left out."""
        out = []
        for b in self.services.metadata.brokers():
            if (addr := b.address(self.listener)) is not None:
                out.append((b.node_id, addr[0], addr[1], b.rack))
        return out

    # --- authorization (security/authorizer.py): the one place handlers ask. With no authorizer
    # configured (authorizer.class.name empty) every answer is "allowed", as in Kafka.
    def authorizer(self) -> Authorizer | None:
        return self.services.authorizer

    def authorize(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        a = self.services.authorizer
        return a is None or a.authorize(self.principal, self.client_host, op, rtype, name)

    def authorize_cluster(self, op: AclOperation) -> bool:
        return self.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized(self, op: AclOperation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
        """The subset of ``names`` allowed (Kafka's AuthHelper.filterByAuthorized), each asked once."""
        a = self.services.authorizer
        unique = set(names)
        if a is None:
            return unique
        return {n for n in unique if a.authorize(self.principal, self.client_host, op, rtype, n)}

    def authorize_by_resource_type(self, op: AclOperation, rtype: ResourceType) -> bool:
        a = self.services.authorizer
        return a is None or a.authorize_by_resource_type(self.principal, self.client_host, op, rtype)


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    # A request decoder replacing the generic one: (body memoryview, version) -> request object.
    decoder: Callable[[memoryview, int], Any] | None = None


class RawResponse:
    """A response body already encoded as chunks (lets Fetch send segment bytes without re-encoding)."""

    __slots__ = ("chunks", "size")
    # What the request statistics read of every response (broker.metrics.stats): an encoded body's
    # errors are not looked into, as before, but the lookup no longer fails and is caught per request.
    error_code = 0

    def __init__(self, chunks: list[bytes | memoryview]) -> None:
        self.chunks = chunks
        self.size = sum(map(len, chunks))


# A response built from this many entries (groups, members, ...) or more is built and encoded on
# an executor thread (encode_off_loop): one large answer must not stall every other connection.
OFFLOAD_ENTRIES = 2_000


async def encode_off_loop(build: Callable[[], Any], version: int) -> RawResponse:
    """Build (``build()`` returns the response struct) and encode a large response on an executor
    thread. The encoding holds the GIL in slices, so the loop keeps serving other connections in
    between (a plain encode of 100,000 DescribeGroups entries is a second of loop time). ``build``
    must read only values captured on the loop for this request, never live broker state."""
    body = await asyncio.get_running_loop().run_in_executor(None, lambda: build().encode(version=version))
    return RawResponse([body])


HANDLERS: dict[int, Registration] = {}

HANDLER_MODULES = (
    "api_versions",
    "metadata",
    "topics",
    "produce",
    "fetch",
    "list_offsets",
    "offsets_for_leader_epoch",
    "configs",
    "cluster",
    "records",
    "producer_id",
    "coordinator",
    "groups",
    "transactions",
    "txn_markers",
    "features",
    "describe_topic_partitions",
    "acls",
    "client_quotas",
    "sasl",
    "scram",
    "elect_leaders",
    "reassignments",
    "share_groups",
    "share_fetch",
    "share_state",
)


def api(api_key: int, min_version: int, max_version: int, *,
        decoder: Callable[[memoryview, int], Any] | None = None) -> Callable[[Handler], Handler]:
    """Register a handler for ``api_key`` serving versions ``min_version..max_version``."""

    def deco(fn: Handler) -> Handler:
        HANDLERS[api_key] = Registration(api_key, min_version, max_version, fn, decoder)
        return fn

    return deco


def load_handlers() -> dict[int, Registration]:
    for name in HANDLER_MODULES:
        try:
            importlib.import_module(f"broker.handlers.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"broker.handlers.{name}":
                raise
    return HANDLERS
