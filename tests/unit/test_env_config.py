"""KBROKER_* environment variables → broker configs (broker/env_config.py), the official Kafka image's rule."""

from __future__ import annotations

import pytest

from broker.config import BROKER_CONFIGS
from broker.env_config import config_to_env_name, configs_from_env, env_name_to_config


@pytest.mark.parametrize("suffix, name", [
    ("NODE_ID", "node.id"),
    ("ADVERTISED_LISTENERS", "advertised.listeners"),
    ("KBROKER_ETCD_ENDPOINTS", "kbroker.etcd.endpoints"),
    ("LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
    ("A__B", "a_b"),                  # __ is a literal underscore
    ("A___B", "a-b"),                 # ___ is a dash
    ("SASL_MECHANISM_INTER__BROKER__PROTOCOL", "sasl.mechanism.inter_broker_protocol"),
    ("X____Y", "x-.y"),               # longest run first, as Kafka's sed chain: ___ then _
])
def test_env_name_to_config(suffix: str, name: str) -> None:
    assert env_name_to_config(suffix) == name


def test_every_broker_config_round_trips() -> None:
    # Camel-case names (a few ZooKeeper-era ones) cannot be written: the rule lower-cases, as Kafka's.
    for name in (n for n in BROKER_CONFIGS if n == n.lower()):
        env = config_to_env_name(name)
        assert env.startswith("KBROKER_")
        assert configs_from_env({env: "v"}) == {name: "v"}, name


def test_only_prefixed_variables_are_taken_and_values_kept() -> None:
    environ = {"KBROKER_NODE_ID": "3", "KBROKER_LISTENERS": "INTERNAL://0.0.0.0:9093,EXTERNAL://0.0.0.0:9092",
               "KBROKER_": "ignored", "KBROKERTEST_CRASH_POINT": "txn.after_prepare_commit",
               "PATH": "/usr/bin", "kbroker_node_id": "9"}
    assert configs_from_env(environ) == {"node.id": "3",
                                         "listeners": "INTERNAL://0.0.0.0:9093,EXTERNAL://0.0.0.0:9092"}
