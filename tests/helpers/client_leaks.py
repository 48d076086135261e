"""A pytest plugin that keeps confluent-kafka clients from outliving their tests' brokers.

A librdkafka client (Producer, Consumer, AdminClient) still alive when its test's broker stops
keeps its threads: they reconnect to the stopped broker and print "Connect to ... failed" lines on
stderr, between later tests and, for a client alive until the interpreter exits, after pytest's
summary (where CI reads the result). Close clients in the test (``Consumer.close()``, ``del`` a
flushed Producer or an AdminClient) before their broker stops, in a ``finally`` or a fixture.

How clients are seen: every live librdkafka handle runs exactly one thread named ``rdk:main``
(``/proc/self/task/*/comm`` on Linux), so counting those threads counts live clients without
touching them.

- After a test function returns, clients that are still alive beyond those alive before the test
  may be held only by a reference cycle (``pytest.raises(...) as info`` keeps the test's frame and
  its locals alive through the traceback, so does a callback that refers to its own client): a
  garbage collection runs then, while the test's brokers still run, so they go quietly.
- After each test's teardown, clients alive beyond those before the test (after another
  collection) are noted with the test's id: a fixture of a wider scope may hold them. After the
  teardown of a module's last test (its module-scoped fixtures are gone by then), clients left from
  the module's tests make that teardown fail, naming the tests: they are kept by something that
  lives on (a module-level cache, a global), and would print after the summary.

Elsewhere than Linux the plugin does nothing.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Generator

import pytest

_TASKS = "/proc/self/task"


def live_clients() -> int:
    """Live librdkafka handles of this process (their ``rdk:main`` threads)."""
    n = 0
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/comm") as f:
                n += f.read().strip() == "rdk:main"
        except OSError:  # the thread ended meanwhile
            continue
    return n


class ClientLeakGuard:
    def __init__(self) -> None:
        self.module: str | None = None
        self.at_module_start = 0
        self.suspects: list[tuple[str, int]] = []  # (test id, clients it left) in the current module
        self._before = 0

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        module = item.nodeid.split("::", 1)[0]
        if module != self.module:
            self.module, self.at_module_start, self.suspects = module, live_clients(), []
        self._before = live_clients()
        return (yield)

    # Both wrappers run inside the capture plugin's (trylast): what a client logs while it is
    # destroyed here shows in the test's captured output, not between tests.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if live_clients() > self._before:
                gc.collect()

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
        result = yield  # the test's fixtures are finalized (those of its scope and of ended scopes)
        now = live_clients()
        if now > self._before:
            gc.collect()
            now = live_clients()
            if now > self._before:
                self.suspects.append((item.nodeid, now - self._before))
        last_of_module = nextitem is None or nextitem.nodeid.split("::", 1)[0] != self.module
        if last_of_module and now > self.at_module_start:
            gc.collect()
            left = live_clients() - self.at_module_start
            if left > 0:
                # Counted once: the next module starts from what is alive now.
                who = ", ".join(f"{t} (+{n})" for t, n in self.suspects) or "unknown (created outside a test)"
                raise pytest.fail.Exception(
                    f"{left} confluent-kafka client(s) created by {self.module} are still open after its "
                    f"last test and fixtures ended; they will log connection errors once their broker is "
                    f"gone (after pytest's summary if nothing closes them). Close them in the test: "
                    f"Consumer.close(), `del` a flushed Producer / an AdminClient. Left by: {who}",
                    pytrace=False)
        return result


def pytest_configure(config: pytest.Config) -> None:
    if os.path.isdir(_TASKS) and not config.pluginmanager.has_plugin("client-leak-guard"):
        config.pluginmanager.register(ClientLeakGuard(), "client-leak-guard")
