"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1-3 (Kafka 4.0 removed v0; kafka-python's range).

As Kafka's KafkaApis + AclApis: DescribeAcls needs DESCRIBE on the cluster, CreateAcls and
DeleteAcls ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise, for the whole request / every
entry). With no authorizer configured (authorizer.class.name empty) every answer is SECURITY_DISABLED
"No Authorizer is configured.". A filter or creation with UNKNOWN codes, or an invalid creation
(ANY types, a cluster resource not named kafka-cluster, an empty name, an unparseable principal)
answers INVALID_REQUEST for that entry; the valid ones of the same request are carried out. ACLs live
in the metadata store (one change per request: created ones are persisted before the answer).
Deviation: Kafka rejects a whole Create/DeleteAcls request with UNKNOWN elements at parse time;
kbroker answers INVALID_REQUEST per entry.
"""

from __future__ import annotations

from collections import defaultdict

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from broker.handlers import RequestContext, api
from protocol.errors import ErrorCode, KafkaError
from security.authorizer import AclBinding, AclBindingFilter, AclOperation, binding_error

NO_AUTHORIZER = "No Authorizer is configured."


@api(29, 1, 3)
async def handle_describe_acls(ctx: RequestContext, request) -> DescribeAclsResponse:
    v = ctx.api_version

    def fail(code: int, message: str | None) -> DescribeAclsResponse:
        return DescribeAclsResponse(version=v, throttle_time_ms=0, error_code=code, error_message=message,
                                    resources=[])

    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if ctx.authorizer() is None:
        return fail(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    flt = AclBindingFilter.of(request.resource_type_filter, request.resource_name_filter,
                              request.pattern_type_filter, request.principal_filter, request.host_filter,
                              request.operation, request.permission_type)
    if (why := flt.error()) is not None:
        return fail(ErrorCode.INVALID_REQUEST, why)
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for b in ctx.metadata.acls():
        if flt.matches(b):
            by_resource[(b.resource_type, b.name, b.pattern_type)].append(b)
    R = DescribeAclsResponse.DescribeAclsResource
    A = R.AclDescription
    resources = [R(version=v, resource_type=rt, resource_name=name, pattern_type=pt,
                   acls=[A(version=v, principal=b.principal, host=b.host, operation=b.operation,
                           permission_type=b.permission) for b in acls])
                 for (rt, name, pt), acls in by_resource.items()]
    return DescribeAclsResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


@api(30, 1, 3)
async def handle_create_acls(ctx: RequestContext, request) -> CreateAclsResponse:
    v = ctx.api_version
    R = CreateAclsResponse.AclCreationResult
    n = len(request.creations)

    def all_fail(code: int, message: str | None) -> CreateAclsResponse:
        return CreateAclsResponse(version=v, throttle_time_ms=0,
                                  results=[R(version=v, error_code=code, error_message=message) for _ in range(n)])

    if not ctx.authorize_cluster(AclOperation.ALTER):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if ctx.authorizer() is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    results: list[tuple[int, str | None]] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        b = AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                          c.operation, c.permission_type)
        why = binding_error(b)
        results.append((ErrorCode.INVALID_REQUEST, why) if why is not None else (0, None))
        if why is None:
            valid.append(b)
    if valid:
        try:
            await ctx.metadata.alter_acls(valid, [])
        except KafkaError as e:
            results = [(e.code, str(e)) if code == 0 else (code, msg) for code, msg in results]
    return CreateAclsResponse(version=v, throttle_time_ms=0,
                              results=[R(version=v, error_code=code, error_message=msg) for code, msg in results])


@api(31, 1, 3)
async def handle_delete_acls(ctx: RequestContext, request) -> DeleteAclsResponse:
    v = ctx.api_version
    F = DeleteAclsResponse.DeleteAclsFilterResult
    M = F.DeleteAclsMatchingAcl
    n = len(request.filters)

    def all_fail(code: int, message: str | None) -> DeleteAclsResponse:
        return DeleteAclsResponse(version=v, throttle_time_ms=0, filter_results=[
            F(version=v, error_code=code, error_message=message, matching_acls=[]) for _ in range(n)])

    if not ctx.authorize_cluster(AclOperation.ALTER):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if ctx.authorizer() is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    existing = ctx.metadata.acls()
    per_filter: list[tuple[str | None, list[AclBinding]]] = []
    doomed: dict[AclBinding, None] = {}
    for f in request.filters:
        flt = AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                  f.principal_filter, f.host_filter, f.operation, f.permission_type)
        why = flt.error()
        matched = [] if why is not None else [b for b in existing if flt.matches(b)]
        per_filter.append((why, matched))
        doomed.update(dict.fromkeys(matched))
    error: KafkaError | None = None
    if doomed:
        try:
            await ctx.metadata.alter_acls([], list(doomed))
        except KafkaError as e:
            error = e
    out = []
    for why, matched in per_filter:
        if why is not None:
            out.append(F(version=v, error_code=ErrorCode.INVALID_REQUEST, error_message=why, matching_acls=[]))
        elif error is not None and matched:
            out.append(F(version=v, error_code=error.code, error_message=str(error), matching_acls=[]))
        else:
            out.append(F(version=v, error_code=0, error_message=None, matching_acls=[
                M(version=v, error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.name,
                  pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                  permission_type=b.permission) for b in matched]))
    return DeleteAclsResponse(version=v, throttle_time_ms=0, filter_results=out)
