"""Each client is told the address of the listener its request came in on (Kafka's
metadataCache.getAliveBrokerNodes(listenerName)): Metadata, DescribeCluster and FindCoordinator
over the EXTERNAL listener answer EXTERNAL's advertised address, not the first advertised listener's."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from tests.helpers.broker_proc import BrokerProcess, free_port
from tests.helpers.wire import send_request


class TwoListenerBroker(BrokerProcess):
    """INTERNAL on self.port (advertised as localhost) and EXTERNAL on a second port (127.0.0.1)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.external_port = free_port()
        self.external = f"127.0.0.1:{self.external_port}"

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://127.0.0.1:{self.port}")
        cmd[i] = f"listeners=INTERNAL://127.0.0.1:{self.port},EXTERNAL://127.0.0.1:{self.external_port}"
        return cmd + [
            "--override", "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "--override", "inter.broker.listener.name=INTERNAL",
            "--override", f"advertised.listeners=INTERNAL://localhost:{self.port},"
                          f"EXTERNAL://127.0.0.1:{self.external_port}",
        ]


def _metadata_addresses(bootstrap: str) -> list[tuple[str, int]]:
    r = send_request(bootstrap, MetadataRequest(version=12, topics=[], allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False), 12)
    return [(b.host, b.port) for b in r.brokers]


def test_each_listener_advertises_its_own_address(tmp_path) -> None:
    broker = TwoListenerBroker(tmp_path / "data")
    with broker:
        assert _metadata_addresses(broker.bootstrap) == [("localhost", broker.port)]
        assert _metadata_addresses(broker.external) == [("127.0.0.1", broker.external_port)]
        dc = send_request(broker.external, DescribeClusterRequest(
            version=0, include_cluster_authorized_operations=False), 0)
        assert [(b.host, b.port) for b in dc.brokers] == [("127.0.0.1", broker.external_port)]

        # A client bootstrapped on EXTERNAL works end to end, its group coordinator included.
        topic, group = f"ext-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        p = Producer({"bootstrap.servers": broker.external})
        p.produce(topic, b"v")
        assert p.flush(30) == 0
        for _ in range(100):
            fc = send_request(broker.external, FindCoordinatorRequest(version=3, key=group, key_type=0), 3)
            if fc.error_code == 0:
                break
        assert (fc.error_code, fc.host, fc.port) == (0, "127.0.0.1", broker.external_port)
        c = Consumer({"bootstrap.servers": broker.external, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got = []
        for _ in range(60):
            got += [m.value() for m in c.consume(10, timeout=1) if m.error() is None]
            if got:
                break
        c.close()
        assert got == [b"v"]
