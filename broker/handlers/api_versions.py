"""ApiVersions (key 18), versions 0-4.

Advertises exactly the handlers registered in broker/handlers with their version ranges. A
request with a version above what we serve gets the v0-format UNSUPPORTED_VERSION answer listing
our ranges (done in broker/request_dispatch.py, KIP-511), so the client retries with a version we know.

v3+ also carries the feature flags (KIP-584, tagged fields): ``supported_features`` lists
``transaction.version`` 0-2 (broker/features.py); ``finalized_features`` the levels finalized in
the metadata store (min = max = the level, as Kafka answers; a level-0 feature is not listed)
with ``finalized_features_epoch``. Clients such as Kafka 4.0+ Java producers use transaction
version 2 only when ``transaction.version`` is finalized at 2 or more.

Every client connection opens with this request, and its answer (~65 API ranges) cost about as
much to build and encode as a replicated produce; the encoded body is kept per version and
finalized feature levels (the registered handlers never change while the broker runs).
"""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsResponse

from broker.features import SUPPORTED_FEATURES
from broker.handlers import HANDLERS, RawResponse, RequestContext, api


def supported_api_keys(version: int) -> list:
    cls = ApiVersionsResponse.ApiVersion
    return [cls(version=version, api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
            for r in sorted(HANDLERS.values(), key=lambda r: r.api_key)]


def _build(v: int, epoch: int, finalized: tuple[tuple[str, int], ...]) -> ApiVersionsResponse:
    if v < 3:
        return ApiVersionsResponse(version=v, error_code=0, api_keys=supported_api_keys(v), throttle_time_ms=0)
    supported = [ApiVersionsResponse.SupportedFeatureKey(version=v, name=n, min_version=lo, max_version=hi)
                 for n, (lo, hi) in sorted(SUPPORTED_FEATURES.items())]
    fin = [ApiVersionsResponse.FinalizedFeatureKey(version=v, name=n, min_version_level=lvl, max_version_level=lvl)
           for n, lvl in finalized]
    return ApiVersionsResponse(version=v, error_code=0, api_keys=supported_api_keys(v), throttle_time_ms=0,
                               supported_features=supported, finalized_features_epoch=epoch,
                               finalized_features=fin)


# (version, features epoch, finalized levels) -> the encoded answer. A few entries at most: one per
# version clients use, renewed when a feature level is finalized.
_ENCODED: dict[tuple[int, int, tuple[tuple[str, int], ...]], bytes] = {}


@api(18, 0, 4)
async def handle_api_versions(ctx: RequestContext, request) -> RawResponse:
    v = ctx.api_version
    if v < 3:
        key: tuple[int, int, tuple[tuple[str, int], ...]] = (v, -1, ())
    else:
        md = ctx.metadata
        key = (v, md.features_epoch(), tuple(sorted(md.finalized_features().items())))
    body = _ENCODED.get(key)
    if body is None:
        if len(_ENCODED) >= 64:  # feature levels changed many times: start over rather than grow
            _ENCODED.clear()
        body = _ENCODED[key] = bytes(_build(*key).encode(version=v))
    return RawResponse([body])
