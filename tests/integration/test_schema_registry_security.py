"""The registry listener over TLS (the broker's own PEM keystore and truststore) with HTTP basic
authentication against the broker's SCRAM users: no or wrong credentials -> 401 and a log line;
confluent-kafka's SchemaRegistryClient with ``ssl.ca.location`` and ``basic.auth.user.info`` works."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.request

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.helpers.broker_proc import free_port
from tests.helpers.tls_certs import make_certs

USER, PASSWORD = "alice", "alice-secret"
SCHEMA = json.dumps({"type": "record", "name": "S", "fields": [{"name": "a", "type": "int"}]})


def _status(url: str, ctx: ssl.SSLContext, auth: str | None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/subjects", headers=headers), timeout=20,
                                    context=ctx) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_tls_and_basic_auth(broker_factory, tmp_path):
    certs = make_certs(tmp_path / "certs")
    url = f"https://localhost:{free_port()}"
    kb = broker_factory({
        "kbroker.schema.registry.listener": url.replace("localhost", "127.0.0.1"),
        "kbroker.schema.registry.basic.auth": "true",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
    })
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    cred = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(USER, cred, PASSWORD.encode())]).values():
        f.result(30)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    assert _status(url, ctx, None) == 401
    assert _status(url, ctx, f"{USER}:wrong") == 401
    assert _status(url, ctx, f"nobody:{PASSWORD}") == 401
    assert _status(url, ctx, f"{USER}:{PASSWORD}") == 200
    with pytest.raises((OSError, http.client.HTTPException)):  # no plaintext on the TLS listener
        urllib.request.urlopen(url.replace("https", "http") + "/subjects", timeout=10)
    client = SchemaRegistryClient({"url": url, "ssl.ca.location": str(certs.ca),
                                   "basic.auth.user.info": f"{USER}:{PASSWORD}"})
    schema_id = client.register_schema("s-value", Schema(SCHEMA, "AVRO"))
    assert client.get_schema(schema_id).schema_str == json.dumps(json.loads(SCHEMA), separators=(",", ":"))
    assert "-> 401 (no valid basic credentials)" in kb.log_text()
