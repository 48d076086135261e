"""The ApiVersions answer is kept encoded per version and finalized feature levels: it must be the
answer built afresh, for every version, and follow a change of the finalized levels."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kafka.protocol.metadata import ApiVersionsResponse

from broker.handlers import HANDLERS, RawResponse, load_handlers
from broker.handlers.api_versions import _build, handle_api_versions

load_handlers()  # every handler registered, as the broker does


class Levels:
    def __init__(self, levels: dict[str, int], epoch: int) -> None:
        self.levels, self.epoch = levels, epoch

    def finalized_features(self) -> dict[str, int]:
        return dict(self.levels)

    def features_epoch(self) -> int:
        return self.epoch


def answer(version: int, md: Levels) -> bytes:
    resp = asyncio.run(handle_api_versions(SimpleNamespace(api_version=version, metadata=md), None))
    assert isinstance(resp, RawResponse)
    return b"".join(bytes(c) for c in resp.chunks)


@pytest.mark.parametrize("version", range(5))
def test_kept_answer_is_the_built_one(version):
    md = Levels({"transaction.version": 2, "share.version": 1}, 3)
    first = answer(version, md)
    assert answer(version, md) == first
    decoded = ApiVersionsResponse.decode(first, version=version)
    assert decoded.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys} == {
        r.api_key: (r.min_version, r.max_version) for r in HANDLERS.values()}
    key = (version, 3, (("share.version", 1), ("transaction.version", 2))) if version >= 3 else (version, -1, ())
    assert first == bytes(_build(*key).encode(version=version))


def test_answer_follows_the_finalized_levels():
    md = Levels({"transaction.version": 2}, 5)
    before = ApiVersionsResponse.decode(answer(3, md), version=3)
    md.levels, md.epoch = {"transaction.version": 1}, 6
    after = ApiVersionsResponse.decode(answer(3, md), version=3)
    assert [(f.name, f.max_version_level) for f in before.finalized_features] == [("transaction.version", 2)]
    assert [(f.name, f.max_version_level) for f in after.finalized_features] == [("transaction.version", 1)]
    assert (before.finalized_features_epoch, after.finalized_features_epoch) == (5, 6)
