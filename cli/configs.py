"""``kbroker configs``: describe and change topic and broker configs, like kafka-configs.sh.

    kbroker configs [-b H:P] describe --entity-type topics|brokers (--entity-name N | --entity-default) [--all]
    kbroker configs alter --entity-type topics|brokers (--entity-name N | --entity-default)
                          [--add-config k=v,k2=[a,b]] [--delete-config k,k2]
    kbroker configs describe|alter --entity-type users|clients [--entity-name N | --entity-default] ...
    (shorthands: --topic T, --broker ID, --broker-defaults, --user U, --client C, --user-defaults,
    --client-defaults; --user U --client C is the (user, client-id) entity)

DescribeConfigs and IncrementalAlterConfigs (SET / DELETE) through confluent-kafka's AdminClient.
``describe`` prints the dynamic configs (the topic's overrides, or the broker's dynamic settings)
in Kafka's ``k=v sensitive=false synonyms={...}`` layout, or every config with ``--all``; without
``--entity-name`` it describes every topic (internal ones included), or every broker and then the
cluster-wide default, as kafka-configs.sh does. Kafka's flag form ``--describe`` / ``--alter`` works
as well as the action word.
``--entity-default`` on brokers is the cluster-wide dynamic default (resource name ""): librdkafka
refuses an empty resource name, so that one goes through the protocol client (PLAINTEXT only).
``users`` and ``clients`` are client quotas (producer_byte_rate, consumer_byte_rate,
request_percentage, controller_mutation_rate), through DescribeClientQuotas / AlterClientQuotas
over the protocol client (PLAINTEXT only for now), printed as kafka-configs.sh prints them
("Quota configs for user-principal 'alice' are producer_byte_rate=1024.0"); describe without a
name lists every entity of that type. SCRAM credentials belong to ``kbroker users``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from cli.common import CliError, add_connection_options, admin_client, kafka_action_form, run_tool, wait

PROG = "kbroker configs"
ENTITY_TYPES = ("topics", "brokers", "users", "clients")
# ConfigSource names as Kafka's ConfigEntry.ConfigSource prints them.
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Describe and alter topic and broker configs.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("describe", help="show the configs of an entity")
    d.add_argument("--all", action="store_true", help="every config, not only the dynamic ones")
    a = sub.add_parser("alter", help="set or delete configs of an entity")
    a.add_argument("--add-config", metavar="K=V,K2=[A,B]", help="configs to set (list values in [])")
    a.add_argument("--delete-config", metavar="K,K2", help="configs to remove (back to their default)")
    for action in (d, a):
        action.add_argument("--entity-type", choices=ENTITY_TYPES)
        action.add_argument("--entity-name")
        action.add_argument("--entity-default", action="store_true", help="the cluster-wide broker default")
        action.add_argument("--topic", help="shorthand for --entity-type topics --entity-name T")
        action.add_argument("--broker", help="shorthand for --entity-type brokers --entity-name ID")
        action.add_argument("--broker-defaults", action="store_true",
                            help="shorthand for --entity-type brokers --entity-default")
        action.add_argument("--user", help="shorthand for --entity-type users --entity-name U")
        action.add_argument("--client", help="shorthand for --entity-type clients --entity-name C")
        action.add_argument("--user-defaults", action="store_true", help="the default user quota entity")
        action.add_argument("--client-defaults", action="store_true", help="the default client-id quota entity")
    add_connection_options(p, sub)
    return p


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, resource name) from the long or the shorthand options; the name is None for
    ``describe`` of every entity of the type."""
    kind, name, default = args.entity_type, args.entity_name, args.entity_default
    if _quota_shorthands(args):
        return "quotas", ""
    if args.topic is not None:
        kind, name = "topics", args.topic
    elif args.broker is not None:
        kind, name = "brokers", args.broker
    elif args.broker_defaults:
        kind, default = "brokers", True
    if kind is None:
        raise CliError("say which entity: --entity-type topics|brokers with --entity-name or --entity-default")
    if kind in ("users", "clients"):
        return "quotas", ""
    if default:
        if kind != "brokers":
            raise CliError("--entity-default applies to --entity-type brokers only")
        return kind, ""
    if not name:
        if args.command == "describe":
            return kind, None  # Kafka: every topic / every broker and the default
        raise CliError(f"--entity-name is required for --entity-type {kind}")
    return kind, name


