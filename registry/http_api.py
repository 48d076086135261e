"""The Schema Registry's REST API (Confluent's paths, bodies and error codes), served with
aiohttp on the broker's event loop.

Reads answer from this broker's replayed copy of ``_schemas``. Writes (register, delete, config,
mode) run on the primary, the leader of ``_schemas``-0: another broker forwards the request to
the primary's advertised registry URL (marked so it is never forwarded twice) and, before it
answers, waits until its own copy has replayed the write, so a read after a write on the same
broker sees it. Bad input is answered with the registry's error codes and logged.

Optional HTTP basic authentication checks the broker's own credentials (``authenticate``);
TLS uses the ssl context the broker builds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from registry import errors as E
from registry.service import SchemaRegistry, check_subject, parse_version

log = logging.getLogger("registry.http")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED = "X-Kbroker-Registry-Forwarded"
OFFSET = "X-Kbroker-Schemas-Offset"
FORWARD_TIMEOUT_S = 30.0
READ_AFTER_WRITE_S = 10.0

Authenticate = Callable[[str, str], Awaitable[bool]]


def parse_listener(value: str) -> tuple[str, str, int]:
    """``http[s]://HOST:PORT`` -> (scheme, host, port); ValueError otherwise."""
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or url.port is None or url.path not in ("", "/"):
        raise ValueError(f"a schema registry listener looks like http://HOST:PORT or https://HOST:PORT, got {value!r}")
    return url.scheme, url.hostname or "", url.port


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=json.dumps(data, ensure_ascii=False), status=status, content_type=CONTENT_TYPE.split(";")[0],
                        headers=headers)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


