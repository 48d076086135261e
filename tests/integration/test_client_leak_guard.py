"""The default test run ends with pytest's summary line (issue 33, item 12).

confluent-kafka clients that tests leave open reconnect to brokers the tests already stopped and
print librdkafka's "Connect to ... failed" lines on stderr, down to after pytest's summary. The
plugin tests/helpers/client_leaks.py (loaded by tests/conftest.py) collects the clients that only a
reference cycle keeps (``pytest.raises(...) as info`` keeps the test's frame alive) while their
broker still runs, and fails the module whose clients something keeps alive for good. Here it runs
in a pytest subprocess over sample test files with a real broker: clients closed or in a cycle
leave the summary as the last line of the output (without the plugin, the one in a cycle prints
after it), and a client kept in a module global fails the run, naming its test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_SAMPLE_HEAD = '''
import atexit
import gc
import time

import pytest
from confluent_kafka import Producer

from tests.helpers.broker_proc import BrokerProcess

# No automatic collection in this sample: a client in a reference cycle stays alive after its test,
# as it does whenever the collector has not run yet.
gc.disable()
KEEP = []
# The interpreter lingers 2 s after pytest's summary (a long run's clients have had minutes):
# any client still alive then reconnects to its stopped broker and prints after the summary.
atexit.register(time.sleep, 2.0)


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data")
    b.start()
    yield b
    b.stop()


def _producer(broker):
    p = Producer({"bootstrap.servers": broker.bootstrap, "reconnect.backoff.max.ms": 100})
    p.produce("t", b"x")
    assert p.flush(30) == 0
    return p


def test_closes_its_producer(broker):
    p = _producer(broker)
    del p
'''

_CYCLE = '''

def test_cycle_keeps_a_producer(broker):
    holder = {"producer": _producer(broker)}
    holder["self"] = holder
'''

_GLOBAL = '''

def test_global_keeps_a_producer(broker):
    KEEP.append(_producer(broker))
'''

_SUMMARY = re.compile(r"^(=+ )?\d+ (passed|failed|errors?)\b.* in [\d.]+s( \([\d:]+\))?( =+)?$")


def _run(path: Path) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    # As `make test` does (-q), stderr merged into the same stream as a terminal shows it; the
    # plugin is loaded with -p because the sample lives outside tests/ (no conftest.py there).
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.helpers.client_leaks", "-p",
                        "no:cacheprovider", "-W", "ignore::DeprecationWarning", "--rootdir", str(path.parent), "-c", os.devnull, str(path)],
                       cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    return r.returncode, [line for line in r.stdout.decode(errors="replace").splitlines() if line.strip()]


def test_closed_and_cycle_held_clients_leave_the_summary_last(tmp_path: Path) -> None:
    sample = tmp_path / "test_closed_sample.py"
    sample.write_text(_SAMPLE_HEAD + _CYCLE)
    code, lines = _run(sample)
    out = "\n".join(lines)
    assert code == 0, out
    assert _SUMMARY.match(lines[-1]), out
    assert "2 passed" in lines[-1], out
    assert "rdkafka" not in out, out


def test_a_client_kept_for_good_fails_the_module_naming_its_test(tmp_path: Path) -> None:
    sample = tmp_path / "test_leaky_sample.py"
    sample.write_text(_SAMPLE_HEAD + _GLOBAL)
    code, lines = _run(sample)
    out = "\n".join(lines)
    assert code == 1, out
    assert re.search(r"ERROR .*test_global_keeps_a_producer", out), out
    assert re.search(r"1 confluent-kafka client\(s\) created by \S*test_leaky_sample.py are still open.*"
                     r"Left by: \S*test_global_keeps_a_producer \(\+1\)", out), out
    summary = next(line for line in lines if _SUMMARY.match(line))
    assert "2 passed" in summary and "1 error" in summary, out  # the error is the module's last teardown
