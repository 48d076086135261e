"""security/: TLS contexts from Kafka's config names, certificate principals, SASL configuration and
exchanges, SCRAM credential validation (Kafka's ScramControlManager rules), and the per-connection
SASL state machine of broker/handlers/sasl.py."""

from __future__ import annotations

import ssl
from types import SimpleNamespace

import pytest
import scramp

from broker.handlers.sasl import SaslSession
from security import scram_credentials as sc
from security.sasl import (
    AuthenticationFailed,
    ListenerSasl,
    PlainExchange,
    SaslConfigError,
    parse_jaas_options,
)
from security.tls import (
    PrincipalMapper,
    TlsConfigError,
    _openssl_cipher,
    client_auth,
    server_context,
    subject_dn,
)
from tests.helpers.tls_certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _get(values: dict[str, str]):
    return values.get


# --- TLS ----------------------------------------------------------------------------------------------

def test_server_context_from_pem_location_and_inline_pem(certs):
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore)}
    ctx = server_context(_get(base), "SSL", "SSL")
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    # Inline chain + key, newlines lost as in a one-line properties value.
    inline = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": certs.server_cert.read_text().replace("\n", " "),
              "ssl.keystore.key": certs.server_key.read_text().replace("\n", " ")}
    assert isinstance(server_context(_get(inline), "SSL", "SSL"), ssl.SSLContext)


def test_listener_prefixed_ssl_configs_win(certs):
    cfg = {"ssl.keystore.type": "JKS", "ssl.keystore.location": "/nonexistent",
           "listener.name.internal.ssl.keystore.type": "PEM",
           "listener.name.internal.ssl.keystore.location": str(certs.server_keystore),
           "listener.name.internal.ssl.enabled.protocols": "TLSv1.3"}
    ctx = server_context(_get(cfg), "INTERNAL", "SSL")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(TlsConfigError, match="ssl.keystore.type=JKS is not supported"):
        server_context(_get(cfg), "EXTERNAL", "SSL")


