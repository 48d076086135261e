"""Config machinery shared by every definition: Kafka's wire codes, value types and their parsing.

ConfigDef is one config's definition (name, type, default, validator, dynamic flag); ConfigEntry
and ConfigSynonym are what DescribeConfigs answers. The definitions themselves are data in
broker_defs.py and topic_defs.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


class Validator:
    """Kafka's ConfigDef.Validator: raises ConfigError for a bad value; describes itself for the
    reference docs (the family is in broker.config.validators)."""

    def __call__(self, name: str, value: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        return ""


INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


class ConfigError(ValueError):
    """An unknown config name or an invalid value; the message names the config and the reason."""


# --------------------------------------------------------------------------------------------
# Wire codes (DescribeConfigsResponse.ConfigSource / ConfigType in apache/kafka clients)
# --------------------------------------------------------------------------------------------
class ConfigSource:
    UNKNOWN = 0
    TOPIC_CONFIG = 1  # a.k.a. DYNAMIC_TOPIC_CONFIG
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType:
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPE_CODES = {
    "boolean": ConfigType.BOOLEAN,
    "string": ConfigType.STRING,
    "int": ConfigType.INT,
    "short": ConfigType.SHORT,
    "long": ConfigType.LONG,
    "double": ConfigType.DOUBLE,
    "list": ConfigType.LIST,
    "class": ConfigType.CLASS,
    "password": ConfigType.PASSWORD,
}



@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # "string"|"int"|"long"|"double"|"boolean"|"list"|"password"|"class"|"short"
    default: str | None
    doc: str
    valid: Validator | None = None
    dynamic: bool = False
    # For broker configs: the topic-level config this one supplies the default for.
    topic_name: str | None = None

    @property
    def config_type(self) -> int:
        return _TYPE_CODES[self.type]

    @property
    def sensitive(self) -> bool:
        return self.type == "password"

    def parse(self, raw: str | None) -> Any:
        """Convert a string to this config's Python type and validate it (ConfigError on failure)."""
        value = parse_value(self.name, self.type, raw)
        if self.valid is not None:
            self.valid(self.name, value)
        return value


def parse_value(name: str, type_: str, raw: str | None) -> Any:
    """Typed value of a raw string following Kafka's ConfigDef.parseType rules (numbers trimmed)."""
    if raw is None:
        return None
    s = raw.strip()
    try:
        if type_ in ("int", "short", "long"):
            if not re.fullmatch(r"[+-]?\d+", s):
                raise ValueError
            n = int(s)
            lo, hi = {"int": (INT_MIN, INT_MAX), "short": (-(2**15), 2**15 - 1), "long": (LONG_MIN, LONG_MAX)}[type_]
            if not lo <= n <= hi:
                raise ValueError
            return n
        if type_ == "double":
            return float(s)
        if type_ == "boolean":
            if s.lower() == "true":
                return True
            if s.lower() == "false":
                return False
            raise ValueError
        if type_ == "list":
            return [] if s == "" else [item.strip() for item in s.split(",")]
        return s  # string, password, class
    except ValueError:
        expected = {"short": "a 16-bit integer", "int": "a 32-bit integer", "long": "a 64-bit integer",
                    "double": "a number", "boolean": "true or false"}.get(type_, type_)
        raise ConfigError(f"Invalid value {raw!r} for configuration {name}: expected {expected}") from None


def format_value(type_: str, value: Any) -> str | None:
    """Canonical string form of a typed value, as Kafka reports it in DescribeConfigs."""
    if value is None:
        return None
    if type_ == "boolean":
        return "true" if value else "false"
    if type_ == "list":
        return ",".join(value)
    if type_ == "double":
        return repr(float(value))
    return str(value)


# --------------------------------------------------------------------------------------------
# DescribeConfigs entries
# --------------------------------------------------------------------------------------------
@dataclass
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    is_default: bool
    sensitive: bool
    config_type: int
    documentation: str
    # Synonyms in precedence order (the entry's own effective source first), for include_synonyms.
    synonyms: list[ConfigSynonym] = field(default_factory=list)


