"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1 (kafka-python's range, Kafka's too).

As Kafka's KafkaApis + ClientQuotaControlManager: DescribeClientQuotas needs DESCRIBE_CONFIGS on the
cluster, AlterClientQuotas ALTER_CONFIGS (CLUSTER_AUTHORIZATION_FAILED otherwise, for the whole
request / every entry). Entities are user, client-id or both, with a name or the default (null);
keys producer_byte_rate / consumer_byte_rate (whole numbers), request_percentage and
controller_mutation_rate (doubles). Validation and its messages are Kafka's (security/quotas.py):
an invalid entity or key answers INVALID_REQUEST for that entry and nothing of it is applied; the
valid entries of the same request are applied together, in one change of the metadata store, so
that every broker of a cluster throttles alike. ``validate_only`` checks without applying.
Describe filters: exact name, default, or any specified name, ``strict``; a bad filter answers
INVALID_REQUEST (UNSUPPORTED_VERSION for an unknown entity or match type), as Kafka.

Enforced: producer_byte_rate and consumer_byte_rate (broker/connection.py with security/quotas.py).
Deviations: request_percentage and controller_mutation_rate are stored and described but not
enforced; ip entities (connection_creation_rate) are refused with INVALID_REQUEST.
"""

from __future__ import annotations

from kafka.protocol.admin import AlterClientQuotasResponse, DescribeClientQuotasResponse

from broker.handlers import RequestContext, api
from protocol.errors import ErrorCode, KafkaError
from security import quotas
from security.authorizer import AclOperation


@api(48, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext, request) -> DescribeClientQuotasResponse:
    v = ctx.api_version

    def fail(code: int, message: str | None) -> DescribeClientQuotasResponse:
        return DescribeClientQuotasResponse(version=v, throttle_time_ms=0, error_code=code, error_message=message,
                                            entries=None)

    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        found = quotas.describe(ctx.metadata.client_quotas(),
                                [(c.entity_type, c.match_type, c.match) for c in request.components], request.strict)
    except quotas.QuotaError as e:
        return fail(ErrorCode[e.code], str(e))
    E = DescribeClientQuotasResponse.EntryData
    entries = [E(version=v,
                 entity=[E.EntityData(version=v, entity_type=t, entity_name=n) for t, n in ent],
                 values=[E.ValueData(version=v, key=k, value=val) for k, val in sorted(values.items())])
               for ent, values in found]
    return DescribeClientQuotasResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None,
                                        entries=entries)


@api(49, 0, 1)
async def handle_alter_client_quotas(ctx: RequestContext, request) -> AlterClientQuotasResponse:
    v = ctx.api_version
    E = AlterClientQuotasResponse.EntryData
    allowed = ctx.authorize_cluster(AclOperation.ALTER_CONFIGS)
    results: list[tuple[list[tuple[str, str | None]], int, str | None]] = []
    changes: list[tuple[quotas.Entity, dict[str, float | None]]] = []
    seen: set[quotas.Entity] = set()
    for entry in request.entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        if not allowed:
            results.append((pairs, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
            continue
        try:
            ops: dict[str, float | None] = {}
            ent = quotas.entity(pairs)
            for op in entry.ops:
                if op.key in ops:
                    raise quotas.QuotaError("INVALID_REQUEST", f"Duplicate quota key {op.key} not updating quota "
                                                               f"for this entity {quotas.entity_str(ent)}")
                ops[op.key] = None if op.remove else op.value
            if ent in seen:
                raise quotas.QuotaError("INVALID_REQUEST", f"Ignoring duplicate entity {quotas.entity_str(ent)}")
            seen.add(ent)
            ent = quotas.validate_entity(pairs)
            for key, value in ops.items():
                if value is not None:
                    quotas.validate_value(key, value)
        except quotas.QuotaError as e:
            results.append((pairs, ErrorCode[e.code], str(e)))
            continue
        changes.append((ent, ops))
        results.append((pairs, 0, None))
    if changes and not request.validate_only:
        store = ctx.metadata
        try:
            await store.alter_client_quotas(quotas.altered(store.client_quotas(), changes))
        except KafkaError as e:
            results = [(p, e.code if c == 0 else c, e.message if c == 0 else m) for p, c, m in results]
    return AlterClientQuotasResponse(
        version=v, throttle_time_ms=0,
        entries=[E(version=v, error_code=code, error_message=msg,
                   entity=[E.EntityData(version=v, entity_type=t, entity_name=n) for t, n in pairs])
                 for pairs, code, msg in results])