def test_tls_config_errors(certs):
    with pytest.raises(TlsConfigError, match="needs a key and certificate"):
        server_context(_get({}), "SSL", "SSL")
    pem = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore)}
    with pytest.raises(TlsConfigError, match="has no truststore"):
        server_context(_get({**pem, "ssl.client.auth": "required"}), "SSL", "SSL")
    with pytest.raises(TlsConfigError, match="TLSv1.1"):
        server_context(_get({**pem, "ssl.enabled.protocols": "TLSv1.1"}), "SSL", "SSL")
    with pytest.raises(TlsConfigError, match="only TLS 1.3 suites"):
        server_context(_get({**pem, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}), "SSL", "SSL")
    ctx = server_context(_get({**pem, "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}), "SSL", "SSL")
    assert any(c["name"] == "ECDHE-RSA-AES128-GCM-SHA256" for c in ctx.get_ciphers())


def test_client_auth_on_sasl_ssl_takes_only_the_listener_prefixed_setting():
    """KIP-684: the bare ssl.client.auth does not apply to SASL_SSL listeners."""
    assert client_auth(_get({"ssl.client.auth": "required"}), "SSL", "SSL") == "required"
    assert client_auth(_get({"ssl.client.auth": "required"}), "SASL_SSL", "SASL_SSL") == "none"
    assert client_auth(_get({"listener.name.sasl_ssl.ssl.client.auth": "requested"}), "SASL_SSL", "SASL_SSL") \
        == "requested"


def test_cipher_names_iana_to_openssl():
    assert _openssl_cipher("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384") == "ECDHE-RSA-AES256-GCM-SHA384"
    assert _openssl_cipher("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert _openssl_cipher("ECDHE-RSA-AES128-SHA") == "ECDHE-RSA-AES128-SHA"


def test_subject_dn_and_principal_mapping_rules():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                        (("commonName", "kafka1"),))}
    dn = subject_dn(cert)
    assert dn == "CN=kafka1,O=Acme\\, Inc,C=US"  # RFC 2253: most specific first, escaped commas
    assert PrincipalMapper("DEFAULT").name(dn) == dn
    rules = PrincipalMapper("RULE:^CN=(.*?),O=(.*?),C=(.*?)$/$1@$3/U,DEFAULT")
    assert rules.name(dn) == "KAFKA1@US"
    assert rules.name("OU=x") == "OU=x"  # falls through to DEFAULT
    with pytest.raises(TlsConfigError, match="No rules apply"):
        PrincipalMapper("RULE:^CN=(.*)$/$1/L").name("OU=x")
    with pytest.raises(TlsConfigError):
        PrincipalMapper("NOPE")


# --- SASL configuration and exchanges ---------------------------------------------------------------

def test_listener_sasl_config():
    with pytest.raises(SaslConfigError, match="GSSAPI .* not supported"):
        ListenerSasl.from_config(_get({}), "SASL_SSL")  # Kafka's default mechanism
    with pytest.raises(SaslConfigError, match="plain.sasl.jaas.config is not set"):
        ListenerSasl.from_config(_get({"sasl.enabled.mechanisms": "PLAIN"}), "SASL_PLAINTEXT")
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="p" ' \
           'user_a="p" user_b="q\\"x";'
    cfg = ListenerSasl.from_config(_get({
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connections.max.reauth.ms": "60000",
        "listener.name.client.sasl.enabled.mechanisms": "plain, scram-sha-256",
        "listener.name.client.plain.sasl.jaas.config": jaas,
        "listener.name.client.scram-sha-256.connections.max.reauth.ms": "1000"}), "CLIENT")
    assert cfg.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
    assert cfg.plain_users == {"a": "p", "b": 'q"x'}
    assert cfg.reauth_ms == {"PLAIN": 60000, "SCRAM-SHA-256": 1000}
    assert parse_jaas_options('X required k="v";') == {"k": "v"}


def test_plain_exchange_messages():
    ex = PlainExchange({"bob": "secret"})
    assert ex.step(b"\0bob\0secret") == b"" and ex.complete and ex.username == "bob"
    for token, message in ((b"\0bob\0nope", "Invalid username or password"), (b"\0\0x", "username not specified"),
                           (b"\0bob\0", "password not specified"), (b"eve\0bob\0secret", "authorization id"),
                           (b"junk", "expected 3 tokens")):
        with pytest.raises(AuthenticationFailed, match=message):
            PlainExchange({"bob": "secret"}).step(token)


def _session(reauth_ms: int = 0, users=None) -> SaslSession:
    cred = sc.from_password("SCRAM-SHA-256", "pw")
    users = users or {"carol": cred}
    cfg = ListenerSasl("L", ["SCRAM-SHA-256", "PLAIN"], {"bob": "b"}, {"SCRAM-SHA-256": reauth_ms, "PLAIN": 0})
    return SaslSession(cfg, lambda u, m: users.get(u))


def _req(**kw):
    return SimpleNamespace(**kw)


def test_session_gates_requests_until_authenticated():
    s = _session()
    assert s.refuse(18, "ApiVersions") is None
    assert "unexpected Kafka request of type Metadata" in s.refuse(3, "Metadata")
    resp, close = s.handshake(1, _req(mechanism="SCRAM-SHA-256"))
    assert resp.error_code == 0 and close is None
    assert s.refuse(18, "ApiVersions") is not None  # only the exchange now
    client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", "pw")
    r1, _ = s.authenticate(2, _req(auth_bytes=client.get_client_first().encode()))
    client.set_server_first(r1.auth_bytes.decode())
    r2, close = s.authenticate(2, _req(auth_bytes=client.get_client_final().encode()))
    assert r2.error_code == 0 and close is None and r2.session_lifetime_ms == 0
    assert s.principal == "User:carol" and s.refuse(3, "Metadata") is None
    # SaslAuthenticate after success: ILLEGAL_SASL_STATE, connection kept.
    r3, close = s.authenticate(2, _req(auth_bytes=b""))
    assert r3.error_code == 34 and close is None


def test_session_v0_handshake_switches_to_raw_tokens():
    s = _session()
    resp, _ = s.handshake(0, _req(mechanism="PLAIN"))
    assert resp.error_code == 0 and s.raw
    assert s.step(b"\0bob\0b") == b"" and s.authenticated and not s.raw


def test_session_expiry_closes_non_reauthentication_requests():
    s = _session(reauth_ms=1)
    s.handshake(1, _req(mechanism="PLAIN"))
    s.authenticate(1, _req(auth_bytes=b"\0bob\0b"))
    assert s.expires_at is None  # PLAIN has no lifetime here; SCRAM-SHA-256 has 1 ms
    s = _session(reauth_ms=1)
    s.handshake(1, _req(mechanism="SCRAM-SHA-256"))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", "pw")
    r1, _ = s.authenticate(1, _req(auth_bytes=client.get_client_first().encode()))
    client.set_server_first(r1.auth_bytes.decode())
    r2, _ = s.authenticate(1, _req(auth_bytes=client.get_client_final().encode()))
    assert r2.session_lifetime_ms == 1
    s.expires_at = 0.0  # as if the lifetime had passed
    assert "expired" in s.refuse(3, "Metadata")
    assert s.refuse(17, "SaslHandshake") is None  # re-authentication is still possible


def test_librdkafka_nonce_form_is_accepted_and_nothing_looser():
    """librdkafka < 2.6.1 repeats its nonce in client-final (Kafka 3.8.1-3.9 accept it): the proof is
    still verified over the message as sent."""
    from security.sasl import ScramExchange

    cred = sc.from_password("SCRAM-SHA-512", "pw")

    def run(transform, password="pw") -> bytes:
        ex = ScramExchange("SCRAM-SHA-512", lambda u, m: cred)
        client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", password)
        first = client.get_client_first()
        c_nonce = first.split("r=", 1)[1]
        server_first = ex.step(first.encode()).decode()
        import base64
        import hashlib
        import hmac as hm
        full = server_first.split(",")[0][2:]
        salt = base64.b64decode(server_first.split(",")[1][2:])
        nonce = transform(c_nonce, full)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{first[3:]},{server_first},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
        ck = hm.new(salted, b"Client Key", hashlib.sha512).digest()
        sig = hm.new(hashlib.sha512(ck).digest(), auth, hashlib.sha512).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(ck, sig, strict=True))).decode()
        return ex.step(f"{without_proof},p={proof}".encode())

    assert run(lambda c, full: full).startswith(b"v=")
    assert run(lambda c, full: c + full).startswith(b"v=")
    with pytest.raises(AuthenticationFailed):
        run(lambda c, full: "x" + full)
    with pytest.raises(AuthenticationFailed):
        run(lambda c, full: c + full, password="wrong")


