"""Config validators (Kafka's ConfigDef.Validator family); each describes itself for the reference docs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.config.listeners import parse_listener, parse_protocol_map
from broker.config.types import ConfigError, Validator


@dataclass(frozen=True)
class Range(Validator):
    min: float | None = None
    max: float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be no more than {self.max}")

    def describe(self) -> str:
        if self.min is not None and self.min == self.max:
            return str(self.min)
        if self.max is None:
            return f"[{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"[{self.min},...,{self.max}]"


def at_least(n: float) -> Range:
    return Range(min=n)


def between(lo: float, hi: float) -> Range:
    return Range(min=lo, max=hi)


@dataclass(frozen=True)
class ValidString(Validator):
    values: tuple[str, ...]
    case_insensitive: bool = False

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        allowed = [v.lower() for v in self.values] if self.case_insensitive else list(self.values)
        probe = value.lower() if self.case_insensitive else value
        if probe not in allowed:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: String must be one of: {', '.join(self.values)}"
            )

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ValidList(Validator):
    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        for item in value:
            if item not in self.values:  # case-sensitive, as Kafka's ValidList.in
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(self.values)}"
                )

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


class ListenersValidator(Validator):
    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        listeners = [parse_listener(v, name) for v in value]
        names = [li.name for li in listeners]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"Invalid value for configuration {name}: duplicate listener name(s) {sorted(dup)}")

    def describe(self) -> str:
        return "NAME://host:port, ..."


class ProtocolMapValidator(Validator):
    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            return
        parse_protocol_map(value, name)

    def describe(self) -> str:
        return "LISTENER_NAME:PROTOCOL, ..."


class NonEmptyList(Validator):
    def __call__(self, name: str, value: Any) -> None:
        if value is not None and not value:
            raise ConfigError(f"Invalid value for configuration {name}: empty list is not allowed")

    def describe(self) -> str:
        return "non-empty list"


@dataclass(frozen=True)
class AnyOf(Validator):
    """Valid when any alternative accepts the value (e.g. gzip level: -1 or 1..9)."""

    alternatives: tuple[Validator, ...]

    def __call__(self, name: str, value: Any) -> None:
        for v in self.alternatives:
            try:
                v(name, value)
                return
            except ConfigError:
                pass
        raise ConfigError(f"Invalid value {value} for configuration {name}: must be {self.describe()}")

    def describe(self) -> str:
        return " or ".join(v.describe() for v in self.alternatives)


class ThrottledReplicasValidator(Validator):
    """'*' or a list of partition:brokerId pairs (Kafka's ThrottledReplicaListValidator)."""

    def __call__(self, name: str, value: Any) -> None:
        if not value or value == ["*"]:
            return
        for item in value:
            if not re.fullmatch(r"\d+:\d+", item.strip()):
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: must be '*' or a list of partitionId:brokerId"
                )

    def describe(self) -> str:
        return "[partitionId]:[brokerId],... or *"


class MustBeFalse(Validator):
    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __call__(self, name: str, value: Any) -> None:
        if value:
            raise ConfigError(f"Invalid value true for configuration {name}: {self.reason}")

    def describe(self) -> str:
        return "false"


GZIP_LEVEL = AnyOf((Range(-1, -1), between(1, 9)))
LZ4_LEVEL = between(1, 17)
ZSTD_LEVEL = between(-131072, 22)

