"""KIP-848 topic regular expressions: RE2 syntax, validation and bounded, yielding resolution.

Kafka compiles SubscribedTopicRegex with RE2/J and matches every topic name in full
(``Pattern.matcher(name).matches()``); the google-re2 package gives the same dialect, where
Python's ``re`` would accept patterns Kafka refuses (look-arounds, back-references) and refuse
some it accepts. Resolution runs as a task on the event loop, off the heartbeat path (Kafka's
GroupMetadataManager.refreshRegularExpressions runs in the coordinator's executor), scanning
the topic names in slices and yielding between them so that a large cluster never stalls the
loop.

Deviation from Kafka: internal topics (``__``-prefixed) are never matched, as librdkafka and
the Java client exclude them from pattern subscriptions by default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import re2

SLICE = 500  # topic names matched between two yields to the event loop

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr


class InvalidRegex(ValueError):
    pass


def compile_regex(pattern: str) -> re2._Regexp:
    """The compiled pattern; InvalidRegex with RE2's reason when Kafka would refuse it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        reason = e.args[0] if e.args else e
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRegex(str(reason)) from None


def check_regex(pattern: str) -> str | None:
    """None when the pattern is valid, else the reason it is not."""
    try:
        compile_regex(pattern)
    except InvalidRegex as e:
        return str(e)
    return None


def _matchable(name: str) -> bool:
    return not name.startswith("__")


def resolve_now(patterns: Iterable[str], names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Each pattern's matching topic names (an invalid pattern matches nothing)."""
    compiled = {}
    for p in patterns:
        try:
            compiled[p] = compile_regex(p)
        except InvalidRegex:
            compiled[p] = None
    out: dict[str, set[str]] = {p: set() for p in compiled}
    for name in names:
        if _matchable(name):
            for p, rx in compiled.items():
                if rx is not None and rx.fullmatch(name):
                    out[p].add(name)
    return {p: frozenset(s) for p, s in out.items()}


async def resolve(patterns: Iterable[str], names: list[str]) -> dict[str, frozenset[str]]:
    """resolve_now in slices of SLICE names, yielding to the event loop before and between them."""
    patterns = list(patterns)
    result: dict[str, set[str]] = {p: set() for p in patterns}
    await asyncio.sleep(0)
    for start in range(0, len(names), SLICE):
        for p, matched in resolve_now(patterns, names[start:start + SLICE]).items():
            result[p] |= matched
        await asyncio.sleep(0)
    return {p: frozenset(s) for p, s in result.items()}
