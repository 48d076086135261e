"""Per-request cost of the schema-driven null checks (protocol/null_check.py), next to the cost of
kafka-python's generic decode of the same request. Usage: .venv/bin/python -m benchmarks.null_check_bench
"""

from __future__ import annotations

import timeit

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from protocol.null_check import checker_for


def _fetch(topics: int, partitions: int) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(
        version=12, replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[T(version=12, topic=f"t{i}", partitions=[
            T.FetchPartition(version=12, partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(partitions)])
                for i in range(topics)])


def main() -> None:
    M = MetadataRequest
    cases = [
        ("Fetch v12, 1 topic x 1 partition", FetchRequest, _fetch(1, 1), 12),
        ("Fetch v12, 10 topics x 10 partitions", FetchRequest, _fetch(10, 10), 12),
        ("Metadata v12, 3 topics (nothing to check)", M,
         M(version=12, topics=[M.MetadataRequestTopic(version=12, name=f"t{i}") for i in range(3)],
           allow_auto_topic_creation=True, include_topic_authorized_operations=False), 12),
    ]
    for name, cls, req, v in cases:
        n = 100_000
        t_check, t_decode = _time(cls, req, v, n)
        print(f"{name}: null check {t_check:.2f} us, generic decode {t_decode:.2f} us")


def _time(cls: type, req: object, v: int, n: int) -> tuple[float, float]:
    body = req.encode(version=v)  # type: ignore[attr-defined]
    check = checker_for(cls, v)
    obj = cls.decode(body, version=v)  # type: ignore[attr-defined]
    t_check = min(timeit.repeat(lambda: check(obj) if check else None, number=n, repeat=3)) / n * 1e6
    t_decode = min(timeit.repeat(lambda: cls.decode(body, version=v), number=n // 10, repeat=3))  # type: ignore[attr-defined]
    return t_check, t_decode / (n // 10) * 1e6

if __name__ == "__main__":
    main()
