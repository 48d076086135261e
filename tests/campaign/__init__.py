"""Fault campaigns (issue 28): Jepsen-style workloads against a real 3-broker cluster on a 3-member
etcd, random faults, a recorded history and a checker for Jepsen's Kafka anomaly classes.

``make chaos DURATION=<s> SEED=<n>`` (or ``python -m tests.campaign --help``); docs/fault-campaigns.md
explains the options, the report and how to read it. Modules: ``history`` (the JSON-lines history),
``checker`` and ``cycles`` (the analysis), ``worker`` and ``clients`` (the workloads, one subprocess
per worker), ``cluster`` (processes, namespaces, tmpfs, libfaketime), ``nemeses`` (the faults),
``probes`` (cluster questions and admin requests), ``runner`` (the phases), ``report``.

It lives under tests/ because it is test tooling built on tests/helpers (the process, etcd and
network helpers), not part of the shipped packages.
"""
