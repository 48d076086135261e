"""Pytest fixtures shared by every test directory: a real kbroker subprocess per test.

``broker`` is a fresh, started broker (tmp data dir, free port, auto-create on, no initial rebalance
delay). ``broker_factory`` makes more of them, optionally with other overrides. Every broker made
here is stopped at teardown; one that ignores SIGTERM is killed and the test errors with its log.
A test also errors at teardown when the broker logged a Python traceback (an exception escaped a
handler) or exited non-zero on SIGTERM; set ``proc.expect_tracebacks = True`` where one is intended.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Tests import both the project packages and ``tests.helpers``; make the repository root importable
# however pytest was launched (``python -m pytest`` adds it, the ``pytest`` script does not).
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.helpers.broker_proc import BrokerError, BrokerProcess  # noqa: E402

BrokerFactory = Callable[..., BrokerProcess]
TRACEBACK = "Traceback (most recent call last)"


def _first_traceback(text: str, context: int = 40) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if TRACEBACK in line)
    return "\n".join(lines[max(0, start - 2): start + context])


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    made: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, *, start: bool = True, port: int | None = None,
             data_dir: Path | None = None, config_file: Path | None = None) -> BrokerProcess:
        data_dir = data_dir if data_dir is not None else tmp_path / f"broker{len(made)}"
        proc = BrokerProcess(data_dir, port=port, overrides=overrides, config_file=config_file)
        made.append(proc)
        if start:
            proc.start()
        return proc

    yield make

    problems = []
    for proc in made:
        was_running = proc.running
        try:
            code = proc.stop()
        except BrokerError as e:
            problems.append(str(e))
            continue
        finally:
            proc.kill()
        if was_running and code != 0:
            problems.append(f"broker {proc.bootstrap} exited with code {code} on SIGTERM\n{proc.log_tail()}")
        if not proc.expect_tracebacks and TRACEBACK in proc.log_text():
            problems.append(f"broker {proc.bootstrap} logged a traceback; see {proc.log_path}\n"
                            f"{_first_traceback(proc.log_text())}")
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory()


def pytest_configure(config: pytest.Config) -> None:
    # confluent-kafka clients must not outlive their test's brokers (they print connection errors,
    # down to after pytest's summary): tests/helpers/client_leaks.py collects those only a
    # reference cycle keeps and fails a module whose clients something else keeps.
    from tests.helpers import client_leaks

    client_leaks.pytest_configure(config)