# --- SCRAM credentials --------------------------------------------------------------------------------

def test_credential_from_salted_password_matches_scramp():
    salt = b"0123456789abcdef"
    for mech in sc.MECHANISM_CODES:
        salted = sc.salted_password(mech, "pencil", salt, 4096)
        cred = sc.from_salted_password(mech, salt, salted, 4096)
        s, stored, server, i = scramp.ScramMechanism(mech).make_auth_info("pencil", 4096, salt)
        assert (cred.salt, cred.stored_key, cred.server_key, cred.iterations) == (s, stored, server, i)
    creds = {"u": {"SCRAM-SHA-256": cred}}
    assert sc.decode(sc.encode(creds)) == creds
    assert sc.applied(creds, [("u", "SCRAM-SHA-256")], []) == {}


def test_validate_alter_follows_kafka():
    existing = {"old": {"SCRAM-SHA-256": sc.from_password("SCRAM-SHA-256", "x")}}
    results, dels, ups = sc.validate_alter(
        [("old", 1), ("ghost", 2), ("d2", 1), ("d2", 1)],
        [("old", 2, 4096), ("new", 2, 4096), ("few", 1, 4095), ("many", 1, 16385), ("", 1, 4096), ("m", 3, 4096)],
        existing)
    by_user = {r.user: (r.error_code, r.error_message) for r in results}
    assert by_user["old"] == (92, "A user credential cannot be altered twice in the same request")
    assert by_user["ghost"] == (91, "Attempt to delete a user credential that does not exist")
    assert by_user["d2"][0] == 91  # first deletion fails validation (missing), the user stays in error
    assert by_user["new"] == (0, None)
    assert by_user["few"] == (93, "Too few iterations") and by_user["many"] == (93, "Too many iterations")
    assert by_user[""] == (93, "Username must not be empty")
    assert by_user["m"] == (33, "Unknown SCRAM mechanism")
    assert dels == [] and ups == [("new", 2, 1)]
