"""Certificate reload without a restart: a listener's TLS context that a dynamic change of
``listener.name.<l>.ssl.keystore.*`` (or of the truststore) replaces for new connections only.

Kafka's SslFactory.validateReconfiguration / reconfigure, kept:
- only SslConfigs.RECONFIGURABLE_CONFIGS (keystore, key password, truststore) take their new value;
  every other ssl.* setting stays as the listener was built (it applies at the next start);
- the new material must load (key matches certificate, password right) before anything changes;
- the new certificate keeps the old one's subject DN (compared as RFC 2253, case-insensitively)
  unless ``ssl.allow.dn.changes=true``, and keeps every old SubjectAltName (it may add some) unless
  ``ssl.allow.san.changes=true`` (CertificateEntries.ensureCompatible);
- a truststore cannot be added to a listener started without one;
- re-setting the same value reloads the files (a renewed certificate at the same path).

How the swap works: the context handed to the server once (``context``) has an SNI callback, which
OpenSSL runs on every ClientHello (with or without SNI); it moves the new connection onto the
current context. Connections already open keep the certificate they were set up with.
"""

from __future__ import annotations

import logging
import re
import ssl
from dataclasses import dataclass
from typing import Any

from security.tls import Lookup, TlsConfigError, _private_file, build_server_context, subject_dn

log = logging.getLogger("security.tls")

# SslConfigs.RECONFIGURABLE_CONFIGS: the names a reload takes from the new configuration.
RECONFIGURABLE = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates",
})

_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)


def leaf_certificate(pem: str) -> dict[str, Any]:
    """The first certificate of a keystore PEM (the leaf), decoded as ``getpeercert()`` returns it."""
    m = _CERT.search(pem)
    if m is None:
        raise TlsConfigError("the keystore holds no certificate")
    with _private_file(m.group(0) + "\n") as path:
        # The ssl module's only decoder for a certificate it did not receive from a peer (private,
        # present since Python 3.x); the cryptography package is not a dependency.
        return ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


@dataclass
class Candidate:
    """A validated new context, ready to be swapped in."""
    context: ssl.SSLContext
    certificate: dict[str, Any]


class ReloadableTls:
    """One SSL / SASL_SSL listener's TLS; ``context`` goes to the server, reload() swaps what new
    connections are served with."""

    def __init__(self, get: Lookup, listener: str, protocol: str) -> None:
        self.listener, self.protocol = listener, protocol
        self._prefix = f"listener.name.{listener.lower()}."
        # Values of the non-reconfigurable names as read at start: a reload keeps them.
        self._start: dict[str, str | None] = {}

        def recording(name: str) -> str | None:
            value = self._start[name] = get(name)
            return value

        self.context, pem = build_server_context(recording, listener, protocol)
        self.certificate = leaf_certificate(pem)
        self.active = self.context
        self.context.sni_callback = self._select

    def _select(self, sslobj: Any, _server_name: str | None, ctx: ssl.SSLContext) -> None:
        active = self.active
        if active is not ctx:
            sslobj.context = active

    def _base(self, name: str) -> str:
        return name[len(self._prefix):] if name.startswith(self._prefix) else name

    def _has_truststore(self, get: Lookup) -> bool:
        return any(get(p + n) for p in (self._prefix, "") for n in ("ssl.truststore.location",
                                                                  "ssl.truststore.certificates"))

    def prepare(self, get: Lookup) -> Candidate:
        """Validate the listener's TLS as ``get`` (the new configuration) sets it; raises TlsConfigError
        with Kafka's reason, and changes nothing."""
        def merged(name: str) -> str | None:
            if self._base(name) in RECONFIGURABLE or name not in self._start:
                return get(name)
            return self._start[name]

        if self._has_truststore(merged) and not self._has_truststore(self._start.get):
            raise TlsConfigError("Cannot add SSL truststore to an existing listener for which no truststore "
                                 "was configured.")
        context, pem = build_server_context(merged, self.listener, self.protocol)
        cert = leaf_certificate(pem)
        allow_dn = _flag(get(self._prefix + "ssl.allow.dn.changes") or get("ssl.allow.dn.changes"))
        allow_san = _flag(get(self._prefix + "ssl.allow.san.changes") or get("ssl.allow.san.changes"))
        old_dn, new_dn = subject_dn(self.certificate), subject_dn(cert)
        if not allow_dn and old_dn.lower() != new_dn.lower():
            raise TlsConfigError(f"Keystore DistinguishedName does not match: existing={{DN={old_dn}}}, "
                                 f"new={{DN={new_dn}}}")
        old_san = set(self.certificate.get("subjectAltName", ()))
        new_san = set(cert.get("subjectAltName", ()))
        if not allow_san and not new_san >= old_san:
            raise TlsConfigError(f"Keystore SubjectAltNames do not match: existing={{SAN={sorted(old_san)}}}, "
                                 f"new={{SAN={sorted(new_san)}}}")
        return Candidate(context, cert)

    def apply(self, candidate: Candidate) -> None:
        """New connections from now on are served with the candidate; open ones are left alone."""
        self.active, self.certificate = candidate.context, candidate.certificate
        log.info("listener %s: new connections use the reloaded certificate (subject %s, serial %s, "
                 "valid until %s)", self.listener, subject_dn(candidate.certificate),
                 candidate.certificate.get("serialNumber"), candidate.certificate.get("notAfter"))
