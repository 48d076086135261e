"""``kbroker schemas``: the Schema Registry from the command line (its REST API, as curl would).

    kbroker schemas [--url URL] [--user U:P] [--ca-file F] list [--prefix P] [--deleted]
    kbroker schemas get SUBJECT [--version V|latest] [--schema-only] [--format serialized]
    kbroker schemas get --id N [--schema-only] [--format serialized]
    kbroker schemas register SUBJECT --schema-file F [--type AVRO|JSON|PROTOBUF]
                             [--reference NAME=SUBJECT:VERSION ...] [--normalize]
    kbroker schemas delete SUBJECT [--version V] [--permanent]
    kbroker schemas compatibility SUBJECT --schema-file F [--type T] [--version V|latest]
    kbroker schemas config [SUBJECT] [--set LEVEL | --delete]

``--url`` defaults to $KBROKER_SCHEMA_REGISTRY_URL, else http://localhost:8081 (the quick start's
listener). ``register`` prints the id, ``compatibility`` prints ``compatible`` (exit 0) or
``incompatible`` and the reasons (exit 1). A registry error prints its message and error code.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from cli.common import CliError, run_tool

PROG = "kbroker schemas"
DEFAULT_URL = "http://localhost:8081"
TIMEOUT_S = 30.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Subjects, schemas and compatibility of the Schema Registry.")
    p.add_argument("--url", default=os.environ.get("KBROKER_SCHEMA_REGISTRY_URL", DEFAULT_URL),
                   help=f"registry URL (default $KBROKER_SCHEMA_REGISTRY_URL or {DEFAULT_URL})")
    p.add_argument("--user", metavar="USER:PASSWORD", help="HTTP basic authentication")
    p.add_argument("--ca-file", help="PEM CA certificates to verify an https:// registry")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="subjects")
    ls.add_argument("--prefix", default="", help="only subjects starting with this")
    ls.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")
    g = sub.add_parser("get", help="a subject's version (default latest) or a schema by --id")
    g.add_argument("subject", nargs="?")
    g.add_argument("--version", default="latest")
    g.add_argument("--id", type=int)
    g.add_argument("--schema-only", action="store_true", help="print only the schema text")
    g.add_argument("--format", default="", help="e.g. serialized (Protobuf as a base64 descriptor)")
    r = sub.add_parser("register", help="register a schema under a subject (prints its id)")
    r.add_argument("subject")
    r.add_argument("--schema-file", required=True, help="the schema (.avsc, .json, .proto; - for stdin)")
    r.add_argument("--type", choices=("AVRO", "JSON", "PROTOBUF"), help="default: from the file name, else AVRO")
    r.add_argument("--reference", action="append", metavar="NAME=SUBJECT:VERSION")
    r.add_argument("--normalize", action="store_true")
    d = sub.add_parser("delete", help="soft-delete a subject or one version (--permanent after a soft delete)")
    d.add_argument("subject")
    d.add_argument("--version")
    d.add_argument("--permanent", action="store_true")
    c = sub.add_parser("compatibility", help="test a schema against a subject's versions")
    c.add_argument("subject")
    c.add_argument("--schema-file", required=True)
    c.add_argument("--type", choices=("AVRO", "JSON", "PROTOBUF"))
    c.add_argument("--reference", action="append", metavar="NAME=SUBJECT:VERSION")
    c.add_argument("--version", help="one version (default: as the subject's level decides)")
    cf = sub.add_parser("config", help="compatibility level of the registry or of one subject")
    cf.add_argument("subject", nargs="?")
    what = cf.add_mutually_exclusive_group()
    what.add_argument("--set", metavar="LEVEL", help="NONE, BACKWARD(_TRANSITIVE), FORWARD(_TRANSITIVE), FULL(_TRANSITIVE)")
    what.add_argument("--delete", action="store_true", help="drop the subject's level (or reset the global one)")
    return p


class Registry:
    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.url.rstrip("/")
        self.headers = {"Content-Type": "application/vnd.schemaregistry.v1+json",
                        "Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if args.user:
            self.headers["Authorization"] = "Basic " + base64.b64encode(args.user.encode()).decode()
        self.context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=self.context) as resp:
                text = resp.read()
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                err = json.loads(text)
                raise CliError(f"{err.get('message')} (error {err.get('error_code')})") from None
            except (ValueError, AttributeError):
                raise CliError(f"HTTP {e.code}: {text[:200]!r}") from None
        except urllib.error.URLError as e:
            raise CliError(f"cannot reach the schema registry at {self.url}: {e.reason}") from None
        try:
            return json.loads(text)
        except ValueError:
            return text.decode()


def _subject(s: str) -> str:
    return quote(s, safe="")


def _schema_body(args: argparse.Namespace) -> dict:
    path = args.schema_file
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    kind = args.type or ("PROTOBUF" if path.endswith(".proto") else "JSON" if path.endswith(".json") else "AVRO")
    body: dict[str, Any] = {"schema": text}
    if kind != "AVRO":
        body["schemaType"] = kind
    refs = []
    for item in args.reference or []:
        name, _, rest = item.partition("=")
        subject, _, version = rest.rpartition(":")
        if not name or not subject or not version.lstrip("-").isdigit():
            raise CliError(f"--reference {item!r}: expected NAME=SUBJECT:VERSION")
        refs.append({"name": name, "subject": subject, "version": int(version)})
    if refs:
        body["references"] = refs
    return body


def run(args: argparse.Namespace) -> int:
    reg = Registry(args)
    out = sys.stdout
    if args.command == "list":
        flag = "&deleted=true" if args.deleted else ""
        for s in reg.call("GET", f"/subjects?subjectPrefix={quote(args.prefix, safe='')}{flag}"):
            print(s, file=out)
    elif args.command == "get":
        fmt = f"?format={quote(args.format)}" if args.format else ""
        if args.id is not None:
            doc = reg.call("GET", f"/schemas/ids/{args.id}{fmt}")
        elif args.subject:
            doc = reg.call("GET", f"/subjects/{_subject(args.subject)}/versions/{quote(str(args.version))}{fmt}")
        else:
            raise CliError("get needs a SUBJECT or --id")
        print(doc["schema"] if args.schema_only else json.dumps(doc, indent=2), file=out)
    elif args.command == "register":
        flag = "?normalize=true" if args.normalize else ""
        doc = reg.call("POST", f"/subjects/{_subject(args.subject)}/versions{flag}", _schema_body(args))
        print(doc["id"], file=out)
    elif args.command == "delete":
        flag = "?permanent=true" if args.permanent else ""
        if args.version:
            doc = reg.call("DELETE", f"/subjects/{_subject(args.subject)}/versions/{quote(args.version)}{flag}")
        else:
            doc = reg.call("DELETE", f"/subjects/{_subject(args.subject)}{flag}")
        print(json.dumps(doc), file=out)
    elif args.command == "compatibility":
        path = f"/compatibility/subjects/{_subject(args.subject)}/versions"
        if args.version:
            path += f"/{quote(args.version)}"
        doc = reg.call("POST", path + "?verbose=true", _schema_body(args))
        if doc.get("is_compatible"):
            print("compatible", file=out)
            return 0
        print("incompatible", file=out)
        for m in doc.get("messages") or []:
            print(f"  {m}", file=out)
        return 1
    elif args.command == "config":
        path = "/config" + (f"/{_subject(args.subject)}" if args.subject else "")
        if args.set:
            print(reg.call("PUT", path, {"compatibility": args.set.upper()})["compatibility"], file=out)
        elif args.delete:
            print(reg.call("DELETE", path)["compatibilityLevel"], file=out)
        else:
            print(reg.call("GET", path + ("?defaultToGlobal=true" if args.subject else ""))["compatibilityLevel"],
                  file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool(PROG, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
