"""TLS to etcd: an aetcd client that opens a TLS gRPC channel, and the ``kbroker.etcd.ssl.*`` settings.

aetcd 1.0 only opens plaintext channels (``grpc.aio.insecure_channel`` inside ``Client.connect``).
``EtcdClient`` is an aetcd ``Client`` whose ``connect`` builds the same stubs on a
``grpc.aio.secure_channel`` when it is given ``EtcdTls``; without it it behaves exactly as aetcd's.

Settings (PEM files, read when a channel is opened, so a renewed certificate is picked up by the
next connection):

* ``kbroker.etcd.ssl.cafile``: CA certificates that sign etcd's server certificate; unset = the
  system roots bundled with gRPC;
* ``kbroker.etcd.ssl.certfile`` / ``kbroker.etcd.ssl.keyfile``: this broker's client certificate and
  key, for an etcd started with ``--client-cert-auth``; both or neither.

TLS is used for ``https://`` endpoints, and only for them; ``kbroker.etcd.ssl.*`` set while an
endpoint is ``http://`` refuses the start rather than sending the cluster's metadata in plaintext.
The server certificate must name the endpoint's host (an IP SAN for an address), as etcdctl checks.
User/password authentication (``kbroker.etcd.username``/``password``) is aetcd's own: a token from
etcd's Authenticate RPC, sent with every request; it works on plaintext and TLS channels alike.
aetcd never renews that token, but etcd drops it after ``--auth-token-ttl`` (300 s) without a KV
request (the lease keep-alive stream does not count), at every etcd restart, and at a JWT token's
expiry. So the client's unary calls go through ``_ReauthStub``: an "invalid auth token" answer
authenticates again and repeats the call once with the new token (also given to the watcher for
the streams it opens later).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aetcd
import grpc
from aetcd import rpc, watcher
from aetcd.client import _handle_errors

SSL_SETTINGS = ("kbroker.etcd.ssl.cafile", "kbroker.etcd.ssl.certfile", "kbroker.etcd.ssl.keyfile")


@dataclass(frozen=True, slots=True)
class EtcdTls:
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def __post_init__(self) -> None:
        if bool(self.certfile) != bool(self.keyfile):
            raise ValueError("kbroker.etcd.ssl.certfile and kbroker.etcd.ssl.keyfile go together (a client "
                             "certificate needs its key)")

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> EtcdTls | None:
        """The TLS settings from broker settings by name; None when none of them is set."""
        cafile, certfile, keyfile = (str(config.get(n) or "") or None for n in SSL_SETTINGS)
        if cafile is None and certfile is None and keyfile is None:
            return None
        return cls(cafile, certfile, keyfile)

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the PEM files (read now); OSError names a missing file."""
        def read(setting: str, path: str | None) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as e:
                raise OSError(f"{setting}={path}: cannot read it: {e.strerror or e}") from e

        return grpc.ssl_channel_credentials(root_certificates=read(SSL_SETTINGS[0], self.cafile),
                                            private_key=read(SSL_SETTINGS[2], self.keyfile),
                                            certificate_chain=read(SSL_SETTINGS[1], self.certfile))


def _token_rejected(e: grpc.aio.AioRpcError) -> bool:
    return e.code() == grpc.StatusCode.UNAUTHENTICATED and "invalid auth token" in (e.details() or "")


class _ReauthStub:
    """A gRPC stub whose unary calls authenticate again once when etcd rejects the token."""

    def __init__(self, stub: object, client: EtcdClient) -> None:
        self._stub = stub
        self._client = client

    def __getattr__(self, name: str) -> object:
        method = getattr(self._stub, name)
        if not isinstance(method, grpc.aio.UnaryUnaryMultiCallable):
            return method  # streams (watch, lease keep-alive) are opened with the current token

        async def call(request: object, **kwargs: object) -> object:
            token = self._client.metadata
            try:
                return await method(request, **kwargs)
            except grpc.aio.AioRpcError as e:
                if not _token_rejected(e):
                    raise
                await self._client.reauthenticate(token)
                kwargs["metadata"] = self._client.metadata
                return await method(request, **kwargs)

        return call


class EtcdClient(aetcd.Client):
    """aetcd's client, over TLS when ``tls`` is given, renewing its auth token (module docstring)."""

    def __init__(self, *args, tls: EtcdTls | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tls = tls
        self._credentials = tls.credentials() if tls is not None else None
        self._reauth_lock = asyncio.Lock()
        self.reauthentications = 0

    def _wrap_stubs(self) -> None:
        if self._username is None or self._password is None:
            return
        for name in ("kvstub", "clusterstub", "leasestub", "maintenancestub"):
            stub = getattr(self, name)
            if stub is not None and not isinstance(stub, _ReauthStub):
                setattr(self, name, _ReauthStub(stub, self))

    async def reauthenticate(self, stale: object) -> None:
        """A new token, unless another call already replaced ``stale`` (the token it was sent with)."""
        async with self._reauth_lock:
            if self.metadata is not stale:
                return
            resp = await self.auth_stub.Authenticate(
                rpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout)
            self.metadata = (("token", resp.token),)
            if self._watcher is not None:
                self._watcher._metadata = self.metadata  # aetcd keeps its own copy for new watch streams
            self.reauthentications += 1

    @property
    def tls(self) -> bool:
        return self._tls is not None

    async def connect(self) -> None:
        await self._connect()
        self._wrap_stubs()

    @_handle_errors
    async def _connect(self) -> None:
        if self._credentials is None:
            return await super().connect()
        # aetcd 1.0's Client.connect, with a secure channel in place of the insecure one.
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            target = f"{self._host}:{self._port}"
            self.channel = rpc.secure_channel(target, self._credentials, options=self._options.items())
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                resp = await self.auth_stub.Authenticate(
                    rpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout)
                self.metadata = (("token", resp.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                            metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False
