"""Prometheus metrics (``kbroker.prometheus.listener``).

``stats``: counters updated on the event loop where the facts are known (appends, fetch reads,
answered requests, loop lag). ``collector``: turns those counters and the live partition,
coordinator and cluster state into Prometheus families at scrape time, on the loop. ``endpoint``:
the tiny HTTP server, also on the loop, so a scrape never reads loop-owned state from another
thread. ``names``: the reference list of metric names (Strimzi's JMX-exporter rules applied to
Kafka's MBeans, kafka_exporter's names for consumer lag, ``kbroker_*`` where Kafka has none).
"""
