"""Client quotas (KIP-13 byte rates): their entities, validation, storage format and enforcement.

Quota entities are Kafka's: ``user``, ``client-id`` or both, each with a name or the default
(name ``None``); ``ip`` entities (connection-creation rate) are refused, kbroker does not enforce
them. Keys: ``producer_byte_rate`` and ``consumer_byte_rate`` (whole numbers, bytes/s, enforced),
``request_percentage`` and ``controller_mutation_rate`` (stored and described, not enforced).

Enforcement follows Kafka's ClientQuotaManager with the DefaultQuotaCallback:

- the quota that applies to (user, client-id) is the first entity of Kafka's resolution order
  that has the key: /users/<u>/clients/<c>, /users/<u>/clients/<default>, /users/<u>,
  /users/<default>/clients/<c>, /users/<default>/clients/<default>, /users/<default>,
  /clients/<c>, /clients/<default>; the matched entity decides whose traffic shares one rate
  (e.g. /users/<default> gives every user its own rate, shared by all of that user's clients);
- the rate is Kafka's ``Rate`` over ``quota.window.num`` samples of ``quota.window.size.seconds``
  (the window is never counted shorter than num-1 samples), recorded *before* the check;
- a violation throttles for ``(rate - quota) / quota * window`` ms, the time after which the rate
  is back at the quota if nothing more is recorded (QuotaUtils.throttleTime).

This module never imports ``broker``: the server hands it the current quota map.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
# Key -> whether its value must be a whole number (Kafka's LONG keys) rather than a double.
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, "request_percentage": False,
              "controller_mutation_rate": False}
FILE_NAME = "kbroker-client-quotas.json"

# An entity: sorted ((type, name or None for the default), ...). Hashable, so it keys the quota map.
Entity = tuple[tuple[str, str | None], ...]
Quotas = Mapping[Entity, Mapping[str, float]]


class QuotaError(ValueError):
    """A request Kafka refuses; ``code`` is the Kafka error name (INVALID_REQUEST, UNSUPPORTED_VERSION)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


