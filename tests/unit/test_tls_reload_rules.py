"""security/tls_reload.py: Kafka's SslFactory reconfiguration rules, with in-memory TLS handshakes
against the context the server would hold (certificates made with openssl by tests/helpers/tls_certs.py)."""

from __future__ import annotations

import hashlib
import ssl

import pytest

from security.tls import TlsConfigError
from security.tls_reload import ReloadableTls
from tests.helpers.tls_certs import make_certs, make_server_keystore


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("reload") / "a")


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("reload") / "b")


def _get(values: dict[str, str]):
    return values.get


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, seen: list | None = None) -> str:
    """A TLS handshake through memory BIOs; the SHA-256 of the certificate the server presented (the
    client certificate the server verified is appended to ``seen``)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, obj in (("c", cli), ("s", srv)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    assert all(done.values())
    if seen is not None:
        seen.append(srv.getpeercert())
    return hashlib.sha256(cli.getpeercert(binary_form=True) or b"").hexdigest()


def _fingerprint(path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(path.read_text())).hexdigest()


def _client(ca, cert=None, key=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def test_reload_swaps_the_certificate_of_new_handshakes(certs):
    cfg = {"ssl.keystore.type": "PEM", "listener.name.ssl.ssl.keystore.location": str(certs.server_keystore)}
    tls = ReloadableTls(_get(cfg), "SSL", "SSL")
    assert _handshake(tls.context, _client(certs.ca)) == _fingerprint(certs.server_cert)
    b = make_server_keystore(certs, "unit-b", key_type="ec")
    candidate = tls.prepare(_get({**cfg, "listener.name.ssl.ssl.keystore.location": str(b)}))
    assert _handshake(tls.context, _client(certs.ca)) == _fingerprint(certs.server_cert)  # not applied yet
    tls.apply(candidate)
    assert _handshake(tls.context, _client(certs.ca)) == _fingerprint(certs.dir / "unit-b.pem")


def test_dn_and_san_rules_and_their_allow_flags(certs):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore)}
    tls = ReloadableTls(_get(cfg), "SSL", "SSL")
    other = make_server_keystore(certs, "unit-dn", subject="/CN=elsewhere")
    with pytest.raises(TlsConfigError, match="DistinguishedName does not match"):
        tls.prepare(_get({**cfg, "ssl.keystore.location": str(other)}))
    tls.prepare(_get({**cfg, "ssl.keystore.location": str(other), "ssl.allow.dn.changes": "true"}))
    fewer = make_server_keystore(certs, "unit-san", san="IP:127.0.0.1")
    with pytest.raises(TlsConfigError, match="SubjectAltNames do not match"):
        tls.prepare(_get({**cfg, "ssl.keystore.location": str(fewer)}))
    tls.prepare(_get({**cfg, "ssl.keystore.location": str(fewer),
                      "listener.name.ssl.ssl.allow.san.changes": "TRUE"}))


def test_only_reconfigurable_names_change_and_a_truststore_cannot_be_added(certs, other_ca):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore),
           "listener.name.ssl.ssl.client.auth": "requested"}
    with pytest.raises(TlsConfigError, match="Cannot add SSL truststore"):
        ReloadableTls(_get({**cfg, "listener.name.ssl.ssl.client.auth": "none"}), "SSL", "SSL").prepare(
            _get({**cfg, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}))
    cfg.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)})
    tls = ReloadableTls(_get(cfg), "SSL", "SSL")
    # ssl.client.auth is not reconfigurable: a new value is ignored by the reload (next start).
    candidate = tls.prepare(_get({**cfg, "listener.name.ssl.ssl.client.auth": "required"}))
    assert candidate.context.verify_mode == ssl.CERT_OPTIONAL
    # The truststore is: clients of the other CA are verified once it is swapped in.
    candidate = tls.prepare(_get({**cfg, "ssl.truststore.location": str(other_ca.ca)}))
    client = _client(certs.ca, other_ca.client_cert, other_ca.client_key)
    with pytest.raises(ssl.SSLError):
        _handshake(tls.context, client)
    tls.apply(candidate)
    seen: list = []
    _handshake(tls.context, client, seen)
    assert seen[0]["subject"][-1] == (("commonName", "alice-client"),)
