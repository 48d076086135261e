"""Counters updated on the event loop: per-topic messages and bytes in/out, per-API request
counts, errors and latency histograms, and the event loop's lag and idle fraction.

Plain ints and lists rather than prometheus_client objects: these sit on the produce, fetch and
request paths, and a dict lookup plus an add is cheaper than the library's locked children. The
collector (broker.metrics.collector) reads them at scrape time on the same loop.

Bytes count stored batch sizes, as Kafka's BrokerTopicMetrics do: bytes in is the size of the
batches appended (duplicates of idempotent retries are not appended, so not counted), bytes out
the size of the record batches a fetch response carries.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from typing import Any

# Request latency buckets in milliseconds (Kafka's RequestMetrics TotalTimeMs is in ms).
LATENCY_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
                      10000.0, 30000.0)


class TopicStats:
    __slots__ = ("messages_in", "bytes_in", "bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: per-topic counters; the broker-wide total is their sum at scrape
    time (so a deleted topic's counts stay in the total, as Kafka's all-topics meters keep them)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.deleted = TopicStats()  # counts of topics since removed, kept in the totals

    def _get(self, topic: str) -> TopicStats:
        ts = self.topics.get(topic)
        if ts is None:
            ts = self.topics[topic] = TopicStats()
        return ts

    def on_append(self, topic: str, nbytes: int, nrecords: int) -> None:
        ts = self._get(topic)
        ts.messages_in += nrecords
        ts.bytes_in += nbytes

    def on_fetch(self, topic: str, nbytes: int) -> None:
        if nbytes:
            self._get(topic).bytes_out += nbytes

    def remove_topic(self, topic: str) -> None:
        ts = self.topics.pop(topic, None)
        if ts is not None:
            self.deleted.messages_in += ts.messages_in
            self.deleted.bytes_in += ts.bytes_in
            self.deleted.bytes_out += ts.bytes_out

    def totals(self) -> TopicStats:
        t = TopicStats()
        for ts in (*self.topics.values(), self.deleted):
            t.messages_in += ts.messages_in
            t.bytes_in += ts.bytes_in
            t.bytes_out += ts.bytes_out
        return t


class ApiStats:
    __slots__ = ("by_version", "errors", "buckets", "sum_ms", "count")

    def __init__(self) -> None:
        self.by_version: dict[int, int] = {}
        self.errors: dict[int, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)  # last: above the largest bound
        self.sum_ms = 0.0
        self.count = 0


class RequestStats:
    """Kafka's RequestMetrics: requests per API and version, non-zero error codes per API, and
    the total time from decode to response (TotalTimeMs) as a histogram."""

    def __init__(self) -> None:
        self.apis: dict[int, ApiStats] = {}
        self.in_flight = 0

    def record(self, api_key: int, version: int, elapsed_s: float, response: Any) -> None:
        st = self.apis.get(api_key)
        if st is None:
            st = self.apis[api_key] = ApiStats()
        st.by_version[version] = st.by_version.get(version, 0) + 1
        ms = elapsed_s * 1000.0
        st.buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        st.sum_ms += ms
        st.count += 1
        if response is not None:
            for code in _error_codes(api_key, response):
                st.errors[code] = st.errors.get(code, 0) + 1


def _error_codes(api_key: int, response: Any) -> list[int]:
    """The non-zero error codes of a response: the top-level one, and for Produce the
    per-partition ones (where producers see their errors). Kept shallow: this runs per request."""
    top = getattr(response, "error_code", None)
    if isinstance(top, int) and top:
        return [top]
    if api_key == 0:
        out = []
        for t in getattr(response, "responses", None) or ():
            for p in getattr(t, "partition_responses", None) or ():
                if p.error_code:
                    out.append(p.error_code)
        return out
    return []


class LoopMonitor:
    """Event-loop lag (how late a timer fires) and the loop thread's idle fraction, kbroker's
    equivalent of Kafka's NetworkProcessorAvgIdlePercent and request queue time: a request
    waiting for the loop waits as long as the loop is late."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.lag_s = 0.0
        self.max_lag_s = 0.0
        self.idle_fraction = 1.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="metrics-loop-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        wall0, cpu0 = time.monotonic(), time.thread_time()
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            self.lag_s = max(0.0, now - t0 - self.interval_s)
            self.max_lag_s = max(self.max_lag_s, self.lag_s)
            cpu = time.thread_time()  # CPU time of the loop thread: busy, the rest is idle
            if now - wall0 >= 5 * self.interval_s:
                busy = (cpu - cpu0) / (now - wall0)
                self.idle_fraction = min(1.0, max(0.0, 1.0 - busy))
                wall0, cpu0 = now, cpu
