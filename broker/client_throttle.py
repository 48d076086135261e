"""Byte-rate quotas on Produce and Fetch responses (KIP-13, KIP-219), as Kafka's KafkaApis applies them.

- Produce: the request size is recorded against ``producer_byte_rate`` after the append (acks=0
  included); over the quota, the response carries ``throttle_time_ms``.
- Fetch (consumers only, not followers): the response size is recorded against
  ``consumer_byte_rate``; over the quota, the bytes are "unrecorded" and the answer is an empty
  response with ``throttle_time_ms`` (Kafka's getThrottledResponse), so a throttled consumer gets
  nothing it would have to account for.
- KIP-219: the connection (broker/connection.py) then mutes the connection for the throttle time. Clients
  that throttle themselves (ProduceResponse v6+, FetchResponse v8+) get the answer at once; older
  versions get it after the throttle time, as Kafka does.
"""

from __future__ import annotations

import struct
import time
from typing import Any

from broker.fetch_sessions import fetch_replica_id
from broker.handlers import RawResponse
from protocol.fast_codecs import encode_fetch_response
from security.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotaManager

# First versions whose clients back off by themselves on throttle_time_ms (Kafka's shouldClientThrottle).
CLIENT_THROTTLES = {0: 6, 1: 8}


def _user(principal: str) -> str:
    return principal.partition(":")[2] or principal


def apply(quotas: ClientQuotaManager, key: int, version: int, principal: str, client_id: str | None,
          request: Any, request_size: int, response: Any) -> tuple[Any, int]:
    """(response, throttle ms) for a Produce (key 0) or Fetch (key 1) request just handled."""
    now = time.monotonic() * 1000
    if key == 0:
        if not quotas.enabled(PRODUCER_BYTE_RATE):
            return response, 0
        ms = quotas.record(PRODUCER_BYTE_RATE, _user(principal), client_id or "", request_size, now)
        if ms > 0 and response is not None:
            response.throttle_time_ms = ms
        return response, ms
    if not quotas.enabled(CONSUMER_BYTE_RATE) or not isinstance(response, RawResponse) or fetch_replica_id(request) >= 0:
        return response, 0
    user, cid = _user(principal), client_id or ""
    ms = quotas.record(CONSUMER_BYTE_RATE, user, cid, response.size, now)
    if ms <= 0:
        return response, 0
    quotas.unrecord(CONSUMER_BYTE_RATE, user, cid, response.size, now)
    chunks = encode_fetch_response(version, 0, 0, [])
    head = bytearray(chunks[0])
    struct.pack_into(">i", head, 0, ms)  # throttle_time_ms opens every FetchResponse v1+
    return RawResponse([head, *chunks[1:]]), ms


def max_fetch_bytes(quotas: ClientQuotaManager, request: Any, principal: str, client_id: str | None) -> int:
    """A consumer's fetch returns at most what its quota allows in one window (Kafka's
    maxQuotaWindowBytes from getMaxValueInQuotaWindow), so one response is never throttled for sure."""
    if not quotas.enabled(CONSUMER_BYTE_RATE) or fetch_replica_id(request) >= 0:
        return request.max_bytes
    cap = quotas.max_value_in_window(CONSUMER_BYTE_RATE, _user(principal), client_id or "")
    return request.max_bytes if cap >= request.max_bytes else max(1, int(cap))
