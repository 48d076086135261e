"""DescribeConfigs (32) v1-4, AlterConfigs (33) v0-2, IncrementalAlterConfigs (44) v0-1.

Resources: TOPIC (2), BROKER (4; name = this node's id, or "" for the cluster-wide dynamic
default) and GROUP (32: Kafka's group configs, broker/config/group_configs.py, e.g. the KIP-932
``share.record.lock.duration.ms`` / ``share.isolation.level`` / ``share.auto.offset.reset``; source
GROUP_CONFIG (8) when set, else DEFAULT_CONFIG with the broker's value). Entries carry Kafka's
sources (1 topic override, 2 per-broker dynamic, 3 cluster-wide dynamic default, 4 static: the
properties file or --override, 5 default), synonyms when asked
(v1+) and documentation (v3+). Synonyms follow Kafka's ConfigHelper: the values of a config's
spellings layer by layer (2, 3, 4, 5) from its own name on; a listener-prefixed name's base name
after it; on the cluster-default resource only layer 3; for a topic config its override first,
then the synonyms of the broker config that supplies its default (so retention.ms inherited from
log.retention.hours alone lists none, with source 5, as Kafka reports it); an entry's source is
its first synonym's. AlterConfigs replaces a topic's whole override set; IncrementalAlterConfigs
applies SET / DELETE / APPEND / SUBTRACT per key. Changes are validated first (INVALID_CONFIG,
nothing applied), persisted in the MetadataStore, and take effect on the live partitions at once;
a BROKER change is only written to the store, and every broker it concerns (the default: all;
"<id>": that one) applies it from there (broker/config/dynamic_watch.py, as Kafka's brokers apply
the controller's config records), this one before the answer. BROKER_LOGGER (8) is not supported
(INVALID_REQUEST).

Broker resources know every config of Kafka 3.9's broker definition (broker/config/
kafka_broker_configs.py); the ones kbroker does not act on are stored, persisted and described
all the same ("accepted, no effect"). The resulting config set is validated the way Kafka's
ConfigAdminManager / DynamicBrokerConfig.validateConfigs do, in Kafka's order and with its
INVALID_REQUEST (KAFKA-13609) and messages: a read-only config ("Cannot update these configs
dynamically: Set(...)"), a bare SSL keystore/truststore config ("These security configs can be
dynamically updated only per-listener using the listener prefix: Set(...)"), a value of the wrong
type, a per-broker config on the cluster default resource ("Cannot update these configs at default
cluster level, broker id must be specified: Set(...)"). Deviation: a name Kafka does not define
answers INVALID_CONFIG "Unknown broker config name" (Kafka stores any name; kbroker rejects typos).
Configs kbroker acts on keep kbroker's own dynamic flag (listeners, advertised.listeners and
listener.security.protocol.map, per-broker dynamic in Kafka, are read-only here: a broker does not
rebind its listeners). The thread counts are dynamic as in Kafka, without effect, within Kafka's
reconfiguration check (half to double the current value, else INVALID_REQUEST "Invalid dynamic
configuration"). Listener-prefixed names (``listener.name.<l>.ssl.*``,
``listener.name.<l>.sasl.enabled.mechanisms``, for a listener of this broker) are per-broker; a
change naming ``listener.name.<l>.ssl.keystore.*`` / ``ssl.key.password`` / ``ssl.truststore.*`` (the same
value included) reloads that listener's certificate for new connections, after Kafka's
SslFactory validation (loads, same DN / SANs); a failure answers INVALID_REQUEST and nothing changes.

ACLs (as KafkaApis): DescribeConfigs needs DESCRIBE_CONFIGS, the alter APIs ALTER_CONFIGS, on the
topic (TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED) or, for broker
resources, on the cluster (CLUSTER_AUTHORIZATION_FAILED), per resource.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from broker import listener_security
from broker.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    describe_topic_config,
    group_configs,
    validate_topic_configs,
)
from broker.config.kafka_broker_configs import DYNAMIC_SECURITY_CONFIGS, per_broker_only
from broker.handlers import AclOperation, RequestContext, ResourceType, api
from broker.services import BrokerServices
from protocol.errors import ErrorCode, KafkaError
from security.tls import TlsConfigError

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


def _check_broker_name(ctx: RequestContext, name: str) -> bool:
    """True for the cluster default (""), False for this broker; other ids are an error."""
    if name == "":
        return True
    try:
        if int(name) == ctx.node_id:
            return False
    except ValueError:
        pass
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.node_id} or empty "
                                                f"string, but received {name}")


def _authorize(ctx: RequestContext, op: AclOperation, rtype: int, name: str) -> None:
    if rtype == TOPIC:
        if not ctx.authorize(op, ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    elif rtype == GROUP:
        if not ctx.authorize(op, ResourceType.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif rtype in (BROKER, BROKER_LOGGER) and not ctx.authorize_cluster(op):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def _entries(ctx: RequestContext, rtype: int, name: str) -> list[ConfigEntry]:
    if rtype == TOPIC:
        info = ctx.metadata.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        return describe_topic_config(info.configs, ctx.config)
    if rtype == BROKER:
        return ctx.config.describe(cluster_default=_check_broker_name(ctx, name))
    if rtype == GROUP:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return group_configs.describe(ctx.metadata.group_configs().get(name, {}), ctx.config.get)
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")


@api(32, 1, 4)
async def handle_describe_configs(ctx: RequestContext, request) -> DescribeConfigsResponse:
    v = ctx.api_version
    results = []
    for res in request.resources:
        try:
            _authorize(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
            entries = _entries(ctx, res.resource_type, res.resource_name)
            keys = set(res.configuration_keys) if res.configuration_keys is not None else None
            configs = [
                Entry(version=v, name=e.name, value=None if e.sensitive else e.value, read_only=e.read_only,
                      config_source=e.source, is_default=e.is_default, is_sensitive=e.sensitive,
                      synonyms=[Synonym(version=v, name=s.name, value=s.value, source=s.source) for s in e.synonyms]
                      if request.include_synonyms else [],
                      config_type=e.config_type,
                      documentation=e.documentation if request.include_documentation else None)
                for e in entries if keys is None or e.name in keys
            ]
            results.append(Result(version=v, error_code=0, error_message=None, resource_type=res.resource_type,
                                  resource_name=res.resource_name, configs=configs))
        except KafkaError as e:
            results.append(Result(version=v, error_code=e.code, error_message=e.message,
                                  resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
    return DescribeConfigsResponse(version=v, throttle_time_ms=0, results=results)


def _apply_ops(current: dict[str, str], ops: list[tuple[str, int, str | None]], list_names: set[str]) -> dict[str, str]:
    new = dict(current)
    for name, op, value in ops:
        if op == SET:
            if value is None:
                raise ConfigError(f"Null value not supported for SET of {name}")
            new[name] = value
        elif op == DELETE:
            new.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if name not in list_names:
                raise ConfigError(f"Config value append/subtract is not allowed for config key {name}, "
                                  "which is not a list")
            items = [x.strip() for x in new.get(name, "").split(",") if x.strip()]
            values = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in values if x not in items]
            else:
                items = [x for x in items if x not in values]
            new[name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return new


def _scala_set(names: list[str]) -> str:
    # Kafka's messages print a Scala Set: "Set(a, b)".
    return "Set(" + ", ".join(names) + ")"


def _validate_broker_configs(cfg: BrokerConfig, props: dict[str, str], cluster_default: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs on the resource's resulting dynamic config set."""
    defs = {k: cfg.definition(k) for k in props}
    unknown = [k for k, d in defs.items() if d is None]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {', '.join(unknown)}")
    read_only = [k for k, d in defs.items() if not d.dynamic]
    if read_only:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {_scala_set(read_only)}")
    bare_security = [k for k in props if k in DYNAMIC_SECURITY_CONFIGS]
    if bare_security:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "These security configs can be dynamically updated only "
                                                    f"per-listener using the listener prefix: {_scala_set(bare_security)}")
    for k, v in props.items():
        try:
            defs[k].parse(v)  # type: ignore[union-attr]
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
    if cluster_default:
        # Listener-prefixed names are per-broker too (Kafka's perBrokerListenerConfig).
        per_broker = [k for k in props if per_broker_only(k)]
        if per_broker:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                                                        f"broker id must be specified: {_scala_set(per_broker)}")
    _validate_reconfiguration(cfg, props, cluster_default)


