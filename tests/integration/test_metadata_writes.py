"""Topic metadata writes under concurrency and client disconnects (issue 21 item 2).

A client that disconnects has its request task cancelled by the server. A metadata change already
being written must still finish before the next one starts (the write uses a fixed temporary
name) and must then be applied in memory too, so that memory (Metadata) and disk (what a restart
loads) never diverge and no other client gets KAFKA_STORAGE_ERROR. As in Kafka, a CreateTopics
whose client went away is still carried out.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import CreateTopicsRequest

from tests.helpers.waiting import wait_for
from tests.helpers.wire import RawConnection

# How long every metadata write holds its complete temporary file before the rename
# (KBROKERTEST_DELAY_POINT, cluster/local_store.py): long enough that the next client's write starts
# inside the window even on a loaded machine.
WRITE_DELAY_MS = 1000
DELAY_LINE = "fault injection: delaying metadata.before_rename"


def _create_request(*names: str, partitions: int = 1) -> CreateTopicsRequest:
    T = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(version=7, topics=[
        T(version=7, name=n, num_partitions=partitions, replication_factor=-1, assignments=[], configs=[])
        for n in names], timeout_ms=30000, validate_only=False)



def _topics(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")}


def test_create_topics_survives_client_disconnects(broker_factory):
    """Each round: a raw CreateTopics whose connection is closed while its metadata write is in
    flight (the write is held before its rename), then a CreateTopics from another client. Before
    the fix the disconnect released the lock mid-write, the second write shared the temporary file
    and failed with KAFKA_STORAGE_ERROR ("No such file or directory: '...json.tmp'")."""
    broker = broker_factory(start=False)
    broker.env = {"KBROKERTEST_DELAY_POINT": f"metadata.before_rename:{WRITE_DELAY_MS}"}
    broker.start()
    rounds = 3
    for i in range(rounds):
        seen = broker.log_text().count(DELAY_LINE)
        gone = RawConnection(broker.bootstrap)
        gone.send(_create_request(f"gone-{i}"), 7)
        # Close exactly while its write sits before the rename: the server cancels the request task.
        wait_for(lambda seen=seen: broker.log_text().count(DELAY_LINE) > seen,
                  "the first write to start")
        gone.close()
        with RawConnection(broker.bootstrap, timeout=60) as conn:
            resp = conn.request(_create_request(f"kept-{i}"), 7)
        assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [(f"kept-{i}", 0, None)]
    expected = {f"{p}-{i}" for p in ("gone", "kept") for i in range(rounds)}
    # The disconnected clients' creates were carried out too, and memory matches disk.
    assert _topics(broker.bootstrap) == expected
    assert "cannot write" not in broker.log_text()
    broker.env = {}
    broker.restart()
    assert _topics(broker.bootstrap) == expected


def test_200_parallel_creates_from_several_clients(broker_factory):
    """200 topics created in parallel by 4 AdminClients, while raw clients keep sending
    CreateTopics and disconnecting before the answer. Every create succeeds (no
    KAFKA_STORAGE_ERROR), and all topics are there in memory and after a restart."""
    broker = broker_factory(start=False)
    broker.env = {"KBROKERTEST_DELAY_POINT": "metadata.before_rename:20"}
    broker.start()
    clients, per_client = 4, 50
    stop = threading.Event()

    def disconnecting_creator(k: int) -> int:
        rng = random.Random(k)
        sent = 0
        deadline = time.monotonic() + 120
        while not stop.is_set() and sent < 200 and time.monotonic() < deadline:
            with RawConnection(broker.bootstrap) as conn:
                conn.send(_create_request(f"drop-{k}-{sent}"), 7)
                # Vanish without reading the answer, after a varying while: sometimes while the
                # create waits for its turn, sometimes while its write runs.
                time.sleep(rng.uniform(0.0, 0.3))
            sent += 1
        return sent

    def admin_creates(c: int) -> dict[str, Exception | None]:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        names = [f"stress-{c}-{i}" for i in range(per_client)]
        # One CreateTopics request per topic, all in flight at once.
        futures = {n: next(iter(admin.create_topics([NewTopic(n, 1)], request_timeout=120).values()))
                   for n in names}
        out: dict[str, Exception | None] = {}
        for n, f in futures.items():
            try:
                f.result(timeout=180)
                out[n] = None
            except Exception as e:  # collected and reported below
                out[n] = e
        return out

    with ThreadPoolExecutor(clients + 2) as pool:
        droppers = [pool.submit(disconnecting_creator, k) for k in range(2)]
        creators = [pool.submit(admin_creates, c) for c in range(clients)]
        results: dict[str, Exception | None] = {}
        for f in creators:
            results.update(f.result(timeout=300))
        stop.set()
        dropped = sum(f.result(timeout=300) for f in droppers)
    failed = {n: e for n, e in results.items() if e is not None}
    assert not failed, f"{len(failed)} creates failed, e.g. {next(iter(failed.items()))}"
    assert len(results) == clients * per_client == 200
    assert dropped > 0
    assert "cannot write" not in broker.log_text()
    # Changes are applied in order (a FIFO lock): once this create is answered, every earlier one,
    # including those of clients that went away, is on disk and in memory.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    next(iter(admin.create_topics([NewTopic("last", 1)]).values())).result(timeout=120)
    before = _topics(broker.bootstrap)
    assert set(results) <= before
    broker.env = {}
    broker.restart()
    # Disk holds exactly what memory held, including creates of clients that disconnected.
    assert _topics(broker.bootstrap) == before
