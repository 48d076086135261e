"""Broker configuration from environment variables, by the official Kafka image's rule.

A container passes its settings as environment variables: ``KBROKER_`` followed by the config name
in upper case, where ``_`` stands for ``.``, ``__`` for ``_`` and ``___`` for ``-``
(``KBROKER_NODE_ID`` → ``node.id``, ``KBROKER_LOG_RETENTION_MS`` → ``log.retention.ms``,
``KBROKER_KBROKER_ETCD_ENDPOINTS`` → ``kbroker.etcd.endpoints``). Apache Kafka's image does the same
with ``KAFKA_`` (docker/resources/common-scripts), so a compose file for one reads like the other.

``kbroker serve --from-env`` applies these over the config file and under ``--override``. Because
every ``KBROKER_*`` variable becomes a config, the project's own test hooks use the ``KBROKERTEST_``
prefix instead (it does not start with ``KBROKER_``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "KBROKER_"

# Longest run first, as Kafka's image does with sed: ___ then __ then _.
_UNDERSCORES = re.compile(r"___|__|_")
_REPLACEMENT = {"___": "-", "__": "_", "_": "."}


def env_name_to_config(suffix: str) -> str:
    """``NODE_ID`` → ``node.id``; ``A__B`` → ``a_b``; ``A___B`` → ``a-b`` (the part after the prefix)."""
    return _UNDERSCORES.sub(lambda m: _REPLACEMENT[m.group(0)], suffix).lower()


def config_to_env_name(name: str) -> str:
    """The inverse, for docs and tests: ``node.id`` → ``KBROKER_NODE_ID``."""
    out = name.replace("_", "__").replace("-", "___").replace(".", "_")
    return PREFIX + out.upper()


def configs_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Every ``KBROKER_*`` variable as a config name → value (values are taken as they are)."""
    out: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith(PREFIX) and len(key) > len(PREFIX):
            out[env_name_to_config(key[len(PREFIX):])] = value
    return out