# Kafka's DynamicThreadPool, SocketServer and LogCleaner reconfigurables: a thread count may change
# to between half and double its current value (at least 1).
THREAD_COUNTS = ("num.io.threads", "num.network.threads", "num.recovery.threads.per.data.dir", "background.threads",
                 "num.replica.fetchers", "log.cleaner.threads")


def _validate_reconfiguration(cfg: BrokerConfig, props: dict[str, str], cluster_default: bool) -> None:
    """Kafka's processReconfiguration(validateOnly = true): the effective values this broker would
    take (the changed layer replaced by ``props``) checked by the reconfigurables concerned; a
    refusal is INVALID_REQUEST "Invalid dynamic configuration", Kafka's message."""
    own = cfg.dynamic if cluster_default else props
    default = props if cluster_default else cfg.dynamic_default
    for name in THREAD_COUNTS:
        raw = own.get(name, default.get(name, cfg.originals.get(name, BROKER_CONFIGS[name].default)))
        new, old = int(raw), int(cfg.get(name))
        if new != old and (new < 1 or new < old // 2 or new > old * 2):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid dynamic configuration")


async def _alter(ctx: RequestContext, rtype: int, name: str, ops: list[tuple[str, int, str | None]],
                 replace: bool, validate_only: bool) -> None:
    _authorize(ctx, AclOperation.ALTER_CONFIGS, rtype, name)
    services = ctx.services
    if rtype == TOPIC:
        info = services.metadata.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        base = {} if replace else info.configs
        list_names = {n for n, d in TOPIC_CONFIGS.items() if d.type == "list"}
        try:
            new = _apply_ops(base, ops, list_names)
            validate_topic_configs(new)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if not validate_only:
            await services.metadata.set_topic_configs(name, new)
    elif rtype == BROKER:
        cluster_default = _check_broker_name(ctx, name)
        cfg = services.config
        resource = None if cluster_default else services.node_id
        # As Kafka's ConfigAdminManager: the change applies to what the metadata store holds.
        current = services.metadata.broker_dynamic_configs(resource)
        try:
            new = _apply_ops({} if replace else current, ops, set())
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        _validate_broker_configs(cfg, new, cluster_default)
        swap_tls = _prepare_tls_reload(services, current, new, [n for n, _, _ in ops], cluster_default)
        if not validate_only:
            # Stored only: every broker it concerns (this one included) applies it from the store
            # (broker/config/dynamic_watch.py); the write returns once this broker has.
            await services.metadata.set_broker_dynamic_configs(resource, new)
            swap_tls()
    elif rtype == GROUP:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        everything = services.metadata.group_configs()
        current = everything.get(name, {})
        try:
            new = _apply_ops({} if replace else current, ops, set())
            group_configs.validate(new, services.config.get)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if not validate_only and new != current:
            updated = {g: c for g, c in everything.items() if g != name}
            if new:
                updated[name] = new
            await services.metadata.alter_group_configs(updated)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")


def _prepare_tls_reload(services: BrokerServices, current: dict[str, str], new: dict[str, str], named: list[str],
                        cluster_default: bool):
    """Kafka's SslFactory.validateReconfiguration for the listeners whose listener.name.<l>.ssl.keystore.* /
    truststore configs the request names (the same value too: it reloads the files) or changes: the new
    material must load and keep the certificate's DN and SANs. Returns the swap, run once stored."""
    if cluster_default:
        return lambda: None
    names = set(named) | {k for k in set(current) | set(new) if current.get(k) != new.get(k)}
    listeners = listener_security.reload_listeners(names, [li.name for li in services.config.listeners])
    if not listeners:
        return lambda: None
    try:
        return listener_security.prepare_tls_reload(services.listener_security(), services.config, new, listeners)
    except TlsConfigError as e:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Validation of dynamic config update of SSLFactory failed: {e}") from None


@api(33, 0, 2)
async def handle_alter_configs(ctx: RequestContext, request) -> AlterConfigsResponse:
    v = ctx.api_version
    out = []
    for res in request.resources:
        code, msg = ErrorCode.NONE, None
        try:
            ops = [(c.name, SET, c.value) for c in res.configs]
            await _alter(ctx, res.resource_type, res.resource_name, ops, True, request.validate_only)
        except KafkaError as e:
            code, msg = e.code, e.message
        out.append(AlterConfigsResponse.AlterConfigsResourceResponse(
            version=v, error_code=code, error_message=msg, resource_type=res.resource_type,
            resource_name=res.resource_name))
    return AlterConfigsResponse(version=v, throttle_time_ms=0, responses=out)


@api(44, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext, request) -> IncrementalAlterConfigsResponse:
    v = ctx.api_version
    out = []
    for res in request.resources:
        code, msg = ErrorCode.NONE, None
        try:
            names = [c.name for c in res.configs]
            if len(names) != len(set(names)):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            ops = [(c.name, c.config_operation, c.value) for c in res.configs]
            await _alter(ctx, res.resource_type, res.resource_name, ops, False, request.validate_only)
        except KafkaError as e:
            code, msg = e.code, e.message
        out.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            version=v, error_code=code, error_message=msg, resource_type=res.resource_type,
            resource_name=res.resource_name))
    return IncrementalAlterConfigsResponse(version=v, throttle_time_ms=0, responses=out)
