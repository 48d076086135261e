"""TLS for SSL and SASL_SSL listeners: an ``ssl.SSLContext`` from Kafka's config names (PEM only),
and the principal of a client certificate (``ssl.principal.mapping.rules``).

Kafka's semantics kept:
- every ``ssl.*`` name may be overridden per listener as ``listener.name.<listener>.ssl.*`` (the
  prefixed value wins key by key, ConfigDef.valuesWithPrefixOverride);
- ``ssl.keystore.type=PEM`` with either ``ssl.keystore.location`` (a PEM file holding the private
  key and the certificate chain) or inline ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``;
  ``ssl.key.password`` decrypts an encrypted key;
- ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` or inline ``ssl.truststore.certificates``;
- ``ssl.client.auth`` none | requested | required; on a SASL_SSL listener only its listener-prefixed
  form counts (KIP-684), the bare one is ignored;
- ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3) and ``ssl.cipher.suites`` (IANA names as Java takes them,
  or OpenSSL names).
Deviations: JKS and PKCS12 stores are refused (PEM only); TLS 1.3 cipher suites cannot be narrowed
(Python's ssl module has no API for it), so a list naming only TLS 1.3 suites is refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator

Lookup = Callable[[str], str | None]

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    """A listener's TLS configuration cannot be used (the broker refuses to start)."""


def listener_lookup(get: Lookup, listener: str) -> Lookup:
    """``get`` with Kafka's per-listener override: ``listener.name.<listener lowercased>.<name>`` wins."""
    prefix = f"listener.name.{listener.lower()}."

    def lookup(name: str) -> str | None:
        value = get(prefix + name)
        return value if value is not None else get(name)

    return lookup


def client_auth(get: Lookup, listener: str, protocol: str) -> str:
    prefixed = get(f"listener.name.{listener.lower()}.ssl.client.auth")
    if protocol == "SASL_SSL":
        value = prefixed or "none"  # KIP-684: the bare ssl.client.auth does not apply to SASL_SSL
    else:
        value = prefixed or get("ssl.client.auth") or "none"
    value = value.strip().lower()
    if value not in _CLIENT_AUTH:
        raise TlsConfigError(f"Invalid value {value!r} for configuration ssl.client.auth: "
                             "expected one of none, requested, required")
    return value


def server_context(get: Lookup, listener: str, protocol: str) -> ssl.SSLContext:
    """The server-side context of one SSL/SASL_SSL listener (raises TlsConfigError)."""
    return build_server_context(get, listener, protocol)[0]


def build_server_context(get: Lookup, listener: str, protocol: str) -> tuple[ssl.SSLContext, str]:
    """server_context and the keystore PEM text it loaded (key and chain; the leaf certificate first)."""
    cfg = listener_lookup(get, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(ctx, cfg("ssl.enabled.protocols"))
    _set_ciphers(ctx, cfg("ssl.cipher.suites"))
    pem = _load_keystore(ctx, cfg, listener)
    auth = client_auth(get, listener, protocol)
    _load_truststore(ctx, cfg, listener, required=auth != "none")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx, pem


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def _set_protocols(ctx: ssl.SSLContext, value: str | None) -> None:
    names = _split(value) or ["TLSv1.2", "TLSv1.3"]
    versions = []
    for name in names:
        if name not in _PROTOCOLS:
            raise TlsConfigError(f"ssl.enabled.protocols: {name!r} is not supported (TLSv1.2, TLSv1.3)")
        versions.append(_PROTOCOLS[name])
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)


def _openssl_cipher(name: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 (IANA/Java) -> ECDHE-RSA-AES256-GCM-SHA384 (OpenSSL)."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    cipher = re.sub(r"AES_(128|256)", r"AES\1", cipher).replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305")
    cipher = cipher.replace("_SHA", "-SHA").replace("_GCM", "-GCM").replace("_", "-")
    kx = kx.replace("_", "-")
    if kx == "RSA":  # OpenSSL omits plain RSA key exchange from the name
        return cipher
    return f"{kx}-{cipher}"


def _set_ciphers(ctx: ssl.SSLContext, value: str | None) -> None:
    names = _split(value)
    if not names:
        return
    tls12 = [n for n in names if not re.fullmatch(r"TLS_(AES|CHACHA20)\w*", n)]
    if not tls12:
        raise TlsConfigError("ssl.cipher.suites names only TLS 1.3 suites, which kbroker cannot restrict; "
                             "leave it empty or list TLS 1.2 suites")
    try:
        ctx.set_ciphers(":".join(_openssl_cipher(n) for n in tls12))
    except ssl.SSLError as e:
        raise TlsConfigError(f"ssl.cipher.suites: no usable cipher in {names}: {e}") from None


