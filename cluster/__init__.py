"""Cluster mode on etcd: sessions, membership, controller election, partition state, producer ids.

Each module does one job over an etcd v3 client (aetcd, asyncio): ``etcd_keys`` (key layout, cluster
id), ``records`` (the JSON values), ``etcd_session`` (connection, lease, local fencing deadline),
``membership``, ``controller_election``, ``partition_state``, ``producer_ids``. This package never
imports ``broker/``: the broker will use it through the ``MetadataStore`` interface.
"""