def _label(kind: str, name: str) -> str:
    if kind == "topics":
        return f"topic {name}"
    return f"broker {name}" if name else "the default broker"


def _resource(kind: str, name: str, ops: list[Any] | None = None) -> Any:
    from confluent_kafka.admin import ConfigResource, ResourceType

    return ConfigResource(ResourceType.TOPIC if kind == "topics" else ResourceType.BROKER, name,
                          incremental_configs=ops)


def _describe(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = _entity(args)
    if name is None:
        from cli.common import cluster_metadata

        # As kafka-configs.sh --describe without --entity-name: every topic (internal ones too),
        # or every broker followed by the cluster-wide default.
        md = cluster_metadata(admin)
        names = sorted(md.topics) if kind == "topics" else [*map(str, sorted(md.brokers)), ""]
        for entity in names:
            _describe_one(admin, args, out, kind, entity)
        return 0
    return _describe_one(admin, args, out, kind, name)


def _describe_one(admin: Any, args: argparse.Namespace, out: TextIO, kind: str, name: str) -> int:
    if kind == "brokers" and not name:
        entries = _default_broker_request(args, None)
    else:
        res = _resource(kind, name)
        entries = wait(admin.describe_configs([res])[res], f"describing the configs of {_label(kind, name)}")
    # As kafka-configs.sh: only the entity's own dynamic settings, unless --all.
    own = 1 if kind == "topics" else 2 if name else 3
    shown = [e for _, e in sorted(entries.items()) if args.all or _source(e) == own]
    if kind == "topics":
        head = f"{'All' if args.all else 'Dynamic'} configs for topic {name} are:"
    elif name:
        head = f"{'All' if args.all else 'Dynamic'} configs for broker {name} are:"
    else:
        head = "Default configs for brokers in the cluster are:"
    out.write(head + "\n")
    for e in shown:
        value = None if e.is_sensitive else e.value
        synonyms = ", ".join(f"{SOURCE_NAMES.get(_source(s), '?')}:{s.name}={'null' if e.is_sensitive else s.value}"
                             for s in e.synonyms.values())
        out.write(f"  {e.name}={'null' if value is None else value} sensitive={str(e.is_sensitive).lower()} "
                  f"synonyms={{{synonyms}}}\n")
    return 0


class _Entry:
    """A config entry from a raw DescribeConfigs response, shaped like confluent-kafka's ConfigEntry."""

    def __init__(self, name: str, value: str | None, source: int, is_sensitive: bool,
                 synonyms: dict[str, _Entry] | None = None) -> None:
        self.name, self.value, self.source, self.is_sensitive = name, value, source, is_sensitive
        self.synonyms = synonyms or {}


def _protocol_request(args: argparse.Namespace, req: Any, version: int, what: str) -> Any:
    """One request over the protocol client, for what confluent-kafka's AdminClient cannot send."""
    import asyncio

    from cli.common import CONNECT_TIMEOUT_S, TIMEOUT_S, bootstrap_addresses, load_properties
    from protocol.client import ProtocolClient

    if args.command_config and load_properties(args.command_config).get(
            "security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        raise CliError(f"{what} supports PLAINTEXT connections only for now")

    async def run() -> Any:
        host, port = bootstrap_addresses(args.bootstrap_server)[0]
        try:
            client = await asyncio.wait_for(ProtocolClient(host, port, client_id="kbroker-configs").connect(),
                                            CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise CliError(f"cannot connect to {host}:{port}: {getattr(e, 'strerror', None) or e or 'timeout'}") from None
        try:
            return await asyncio.wait_for(client.request(req, version), TIMEOUT_S)
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except TimeoutError:
        raise CliError(f"no answer within {TIMEOUT_S:g} s") from None


def _default_broker_request(args: argparse.Namespace, ops: list[tuple[str, str | None]] | None) -> dict[str, Any]:
    """DescribeConfigs (ops None) or IncrementalAlterConfigs of the cluster-wide broker default over
    the protocol client: librdkafka refuses a ConfigResource whose name is empty."""
    from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

    from protocol.errors import ErrorCode

    if ops is None:
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(version=4, resources=[R(version=4, resource_type=4, resource_name="",
                                                             configuration_keys=None)],
                                     include_synonyms=True, include_documentation=False)
        resp = _protocol_request(args, req, 4, "--entity-default")
    else:
        R = IncrementalAlterConfigsRequest.AlterConfigsResource
        req = IncrementalAlterConfigsRequest(version=1, validate_only=False, resources=[R(
            version=1, resource_type=4, resource_name="", configs=[
                R.AlterableConfig(version=1, name=k, config_operation=0 if v is not None else 1, value=v)
                for k, v in ops])])
        resp = _protocol_request(args, req, 1, "--entity-default")
    result = (resp.results if ops is None else resp.responses)[0]
    if result.error_code:
        raise CliError(f"{result.error_message or ''} ({ErrorCode(result.error_code).name})".strip())
    if ops is not None:
        return {}
    out = {}
    for c in result.configs:
        synonyms = {s.name: _Entry(s.name, s.value, s.source, c.is_sensitive) for s in c.synonyms}
        # The default's own value is its DYNAMIC_DEFAULT_BROKER_CONFIG synonym: kbroker answers
        # the top-level value of the answering broker (a per-broker override wins there).
        own = next((s for s in c.synonyms if s.source == 3 and s.name == c.name), None)
        value, source = (own.value, 3) if own is not None else (c.value, c.config_source)
        out[c.name] = _Entry(c.name, value, source, c.is_sensitive, synonyms)
    return out


def _source(entry: Any) -> int:
    s = entry.source
    return int(getattr(s, "value", s))


def split_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's --add-config: ``k=v,k2=v2`` where a list value is bracketed, ``k=[a,b]``."""
    out: dict[str, str] = {}
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in parts:
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--add-config expects k=v[,k2=v2], got {part!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _alter(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    kind, name = _entity(args)
    assert name is not None  # alter needs a name or --entity-default (checked in _entity)
    sets = split_add_config(args.add_config or "")
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not sets and not deletes:
        raise CliError("nothing to change: give --add-config and/or --delete-config")
    both = sorted(set(sets) & set(deletes))
    if both:
        raise CliError(f"a config cannot be both added and deleted: {', '.join(both)}")
    if kind == "topics":
        from cli.common import cluster_metadata, require_topic

        require_topic(cluster_metadata(admin), name)
    if kind == "brokers" and not name:
        _default_broker_request(args, [*sets.items(), *((k, None) for k in deletes)])
        out.write("Completed updating default config for brokers in the cluster.\n")
        return 0
    ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
    ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    res = _resource(kind, name, ops)
    wait(admin.incremental_alter_configs([res])[res], f"altering the configs of {_label(kind, name)}")
    out.write(f"Completed updating config for {_label(kind, name)}.\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(kafka_action_form(argv, ["describe", "alter"]))

    def run() -> int:
        kind, name = _entity(args)  # usage errors before any connection
        if kind == "quotas":
            return (_describe_quotas if args.command == "describe" else _alter_quotas)(args, out or sys.stdout)
        admin = admin_client(args)
        if kind == "brokers" and name:
            from cli.common import cluster_metadata

            # librdkafka would wait for an unknown broker id until the timeout.
            if not name.isdigit() or int(name) not in cluster_metadata(admin).brokers:
                raise CliError(f"broker {name} is not in the cluster")
        return (_describe if args.command == "describe" else _alter)(admin, args, out or sys.stdout)

    return run_tool(f"{PROG} {args.command}", run)


if __name__ == "__main__":
    sys.exit(main())


# --- client quotas (users / clients) --------------------------------------------------------------

_QUOTA_TYPES = {"users": "user", "clients": "client-id"}
_QUOTA_LABELS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def _quota_shorthands(args: argparse.Namespace) -> bool:
    return bool(args.user is not None or args.client is not None or args.user_defaults or args.client_defaults)


def _quota_entity(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """[(entity type, name or None, named or default)]; a type without name or default has name None, named False."""
    if _quota_shorthands(args):
        out = []
        if args.user is not None or args.user_defaults:
            out.append(("user", args.user, args.user is not None or args.user_defaults))
        if args.client is not None or args.client_defaults:
            out.append(("client-id", args.client, args.client is not None or args.client_defaults))
        return out
    etype = _QUOTA_TYPES[args.entity_type]
    return [(etype, args.entity_name, args.entity_name is not None or args.entity_default)]


def _describe_quotas(args: argparse.Namespace, out: TextIO) -> int:
    from kafka.protocol.admin import DescribeClientQuotasRequest

    from protocol.errors import ErrorCode

    C = DescribeClientQuotasRequest.ComponentData
    components = [C(version=1, entity_type=t, match_type=(0 if n is not None else 1) if named else 2, match=n)
                  for t, n, named in _quota_entity(args)]
    resp = _protocol_request(args, DescribeClientQuotasRequest(version=1, components=components, strict=True), 1,
                             "client quotas")
    if resp.error_code:
        raise CliError(f"{resp.error_message or ''} ({ErrorCode(resp.error_code).name})".strip())
    for entry in sorted(resp.entries or [], key=lambda e: [(x.entity_type, x.entity_name or "") for x in e.entity]):
        who = ", ".join(f"{_QUOTA_LABELS.get(e.entity_type, e.entity_type)} '{e.entity_name}'" if e.entity_name
                        is not None else f"the default {_QUOTA_LABELS.get(e.entity_type, e.entity_type)}"
                        for e in sorted(entry.entity, key=lambda e: e.entity_type != "user"))
        values = ", ".join(f"{v.key}={v.value}" for v in entry.values)
        out.write(f"Quota configs for {who} are {values}\n")
    return 0


def _alter_quotas(args: argparse.Namespace, out: TextIO) -> int:
    from kafka.protocol.admin import AlterClientQuotasRequest

    from protocol.errors import ErrorCode

    entity = _quota_entity(args)
    if any(not named for _, _, named in entity):
        raise CliError("--entity-name or --entity-default is required to alter client quotas")
    sets = split_add_config(args.add_config or "")
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not sets and not deletes:
        raise CliError("nothing to change: give --add-config and/or --delete-config")
    if any(k.upper().startswith("SCRAM-") for k in [*sets, *deletes]):
        raise CliError("SCRAM credentials are managed with kbroker users")
    values: dict[str, float] = {}
    for k, v in sets.items():
        try:
            values[k] = float(v)
        except ValueError:
            raise CliError(f"the value of {k} must be a number, got {v!r}") from None
    E = AlterClientQuotasRequest.EntryData
    req = AlterClientQuotasRequest(version=1, validate_only=False, entries=[E(
        version=1, entity=[E.EntityData(version=1, entity_type=t, entity_name=n) for t, n, _ in entity],
        ops=[*(E.OpData(version=1, key=k, value=v, remove=False) for k, v in values.items()),
             *(E.OpData(version=1, key=k, value=0.0, remove=True) for k in deletes)])])
    resp = _protocol_request(args, req, 1, "client quotas")
    result = resp.entries[0]
    if result.error_code:
        raise CliError(f"{result.error_message or ''} ({ErrorCode(result.error_code).name})".strip())
    names = ", ".join(f"{'user' if t == 'user' else 'client'} {n if n is not None else '<default>'}"
                      for t, n, _ in entity)
    out.write(f"Completed updating config for {names}.\n")
    return 0
