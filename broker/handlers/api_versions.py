"""ApiVersions (key 18), versions 0-4.

Advertises exactly the handlers registered in broker/handlers with their version ranges. A
request with a version above what we serve gets the v0-format UNSUPPORTED_VERSION answer listing
our ranges (done in broker/server.py, KIP-511), so the client retries with a version we know.
No feature flags are advertised (finalized_features empty), as a broker without KRaft features.
"""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsResponse

from broker.handlers import HANDLERS, RequestContext, api


def supported_api_keys(version: int) -> list:
    cls = ApiVersionsResponse.ApiVersion
    return [cls(version=version, api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
            for r in sorted(HANDLERS.values(), key=lambda r: r.api_key)]


@api(18, 0, 4)
async def handle_api_versions(ctx: RequestContext, request) -> ApiVersionsResponse:
    return ApiVersionsResponse(version=ctx.api_version, error_code=0, api_keys=supported_api_keys(ctx.api_version),
                               throttle_time_ms=0)