def _require_pem(cfg: Lookup, name: str, listener: str) -> None:
    kind = (cfg(name) or "JKS").strip().upper()
    if kind != "PEM":
        raise TlsConfigError(f"listener {listener}: {name}={kind} is not supported; kbroker reads PEM stores "
                             f"only (set {name}=PEM)")


def _keystore_pem(cfg: Lookup, listener: str) -> str:
    """The keystore as one PEM text (key and certificate chain), read once: what is validated is what is served."""
    location, chain, key = cfg("ssl.keystore.location"), cfg("ssl.keystore.certificate.chain"), cfg("ssl.keystore.key")
    if not location and not (chain and key):
        raise TlsConfigError(f"listener {listener} needs a key and certificate: set ssl.keystore.type=PEM and "
                             "ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key")
    _require_pem(cfg, "ssl.keystore.type", listener)
    if not location:
        return _pem_text(key or "") + "\n" + _pem_text(chain or "") + "\n"
    if chain or key:
        raise TlsConfigError(f"listener {listener}: ssl.keystore.location cannot be combined with "
                             "ssl.keystore.certificate.chain / ssl.keystore.key")
    try:
        with open(location, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"listener {listener}: cannot load the key and certificate ({location}): {e}") from None


def _load_keystore(ctx: ssl.SSLContext, cfg: Lookup, listener: str) -> str:
    """Load the key and chain into ``ctx``; returns the PEM text loaded."""
    pem = _keystore_pem(cfg, listener)
    try:
        # load_cert_chain reads files only: the PEM goes through a private temporary file.
        with _private_file(pem) as path:
            ctx.load_cert_chain(path, password=cfg("ssl.key.password"))
    except (OSError, ssl.SSLError) as e:
        source = cfg("ssl.keystore.location") or "ssl.keystore.certificate.chain/key"
        raise TlsConfigError(f"listener {listener}: cannot load the key and certificate ({source}): {e}") from None
    return pem


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "material.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path


def _pem_text(value: str) -> str:
    """Inline PEM in a properties file may have lost its newlines: rebuild the armour lines."""
    if "\n" in value.strip():
        return value.strip()
    return re.sub(r"\s*(-----(?:BEGIN|END) [A-Z ]+-----)\s*", r"\n\1\n", value).strip()


def _load_truststore(ctx: ssl.SSLContext, cfg: Lookup, listener: str, *, required: bool) -> None:
    location, inline = cfg("ssl.truststore.location"), cfg("ssl.truststore.certificates")
    if not location and not inline:
        if required:
            raise TlsConfigError(f"listener {listener} authenticates clients (ssl.client.auth) but has no "
                                 "truststore: set ssl.truststore.type=PEM and ssl.truststore.location")
        return
    _require_pem(cfg, "ssl.truststore.type", listener)
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_verify_locations(cadata=_pem_text(inline or ""))
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"listener {listener}: cannot load the truststore: {e}") from None


# --- principal of a client certificate ------------------------------------------------------------

# X500Principal.getName() (RFC 2253) keywords for the attributes Python names.
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}


def subject_dn(peercert: dict) -> str:
    """The certificate subject as Java's X500Principal.getName() writes it: RFC 2253, most specific
    RDN first, no spaces after commas."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: ``DEFAULT`` keeps the DN; ``RULE:pattern/replacement/[L|U]`` maps a
    DN that matches the whole pattern (first matching rule wins)."""

    def __init__(self, rules: str | None) -> None:
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []
        text = (rules or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise TlsConfigError(f"Invalid rule in ssl.principal.mapping.rules: {text[pos:]!r}")
            if m.group(1):
                self.rules.append(None)
            else:
                replacement = re.sub(r"\$(\d)", r"\\\1", m.group(3).replace("\\/", "/"))
                self.rules.append((re.compile(m.group(2).replace("\\/", "/")), replacement, m.group(4)))
            pos = m.end()

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                out = pattern.sub(replacement, dn, count=1)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        raise TlsConfigError(f"No rules apply to {dn}, rules {self.rules}")
