"""The benchmark aid KBROKERTEST_CPROFILE (broker/serve.py): a broker started with it runs under
cProfile and writes its stats on a clean stop (benchmarks/replicated_write_cost.py --cprofile reads
them); without it nothing is written."""

from __future__ import annotations

import pstats

from confluent_kafka import Producer


def test_a_broker_under_cprofile_writes_stats_with_its_request_path(broker_factory, tmp_path) -> None:
    stats = tmp_path / "broker.pstats"
    broker = broker_factory(start=False)
    broker.env["KBROKERTEST_CPROFILE"] = str(stats)
    broker.start()
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(20):
        p.produce("cprofiled", b"v%d" % i)
    assert p.flush(30) == 0
    del p
    assert not stats.exists()  # written at the stop, not before
    assert broker.stop() == 0
    functions = {func for (_file, _line, func) in pstats.Stats(str(stats)).stats}  # type: ignore[attr-defined]
    assert {"dispatch", "handle_produce"} <= functions


def test_without_the_setting_no_stats_are_written(broker_factory, tmp_path) -> None:
    broker = broker_factory()
    assert "KBROKERTEST_CPROFILE" not in broker.env
    assert broker.stop() == 0
    assert not list(tmp_path.rglob("*.pstats"))