def _int_query(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        raise E.unprocessable(f"query parameter {name} must be an integer") from None


def _page(items: list, request: web.Request) -> list:
    offset = max(0, _int_query(request, "offset", 0))
    limit = _int_query(request, "limit", -1)
    return items[offset:] if limit < 0 else items[offset:offset + limit]


def _schema_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise E.schema_not_found(text) from None


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise E.bad_request(f"Unexpected request body: not JSON ({e})") from None


class RegistryServer:
    def __init__(self, registry: SchemaRegistry, listener: str, *, ssl_context: ssl.SSLContext | None = None,
                 authenticate: Authenticate | None = None, client_ssl: ssl.SSLContext | None = None,
                 max_body_bytes: int = 4 << 20) -> None:
        self.registry = registry
        self.scheme, self.host, self.port = parse_listener(listener)
        if self.scheme == "https" and ssl_context is None:
            raise ValueError("an https:// schema registry listener needs the broker's ssl.keystore settings")
        self.ssl_context = ssl_context
        self.client_ssl = client_ssl
        self.authenticate = authenticate
        self.app = web.Application(middlewares=[self._errors], client_max_size=max_body_bytes)
        self._routes()
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self.bound: tuple[str, int] | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        # A stopping broker waits at most 5 s for requests in flight (kbroker.shutdown.timeout.ms is 20 s).
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host or None, self.port, ssl_context=self.ssl_context,
                           reuse_address=True)
        await site.start()
        server = site._server  # noqa: SLF001 - the bound address of an ephemeral port
        addr = server.sockets[0].getsockname() if server is not None and server.sockets else (self.host, self.port)
        self.bound = (addr[0], addr[1])
        log.info("schema registry on %s://%s:%s", self.scheme, addr[0], addr[1])
        return self.bound

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- middleware ---------------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        try:
            if self.authenticate is not None:
                await self._check_auth(request)
            return await handler(request)
        except E.RegistryError as e:
            level = logging.INFO if e.status < 500 else logging.WARNING
            log.log(level, "%s %s -> %d %d: %s", request.method, request.path, e.status, e.code, e.message)
            return _json(e.body(), e.status)
        except web.HTTPException as e:
            if e.status == 401:
                raise
            log.info("%s %s -> %d", request.method, request.path, e.status)
            return _json({"error_code": e.status, "message": e.reason}, e.status)

    async def _check_auth(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        ok = False
        if header.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
                ok = await self.authenticate(user, password)  # type: ignore[misc]
            except (ValueError, UnicodeDecodeError):
                ok = False
        if not ok:
            log.info("%s %s -> 401 (no valid basic credentials)", request.method, request.path)
            raise web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="kbroker schema registry"'},
                                       text=json.dumps({"error_code": 401, "message": "Unauthorized"}),
                                       content_type="application/json")

    # --- writes: primary or forward --------------------------------------------------------------------

    async def _write(self, request: web.Request, op: Callable[[], Awaitable[Any]]) -> web.Response:
        store = self.registry.store
        try:
            await store.access.ensure_topic()
        except Exception as e:  # noqa: BLE001 - creation refused (limits, ACLs, cluster state)
            raise E.store_error(f"the _schemas topic cannot be created: {e}") from None
        leader = await self._wait_leader()
        if not store.is_primary():
            if request.headers.get(FORWARDED):
                raise E.forwarding_failed("forwarded to a broker that is not the primary (the leadership moved)")
            return await self._forward(request, leader)
        async with self.registry.write_lock:
            if not store.is_primary():
                raise E.unknown_leader("this broker stopped being the primary")
            store.catch_up(to_log_end=True)
            result = await op()
        return _json(result, headers={OFFSET: str(store.next_offset)})

    async def _wait_leader(self) -> int:
        access = self.registry.store.access
        deadline = asyncio.get_running_loop().time() + 10.0
        while True:
            leader = access.leader()
            if leader is not None and leader >= 0:
                return leader
            if asyncio.get_running_loop().time() > deadline:
                raise E.unknown_leader("no broker leads _schemas (no primary)")
            await asyncio.sleep(0.1)

    async def _forward(self, request: web.Request, leader: int) -> web.Response:
        url = await self.registry.store.access.registry_url(leader)
        if not url:
            raise E.unknown_leader(f"the primary (broker {leader}) advertises no schema registry URL")
        if self._session is None:
            self._session = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT_S))
        headers = {FORWARDED: str(self.registry.store.access.node_id), "Content-Type": CONTENT_TYPE}
        if auth := request.headers.get("Authorization"):
            headers["Authorization"] = auth
        body = await request.read()
        target = url.rstrip("/") + request.raw_path  # as received: %2F in a subject stays encoded
        try:
            async with self._session.request(request.method, target, data=body or None, headers=headers,
                                             ssl=self.client_ssl if target.startswith("https") else None) as resp:
                payload = await resp.read()
                offset = resp.headers.get(OFFSET)
                status = resp.status
        except (ClientError, TimeoutError, OSError) as e:
            raise E.forwarding_failed(f"Error while forwarding the request to the primary (broker {leader}, "
                                      f"{url}): {e!r}") from None
        if offset is not None and status < 300:
            await self.registry.store.wait_replayed(int(offset), READ_AFTER_WRITE_S)
        return web.Response(body=payload, status=status, content_type=CONTENT_TYPE)

    # --- routes --------------------------------------------------------------------------------------------

    def _routes(self) -> None:
        r = self.app.router
        r.add_get("/", self.root)
        r.add_post("/", self.root)
        r.add_get("/subjects", self.list_subjects)
        r.add_post("/subjects/{subject}", self.lookup)
        r.add_delete("/subjects/{subject}", self.delete_subject)
        r.add_get("/subjects/{subject}/metadata", self.latest_with_metadata)
        r.add_get("/subjects/{subject}/versions", self.list_versions)
        r.add_post("/subjects/{subject}/versions", self.register)
        r.add_get("/subjects/{subject}/versions/{version}", self.get_version)
        r.add_delete("/subjects/{subject}/versions/{version}", self.delete_version)
        r.add_get("/subjects/{subject}/versions/{version}/schema", self.get_version_schema)
        r.add_get("/subjects/{subject}/versions/{version}/referencedby", self.referenced_by)
        r.add_get("/schemas", self.list_schemas)
        r.add_get("/schemas/types", self.schema_types)
        r.add_get("/schemas/ids/{id}", self.schema_by_id)
        r.add_get("/schemas/ids/{id}/schema", self.schema_by_id_raw)
        r.add_get("/schemas/ids/{id}/subjects", self.id_subjects)
        r.add_get("/schemas/ids/{id}/versions", self.id_versions)
        r.add_get("/schemas/guids/{guid}", self.schema_by_guid)
        r.add_get("/schemas/guids/{guid}/ids", self.guid_ids)
        r.add_get("/config", self.get_config)
        r.add_put("/config", self.put_config)
        r.add_delete("/config", self.delete_config)
        r.add_get("/config/{subject}", self.get_config)
        r.add_put("/config/{subject}", self.put_config)
        r.add_delete("/config/{subject}", self.delete_config)
        r.add_get("/mode", self.get_mode)
        r.add_put("/mode", self.put_mode)
        r.add_delete("/mode", self.delete_mode)
        r.add_get("/mode/{subject}", self.get_mode)
        r.add_put("/mode/{subject}", self.put_mode)
        r.add_delete("/mode/{subject}", self.delete_mode)
        r.add_post("/compatibility/subjects/{subject}/versions/{version}", self.compatibility)
        r.add_post("/compatibility/subjects/{subject}/versions", self.compatibility)
        r.add_get("/contexts", self.contexts)
        r.add_get("/v1/metadata/id", self.metadata_id)
        r.add_get("/associations/resources/{namespace}/{name}", self.associations)

    async def root(self, request: web.Request) -> web.Response:
        return _json({})

    async def list_subjects(self, request: web.Request) -> web.Response:
        prefix = request.query.get("subjectPrefix", "")
        if prefix == ":*:":  # Confluent's "every context" wildcard
            prefix = ""
        subjects = self.registry.subjects(prefix=prefix, deleted=_flag(request, "deleted"),
                                          deleted_only=_flag(request, "deletedOnly"))
        return _json(_page(subjects, request))

    async def lookup(self, request: web.Request) -> web.Response:
        body = await _body(request)
        return _json(await self.registry.lookup(request.match_info["subject"], body,
                                                normalize=_flag(request, "normalize"), deleted=_flag(request, "deleted"),
                                                fmt=request.query.get("format", "")))

    async def delete_subject(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        return await self._write(request, lambda: self.registry.delete_subject(
            subject, permanent=_flag(request, "permanent")))

    async def latest_with_metadata(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        sv = self.registry.get_version(subject, None, deleted=_flag(request, "deleted"))
        if request.query.getall("key", []):  # no schema carries metadata here
            raise E.schema_not_found()
        return _json(await self.registry.version_doc(sv, request.query.get("format", "")))

    async def list_versions(self, request: web.Request) -> web.Response:
        versions = self.registry.versions(request.match_info["subject"], deleted=_flag(request, "deleted"),
                                          deleted_only=_flag(request, "deletedOnly"))
        return _json(_page(versions, request))

    async def register(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        check_subject(subject)
        body = await _body(request)
        normalize = _flag(request, "normalize")
        return await self._write(request, lambda: self.registry.register(subject, body, normalize=normalize))

    async def get_version(self, request: web.Request) -> web.Response:
        version = parse_version(request.match_info["version"])
        sv = self.registry.get_version(request.match_info["subject"], version, deleted=_flag(request, "deleted"))
        return _json(await self.registry.version_doc(sv, request.query.get("format", "")))

    async def get_version_schema(self, request: web.Request) -> web.Response:
        version = parse_version(request.match_info["version"])
        sv = self.registry.get_version(request.match_info["subject"], version, deleted=_flag(request, "deleted"))
        doc = await self.registry.version_doc(sv, request.query.get("format", ""))
        return web.Response(text=doc["schema"], content_type=CONTENT_TYPE)

    async def referenced_by(self, request: web.Request) -> web.Response:
        version = parse_version(request.match_info["version"])
        return _json(_page(self.registry.referenced_by(request.match_info["subject"], version), request))

    async def delete_version(self, request: web.Request) -> web.Response:
        subject, version = request.match_info["subject"], request.match_info["version"]
        parse_version(version)
        return await self._write(request, lambda: self.registry.delete_version(
            subject, version, permanent=_flag(request, "permanent")))

    async def list_schemas(self, request: web.Request) -> web.Response:
        prefix = request.query.get("subjectPrefix", "")
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
        out = []
        for subject in self.registry.subjects(prefix=prefix, deleted=deleted):
            versions = self.registry.state.subject_versions(subject, deleted=deleted)
            for sv in versions[-1:] if latest_only else versions:
                out.append(await self.registry.version_doc(sv))
        return _json(_page(out, request))

    async def schema_types(self, request: web.Request) -> web.Response:
        return _json(sorted(self.registry.formats))

    async def schema_by_id(self, request: web.Request) -> web.Response:
        doc = await self.registry.schema_by_id(_schema_id(request.match_info["id"]), request.query.get("format", ""),
                                         request.query.get("subject") or None)
        if _flag(request, "fetchMaxId"):
            doc["maxId"] = self.registry.state.max_id
        return _json(doc)

    async def schema_by_id_raw(self, request: web.Request) -> web.Response:
        doc = await self.registry.schema_by_id(_schema_id(request.match_info["id"]), request.query.get("format", ""),
                                         request.query.get("subject") or None)
        return web.Response(text=doc["schema"], content_type=CONTENT_TYPE)

    async def id_subjects(self, request: web.Request) -> web.Response:
        users = self.registry.id_users(_schema_id(request.match_info["id"]), deleted=_flag(request, "deleted"))
        subject = request.query.get("subject")
        subjects = sorted({s for s, _ in users if subject is None or s == subject})
        return _json(_page(subjects, request))

    async def id_versions(self, request: web.Request) -> web.Response:
        users = self.registry.id_users(_schema_id(request.match_info["id"]), deleted=_flag(request, "deleted"))
        subject = request.query.get("subject")
        return _json(_page([{"subject": s, "version": v} for s, v in users if subject is None or s == subject],
                           request))

    async def schema_by_guid(self, request: web.Request) -> web.Response:
        return _json(await self.registry.schema_by_guid(request.match_info["guid"], request.query.get("format", "")))

    async def guid_ids(self, request: web.Request) -> web.Response:
        doc = await self.registry.schema_by_guid(request.match_info["guid"])
        return _json([{"context": ".", "id": doc["id"]}])

    async def get_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        if subject is not None and subject not in self.registry.state.configs and not _flag(request, "defaultToGlobal"):
            raise E.subject_config_not_found(subject)
        return _json({"compatibilityLevel": self.registry.config_of(subject)})

    async def put_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        body = await _body(request)
        return await self._write(request, lambda: self.registry.set_config(subject, body))

    async def delete_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        return await self._write(request, lambda: self.registry.delete_config(subject))

    async def get_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        if subject is not None and subject not in self.registry.state.modes and not _flag(request, "defaultToGlobal"):
            raise E.subject_mode_not_found(subject)
        return _json({"mode": self.registry.mode_of(subject)})

    async def put_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        body = await _body(request)
        force = _flag(request, "force")
        return await self._write(request, lambda: self.registry.set_mode(subject, body, force=force))

    async def delete_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        return await self._write(request, lambda: self.registry.delete_mode(subject))

    async def compatibility(self, request: web.Request) -> web.Response:
        body = await _body(request)
        return _json(await self.registry.check_compatibility(
            request.match_info["subject"], request.match_info.get("version"), body,
            normalize=_flag(request, "normalize"), verbose=_flag(request, "verbose")))

    async def contexts(self, request: web.Request) -> web.Response:
        return _json(["."])

    async def associations(self, request: web.Request) -> web.Response:
        return _json([])  # no associations (data contracts are out of scope): clients fall back

    async def metadata_id(self, request: web.Request) -> web.Response:
        return _json({"scope": {"path": [], "clusters": {"kafka-cluster": "kbroker",
                                                         "schema-registry-cluster": "schema-registry"}}})
