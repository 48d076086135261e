"""The etcd key layout of a kbroker cluster, and the one-time creation of its cluster id.

Everything lives under ``/kbroker/``::

    /kbroker/cluster_id                     the cluster id, created once (create-revision == 0 compare)
    /kbroker/<cluster id>/brokers/<node id> BrokerRegistration JSON, bound to the broker's lease
    /kbroker/<cluster id>/topics/<name>     TopicRecord JSON: id, configs, replica assignment
    /kbroker/<cluster id>/partitions/<topic>/<partition>
                                            PartitionState JSON: leader, leader_epoch, isr, partition_epoch
    /kbroker/<cluster id>/controller        the elected controller's node id, bound to its lease
    /kbroker/<cluster id>/producer_ids      the last producer-id block handed out
    /kbroker/<cluster id>/broker_configs/default
                                            cluster-wide dynamic broker configs (AlterConfigs, resource "")
    /kbroker/<cluster id>/broker_configs/<node id>
                                            that broker's own dynamic configs (AlterConfigs, resource "<id>")
    /kbroker/<cluster id>/broker_configs    the one JSON object of earlier versions (defaults as
                                            "cluster-default:<name>"); read where no key above exists
    /kbroker/<cluster id>/features          finalized feature levels and their epoch
    /kbroker/<cluster id>/scram_credentials SCRAM credentials (salted and hashed), security/scram_credentials.py
    /kbroker/<cluster id>/client_quotas     client quotas (AlterClientQuotas), security/quotas.py
    /kbroker/<cluster id>/group_configs     dynamic group configs (IncrementalAlterConfigs GROUP), one JSON object
    /kbroker/<cluster id>/acls              ACLs (CreateAcls/DeleteAcls), security/authorizer.py

Topic names cannot hold ``/`` (Kafka allows only ``[a-zA-Z0-9._-]``), so a topic's partitions prefix
``partitions/<topic>/`` never matches another topic. Values are defined in ``cluster.records``.
"""

from __future__ import annotations

import base64
import uuid

import aetcd

ROOT = "/kbroker"


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def cluster_id_key(root: str = ROOT) -> bytes:
    return f"{root}/cluster_id".encode()


class KeyLayout:
    """The keys of one cluster; ``root`` is only changed by tests that share an etcd."""

    def __init__(self, cluster_id: str, root: str = ROOT) -> None:
        if not cluster_id or "/" in cluster_id:
            raise ValueError(f"invalid cluster id {cluster_id!r}")
        self.cluster_id = cluster_id
        self.prefix = f"{root}/{cluster_id}/".encode()

    def _k(self, rest: str) -> bytes:
        return self.prefix + rest.encode()

    # -- brokers ---------------------------------------------------------------------------------
    @property
    def brokers_prefix(self) -> bytes:
        return self._k("brokers/")

    def broker(self, node_id: int) -> bytes:
        return self._k(f"brokers/{int(node_id)}")

    def node_id_of(self, key: bytes) -> int:
        return int(key[len(self.brokers_prefix):])

    # -- topics and partitions -------------------------------------------------------------------
    @property
    def topics_prefix(self) -> bytes:
        return self._k("topics/")

    def topic(self, name: str) -> bytes:
        return self._k(f"topics/{name}")

    @property
    def partitions_prefix(self) -> bytes:
        return self._k("partitions/")

    def partitions_of(self, topic: str) -> bytes:
        return self._k(f"partitions/{topic}/")

    def partition(self, topic: str, partition: int) -> bytes:
        return self._k(f"partitions/{topic}/{int(partition)}")

    def topic_partition_of(self, key: bytes) -> tuple[str, int]:
        topic, _, p = key[len(self.partitions_prefix):].decode().rpartition("/")
        return topic, int(p)

    # -- singletons ------------------------------------------------------------------------------
    @property
    def controller(self) -> bytes:
        return self._k("controller")

    @property
    def producer_ids(self) -> bytes:
        return self._k("producer_ids")

    @property
    def broker_configs(self) -> bytes:
        """The single dynamic-config key of earlier versions, read as a fallback only."""
        return self._k("broker_configs")

    @property
    def broker_configs_prefix(self) -> bytes:
        return self._k("broker_configs/")

    def broker_config(self, resource: int | None) -> bytes:
        """The key of one BROKER config resource: None the cluster-wide default, else a node id."""
        return self._k("broker_configs/" + ("default" if resource is None else str(int(resource))))

    def broker_config_resource(self, key: bytes) -> int | None:
        rest = key[len(self.broker_configs_prefix):].decode()
        return None if rest == "default" else int(rest)

    @property
    def features(self) -> bytes:
        return self._k("features")

    @property
    def scram_credentials(self) -> bytes:
        return self._k("scram_credentials")

    @property
    def client_quotas(self) -> bytes:
        return self._k("client_quotas")

    @property
    def group_configs(self) -> bytes:
        return self._k("group_configs")

    @property
    def acls(self) -> bytes:
        return self._k("acls")


async def get_or_create_cluster_id(client: aetcd.Client, root: str = ROOT, candidate: str | None = None) -> str:
    """The cluster id stored in etcd; the first caller creates it, every later or concurrent one reads it.

    One transaction: if ``<root>/cluster_id`` was never created (create revision 0) put ``candidate``,
    otherwise read the stored value. Concurrent starters cannot both create it: etcd applies the
    transactions one after the other and only the first sees create revision 0.
    """
    key = cluster_id_key(root)
    candidate = candidate or new_cluster_id()
    tx = client.transactions
    created, responses = await client.transaction(
        compare=[tx.create(key) == 0],
        success=[tx.put(key, candidate.encode())],
        failure=[tx.get(key)],
    )
    if created:
        return candidate
    (value, _kv), = responses[0]
    return value.decode()
