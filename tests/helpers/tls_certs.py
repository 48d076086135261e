"""Test certificates made with the openssl CLI: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, all PEM, written into a temporary directory."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Certs:
    dir: Path
    ca: Path  # CA certificate (the clients' and the broker's truststore)
    server_keystore: Path  # server key + certificate in one PEM (ssl.keystore.location)
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_subject: str  # RFC 2253, as Kafka's DEFAULT principal mapping renders it


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(directory: Path, *, server_key_password: str | None = None) -> Certs:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
         "-subj", "/CN=kbroker test CA", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
         "-subj", "/CN=localhost", cwd=d)
    _run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    key = d / "server.key"
    if server_key_password is not None:
        _run("pkcs8", "-topk8", "-in", "server.key", "-out", "server.enc.key", "-passout",
             f"pass:{server_key_password}", cwd=d)
        key = d / "server.enc.key"
    keystore = d / "server.keystore.pem"
    keystore.write_text(key.read_text() + (d / "server.pem").read_text())
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
         "-subj", "/O=kbroker tests/OU=clients/CN=alice-client", cwd=d)
    _run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "client.pem", "-days", "2", cwd=d)
    return Certs(d, d / "ca.pem", keystore, d / "server.pem", key, d / "client.pem", d / "client.key",
                 "CN=alice-client,OU=clients,O=kbroker tests")


def make_server_keystore(certs: Certs, name: str, *, subject: str = "/CN=localhost",
                         san: str = "IP:127.0.0.1,DNS:localhost", key_type: str = "rsa") -> Path:
    """Another server key and certificate signed by the test CA, as one PEM keystore ``<name>.keystore.pem``
    (an RSA or EC key: a reload may change the key type)."""
    d = certs.dir
    (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    newkey = ["-newkey", "rsa:2048"] if key_type == "rsa" else ["-newkey", "ec", "-pkeyopt",
                                                                 "ec_paramgen_curve:prime256v1"]
    _run("req", *newkey, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    keystore = d / f"{name}.keystore.pem"
    keystore.write_text((d / f"{name}.key").read_text() + (d / f"{name}.pem").read_text())
    return keystore
