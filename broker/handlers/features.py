"""UpdateFeatures (key 57), versions 0-2: change finalized feature levels (KIP-584).

The only feature is ``transaction.version`` (levels 0-2, broker/features.py). Levels live in
the metadata store, so the change is persisted before it is answered and survives restarts.
Validation follows Kafka's FeatureControlManager: an unknown feature or a level outside the
supported range -> INVALID_UPDATE_VERSION; lowering a level needs a downgrade upgrade type
(v1+: 2 safe, 3 unsafe; v0: ``allow_downgrade``), raising one with a downgrade type is refused
the same way; a level of 0 removes the feature. The request is all-or-nothing: the first
failing update is the top-level error and nothing is applied (v0-1 also list each feature,
as Kafka does, with NONE). ``validate_only`` (v1+) checks without applying.

Effect of ``transaction.version`` on the transaction coordinator: a transaction started under
TV2 stays TV2 until it ends (its records carry the client transaction version); requests
arriving after a downgrade are handled with TV1 semantics.
"""

from __future__ import annotations

from kafka.protocol.admin import UpdateFeaturesResponse

from broker.features import SUPPORTED_FEATURES
from broker.handlers import AclOperation, RequestContext, api
from protocol.errors import ErrorCode

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def check_update(feature: str, level: int, upgrade_type: int, current: int) -> str | None:
    """Why this update is invalid (INVALID_UPDATE_VERSION), or None."""
    if feature not in SUPPORTED_FEATURES:
        return f"The controller does not support the given feature {feature}."
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return f"Unknown upgrade type {upgrade_type}."
    lo, hi = SUPPORTED_FEATURES[feature]
    if level < 0 or (level > 0 and not lo <= level <= hi):
        return f"Invalid update version {level} for feature {feature}. Supported range is [{lo}, {hi}]."
    if level < current and upgrade_type == UPGRADE:
        return (f"Invalid update version {level} for feature {feature}. Can't downgrade the version of this "
                "feature without setting the upgrade type to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return f"Invalid update version {level} for feature {feature}. Can't downgrade to a newer version."
    return None


@api(57, 0, 2)
async def handle_update_features(ctx: RequestContext, request) -> UpdateFeaturesResponse:
    v = ctx.api_version
    md = ctx.metadata
    current = md.finalized_features()
    updates: dict[str, int] = {}
    error, message = ErrorCode.NONE, None
    if not ctx.authorize_cluster(AclOperation.ALTER):  # ACLs: ALTER on the cluster, as Kafka's controller
        R = UpdateFeaturesResponse.UpdatableFeatureResult
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return UpdateFeaturesResponse(version=v, throttle_time_ms=0, error_code=code, error_message=None, results=[
            R(version=v, feature=u.feature, error_code=code, error_message=None)
            for u in request.feature_updates] if v <= 1 else [])
    for u in request.feature_updates:
        if v == 0:
            kind = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
        else:
            kind = u.upgrade_type
        if u.feature in updates:
            error, message = ErrorCode.INVALID_REQUEST, f"Feature {u.feature} is updated more than once."
            break
        why = check_update(u.feature, u.max_version_level, kind, current.get(u.feature, 0))
        if why is not None:
            error, message = ErrorCode.INVALID_UPDATE_VERSION, why
            break
        updates[u.feature] = max(u.max_version_level, 0)
    if error == ErrorCode.NONE and not (v >= 1 and request.validate_only):
        for name, level in updates.items():
            if level != current.get(name, 0):
                await md.set_finalized_feature(name, level)
    R = UpdateFeaturesResponse.UpdatableFeatureResult
    results = [R(version=v, feature=u.feature, error_code=0, error_message=None)
               for u in request.feature_updates] if v <= 1 else []
    return UpdateFeaturesResponse(version=v, throttle_time_ms=0, error_code=error, error_message=message,
                                  results=results)
