"""External tools some tests need (kcat, node + kafkajs, pyspark/pyarrow/java): skip locally, fail in CI.

On a developer machine a missing tool skips the tests that need it. In CI (the ``CI`` environment
variable set to anything but empty, ``false`` or ``0``, as CI runners do) the same tests fail with
the reason instead, so a run without them cannot go green.
"""

from __future__ import annotations

import os

import pytest

_FALSE = {"", "0", "false", "no", "off"}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in _FALSE


def require_tool(name: str, available: bool, why: str) -> None:
    """Return if ``available``; otherwise skip (locally) or fail (in CI) the running test or fixture.

    ``why`` says what is missing and how to get it, e.g. "kcat not on PATH (apt-get install kcat)".
    Called from a fixture, pytest reports the failure as an error at setup; either way the run fails.
    """
    __tracebackhide__ = True  # report the caller's line, not this one
    if available:
        return
    if in_ci():
        pytest.fail(f"{name} is required in CI (CI={os.environ.get('CI')!r}) but missing: {why}", pytrace=False)
    pytest.skip(f"{name} is not available: {why}")


class MissingToolItem(pytest.Item):
    """Stands in for a test module that cannot even be imported without a tool: skips or fails."""

    def __init__(self, *, tool: str, why: str, **kw) -> None:
        super().__init__(**kw)
        self.tool, self.why = tool, why

    def runtest(self) -> None:
        require_tool(self.tool, False, self.why)

    def reportinfo(self):
        return self.path, None, f"{self.name} (needs {self.tool})"


class MissingToolModule(pytest.File):
    """A test module collected as one :class:`MissingToolItem` instead of being imported.

    Return it from a conftest's ``pytest_pycollect_makemodule`` when the directory's modules import
    a missing tool at the top: the module then shows up as one skipped (locally) or failed (in CI)
    test, and a collection error cannot abort the whole run.
    """

    def __init__(self, *, tool: str, why: str, **kw) -> None:
        super().__init__(**kw)
        self.tool, self.why = tool, why

    def collect(self):
        yield MissingToolItem.from_parent(self, name=f"requires_{self.tool}", tool=self.tool, why=self.why)