def entity_str(e: Entity) -> str:
    """Kafka's ClientQuotaEntity toString, for error messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in e) + "})"


def validate_entity(pairs: list[tuple[str, str | None]]) -> Entity:
    """Kafka's ClientQuotaControlManager.validateEntity + configKeysForEntityType (messages included)."""
    if not pairs:
        raise QuotaError("INVALID_REQUEST", "Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for etype, name in pairs:
        if etype in seen:
            raise QuotaError("INVALID_REQUEST", f"Invalid empty client quota entity, duplicate entity entry {etype}")
        if etype not in (USER, CLIENT_ID, IP):
            raise QuotaError("INVALID_REQUEST", f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise QuotaError("INVALID_REQUEST", f"Empty {etype} not supported")
        seen[etype] = name
    if IP in seen:
        if len(seen) > 1:
            raise QuotaError("INVALID_REQUEST", "Invalid empty client quota entity")
        # Deviation: Kafka enforces connection_creation_rate per IP; kbroker does not, so it says so.
        raise QuotaError("INVALID_REQUEST", "kbroker does not support ip quota entities (connection_creation_rate)")
    return entity(seen.items())


def validate_value(key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue: a known key, and a whole number for the LONG ones."""
    if key not in QUOTA_KEYS:
        raise QuotaError("INVALID_REQUEST", f"Invalid configuration key {key}")
    if QUOTA_KEYS[key]:
        eps = 1e-6
        if math.isnan(value) or math.isinf(value) or abs(float(int(value + eps)) - value) > eps:
            raise QuotaError("INVALID_REQUEST", f"Configuration {key} must be a Long value")


def altered(current: Quotas, changes: list[tuple[Entity, dict[str, float | None]]]) -> dict[Entity, dict[str, float]]:
    """The quota map after ``changes`` (value None removes the key; an entity left without keys goes)."""
    out = {e: dict(v) for e, v in current.items()}
    for ent, ops in changes:
        vals = out.setdefault(ent, {})
        for key, value in ops.items():
            if value is None:
                vals.pop(key, None)
            else:
                vals[key] = float(value)
        if not vals:
            del out[ent]
    return out


def encode(quotas: Quotas) -> bytes:
    rows = [{"entity": [[t, n] for t, n in e], "values": dict(v)} for e, v in quotas.items()]
    return json.dumps({"version": 1, "quotas": rows}, indent=1).encode()


def decode(data: bytes) -> dict[Entity, dict[str, float]]:
    doc = json.loads(data)
    return {entity((t, n) for t, n in row["entity"]): {k: float(v) for k, v in row["values"].items()}
            for row in doc.get("quotas", [])}


# --- describe filters (DescribeClientQuotas) ----------------------------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def describe(quotas: Quotas, components: list[tuple[str, int, str | None]], strict: bool
             ) -> list[tuple[Entity, dict[str, float]]]:
    """Entities matching the filter, as Kafka's ClientQuotasImage.describe (its errors included)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for etype, match_type, match in components:
        if not etype:
            raise QuotaError("INVALID_REQUEST", "Invalid empty entity type.")
        if etype in exact or etype in typed:
            raise QuotaError("INVALID_REQUEST", f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in (IP, USER, CLIENT_ID):
            raise QuotaError("UNSUPPORTED_VERSION", f"Unsupported entity type {etype}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaError("INVALID_REQUEST", "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaError("INVALID_REQUEST",
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaError("INVALID_REQUEST",
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(etype)
        else:
            raise QuotaError("UNSUPPORTED_VERSION", f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
        raise QuotaError("INVALID_REQUEST", "Invalid entity filter component combination, IP filter component "
                                            "should not be used with user or clientId filter component.")
    out = []
    for ent, values in quotas.items():
        names = dict(ent)
        if strict and set(names) - set(exact) - typed:
            continue
        if any(t not in names or names[t] != n for t, n in exact.items()):
            continue
        if any(t not in names or names[t] is None for t in typed):
            continue
        out.append((ent, dict(values)))
    return out


# --- enforcement ----------------------------------------------------------------------------------

class Rate:
    """Kafka's Rate over a SampledStat: ``samples`` windows of ``window_ms``."""

    __slots__ = ("samples", "window_ms", "_starts", "_values")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = max(2, samples)
        self.window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []

    def _purge(self, now: float) -> None:
        horizon = self.samples * self.window_ms
        while self._starts and now - self._starts[0] >= horizon:
            del self._starts[0], self._values[0]

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._starts or now >= self._starts[-1] + self.window_ms:
            self._starts.append(now)
            self._values.append(0.0)
            if len(self._starts) > self.samples:
                del self._starts[0], self._values[0]
        self._values[-1] += value

    def window_size(self, now: float) -> float:
        """Milliseconds the rate is measured over: since the oldest sample, at least samples-1 windows."""
        self._purge(now)
        elapsed = now - self._starts[0] if self._starts else 0.0
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now: float) -> float:
        """Per second."""
        size = self.window_size(now)
        return sum(self._values) / (size / 1000) if size > 0 else 0.0


@dataclass
class _Sensor:
    rate: Rate
    bound: float
    last_used: float = field(default=0.0)


class ClientQuotaManager:
    """Records produce / fetch bytes per quota entity and answers the throttle time (ms)."""

    def __init__(self, quotas: Callable[[], Quotas], samples: int = 11, window_s: int = 1) -> None:
        self._quotas = quotas
        self.samples = samples
        self.window_ms = window_s * 1000
        self._seen: object = None  # the quota map the sensors were built for (replaced on every change)
        self._enabled: set[str] = set()
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}

    def _refresh(self) -> Quotas:
        q = self._quotas()
        if q is not self._seen:
            self._seen = q
            self._enabled = {k for v in q.values() for k in v}
        return q

    def enabled(self, key: str) -> bool:
        self._refresh()
        return key in self._enabled

    def resolve(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """((user tag, client-id tag), bound) of the quota that applies, or None: unlimited."""
        q = self._refresh()
        if key not in self._enabled:
            return None
        order: list[tuple[Entity, tuple[str, str]]] = [
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        ]
        for ent, tags in order:
            vals = q.get(ent)
            if vals is not None and key in vals:
                return tags, vals[key]
        return None

    def _sensor(self, key: str, user: str, client_id: str, now: float) -> _Sensor | None:
        found = self.resolve(key, user, client_id)
        if found is None:
            return None
        tags, bound = found
        sk = (key, *tags)
        s = self._sensors.get(sk)
        if s is None:
            if len(self._sensors) > 10000:  # Kafka expires inactive sensors after an hour
                self._expire(now)
            s = self._sensors[sk] = _Sensor(Rate(self.samples, self.window_ms), bound)
        # A changed quota applies to the rate measured so far, as Kafka re-configures its metric.
        s.bound = bound
        s.last_used = now
        return s

    def _expire(self, now: float) -> None:
        horizon = now - 3600 * 1000
        for k in [k for k, s in self._sensors.items() if s.last_used < horizon]:
            del self._sensors[k]

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: float) -> int:
        """Record ``value`` bytes and return the throttle time in ms (0 within the quota)."""
        s = self._sensor(key, user, client_id, now_ms)
        if s is None:
            return 0
        s.rate.record(value, now_ms)
        rate = s.rate.measure(now_ms)
        if rate <= s.bound:
            return 0
        if s.bound <= 0:
            return int(s.rate.window_size(now_ms))
        return round((rate - s.bound) / s.bound * s.rate.window_size(now_ms))

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: float) -> None:
        """Kafka's unrecordQuotaSensor: a throttled fetch answers empty, so its bytes do not count."""
        s = self._sensor(key, user, client_id, now_ms)
        if s is not None:
            s.rate.record(-value, now_ms)

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float:
        """Kafka's getMaxValueInQuotaWindow: the most one fetch may return without certain throttling."""
        found = self.resolve(key, user, client_id)
        if found is None:
            return math.inf
        return found[1] * (self.samples - 1) * self.window_ms / 1000
