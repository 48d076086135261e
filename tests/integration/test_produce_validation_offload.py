"""A large compressed batch is validated off the event loop (issue 22: one request must not stall
the broker). Its records are walked one by one, about a second per MiB of minimal zstd records with
the pure-Python walk, so while that runs other connections must still be served. The broker runs the
Python walk (KBROKERTEST_PURE_PYTHON_WALK=1): the compiled one (storage/_recwalk.c) is over in tens
of milliseconds, too short a window to count pings in, and the offload must hold for the slow path
too (a broker installed without a compiler)."""

from __future__ import annotations

import threading
import time
import uuid

import zstandard
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import ApiVersionsRequest

from tests.helpers.wire import RawConnection
from tests.integration.test_produce_validation import produce
from tests.unit.test_record_validation import record, wrap

RECORDS = 400_000


def test_pings_are_answered_while_a_big_compressed_batch_is_validated(broker_factory) -> None:
    broker = broker_factory(start=False)
    broker.env = {**broker.env, "KBROKERTEST_PURE_PYTHON_WALK": "1"}
    broker.start()
    topic = f"offload-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    raw = b"".join(record(i, None, None) for i in range(RECORDS))
    batch = wrap(zstandard.ZstdCompressor().compress(raw), RECORDS, attributes=4)
    assert len(batch) < 1_000_000  # within the default max.message.bytes

    done = threading.Event()
    result: list = []

    def send() -> None:
        with RawConnection(broker.bootstrap, timeout=120) as conn:
            result.append(produce(conn, topic, batch))
        done.set()

    pings = 0
    with RawConnection(broker.bootstrap, timeout=60) as ping:
        ping.request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3)
        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            ping.request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3)
            if not done.is_set():
                pings += 1
        sender.join(120)
    assert result and result[0].error_code == 0, result
    # With the walk on the loop, pings queue behind it: at most the one or two served before it began.
    assert pings >= 5, f"only {pings} pings were answered while the batch was validated"
