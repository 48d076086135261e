"""The JSON values stored in etcd: broker registrations, topics (with ongoing reassignments), partition state,
producer-id blocks.

Values are compact UTF-8 JSON objects with a ``version`` field, so a later layout can be read next
to this one. Numbers that etcd itself assigns (a broker's epoch is the create revision of its
registration key) are not stored in the value: they are only known once the write happened, and
readers take them from the key's metadata.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

RECORD_VERSION = 1


def _dump(obj: dict) -> bytes:
    return json.dumps({"version": RECORD_VERSION, **obj}, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a broker (Kafka's BrokerEndpoint): listener name, host, port."""
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    # The create revision of ``brokers/<node id>``: grows with every new registration of any broker,
    # so it serves as Kafka's broker epoch. -1 until registered.
    epoch: int = -1
    # In controlled shutdown (cluster.controlled_shutdown): never elected leader again.
    shutting_down: bool = False

    def to_json(self) -> bytes:
        return _dump({"node_id": self.node_id, "rack": self.rack,
                      "endpoints": [{"name": e.name, "host": e.host, "port": e.port,
                                     "security_protocol": e.security_protocol} for e in self.endpoints],
                      **({"shutting_down": True} if self.shutting_down else {})})

    @classmethod
    def from_json(cls, value: bytes, *, epoch: int) -> BrokerRegistration:
        d = json.loads(value)
        return cls(d["node_id"], tuple(Endpoint(e["name"], e["host"], e["port"], e.get("security_protocol", "PLAINTEXT"))
                                       for e in d["endpoints"]), d.get("rack"), epoch, bool(d.get("shutting_down")))


@dataclass(frozen=True, slots=True)
class Reassignment:
    """An ongoing partition reassignment (KIP-455): the replicas being added and being removed.

    While it runs, the partition's replica list (``TopicRecord.assignment``) is the union: target
    replicas first, then the original ones not in the target, so target = replicas - removing and
    original = replicas - adding.
    """
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    # partition -> replica list (the first replica is the preferred leader).
    assignment: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)
    # partition -> ongoing reassignment. Written only when not empty, and read with an empty
    # default, so records written before reassignments existed read the same.
    reassignments: dict[int, Reassignment] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {"name": self.name, "topic_id": str(self.topic_id), "configs": self.configs,
               "assignment": {str(p): r for p, r in sorted(self.assignment.items())}}
        if self.reassignments:
            doc["reassignments"] = {str(p): {"adding": list(r.adding), "removing": list(r.removing)}
                                    for p, r in sorted(self.reassignments.items())}
        return _dump(doc)

    @classmethod
    def from_json(cls, value: bytes) -> TopicRecord:
        d = json.loads(value)
        moving = {int(p): Reassignment(tuple(r["adding"]), tuple(r["removing"]))
                  for p, r in d.get("reassignments", {}).items()}
        return cls(d["name"], uuid.UUID(d["topic_id"]), {int(p): list(r) for p, r in d["assignment"].items()},
                   dict(d.get("configs", {})), moving)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's PartitionRegistration, minus the assignment (kept with the topic)."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    # Bumped by every change of this record; the compare-and-swap token (AlterPartition's partitionEpoch).
    partition_epoch: int

    def to_json(self) -> bytes:
        return _dump({"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                      "partition_epoch": self.partition_epoch})

    @classmethod
    def from_json(cls, value: bytes) -> PartitionState:
        d = json.loads(value)
        return cls(d["leader"], d["leader_epoch"], tuple(d["isr"]), d["partition_epoch"])


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``first .. first + size - 1`` handed to ``broker_id`` (Kafka's ProducerIdsBlock)."""
    broker_id: int
    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1

    def to_json(self) -> bytes:
        # Kafka's ZooKeeper layout kept the last block handed out; the next one starts after its end.
        return _dump({"broker": self.broker_id, "block_start": self.first, "block_end": self.last})

    @classmethod
    def from_json(cls, value: bytes) -> ProducerIdBlock:
        d = json.loads(value)
        return cls(d["broker"], d["block_start"], d["block_end"] - d["block_start"] + 1)
