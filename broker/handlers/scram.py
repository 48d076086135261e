"""DescribeUserScramCredentials (key 50) v0 and AlterUserScramCredentials (key 51) v0.

Credentials live in the metadata store (salt, StoredKey, ServerKey, iterations; never a password).
Validation and errors are Kafka's (ScramControlManager / KRaftMetadataCache.describeScramCredentials):
- Describe: null or empty ``users`` lists every user with credentials; a user named twice gets
  DUPLICATE_RESOURCE, a user without credentials RESOURCE_NOT_FOUND;
- Alter: a user altered twice in one request gets DUPLICATE_RESOURCE; an empty name or iterations
  outside 4096..16384 UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
  deleting a missing credential RESOURCE_NOT_FOUND. Accepted changes are written together.
ACLs (as Kafka): Describe needs DESCRIBE, Alter ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kafka.protocol.admin import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse

from broker.handlers import AclOperation, RequestContext, api
from protocol.errors import ErrorCode
from security import scram_credentials as scram


@api(50, 0, 0)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request) -> DescribeUserScramCredentialsResponse:
    v = ctx.api_version
    R = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    info = R.CredentialInfo
    creds = ctx.metadata.scram_credentials()
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DescribeUserScramCredentialsResponse(version=v, throttle_time_ms=0, error_code=code, error_message=None,
                                                    results=[R(version=v, user=u.name, error_code=code,
                                                               error_message=None, credential_infos=[])
                                                             for u in request.users or []])

    def described(user: str) -> R:
        return R(version=v, user=user, error_code=0, error_message=None,
                 credential_infos=[info(version=v, mechanism=scram.MECHANISM_CODES[m], iterations=c.iterations)
                                   for m, c in sorted(creds[user].items())])

    results = []
    if not request.users:
        results = [described(u) for u in sorted(creds)]
    else:
        names = [u.name for u in request.users]
        seen: set[str] = set()
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            if names.count(name) > 1:
                results.append(R(version=v, user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                                 error_message="Cannot describe SCRAM credentials for the same user twice in a "
                                               f"single request: {name}", credential_infos=[]))
            elif not creds.get(name):
                results.append(R(version=v, user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                 error_message=f"Attempt to describe a user credential that does not exist: {name}",
                                 credential_infos=[]))
            else:
                results.append(described(name))
    return DescribeUserScramCredentialsResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None,
                                                results=results)


@api(51, 0, 0)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request) -> AlterUserScramCredentialsResponse:
    v = ctx.api_version
    store = ctx.metadata
    ups = list(request.upsertions)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in ups])
        Res = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        return AlterUserScramCredentialsResponse(version=v, throttle_time_ms=0, results=[
            Res(version=v, user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
            for u in users])
    results, deletions, accepted = scram.validate_alter(
        [(d.name, d.mechanism) for d in request.deletions],
        [(u.name, u.mechanism, u.iterations) for u in ups], store.scram_credentials())
    upserts = []
    for user, code, index in accepted:
        u = ups[index]
        mech = scram.MECHANISM_TYPES[code]
        upserts.append((user, mech, scram.from_salted_password(mech, bytes(u.salt), bytes(u.salted_password),
                                                              u.iterations)))
    if deletions or upserts:
        await store.alter_scram_credentials([(u, scram.MECHANISM_TYPES[c]) for u, c in deletions], upserts)
    R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    return AlterUserScramCredentialsResponse(
        version=v, throttle_time_ms=0,
        results=[R(version=v, user=r.user, error_code=r.error_code, error_message=r.error_message) for r in results])
