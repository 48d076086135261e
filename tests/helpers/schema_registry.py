"""Helpers for the Schema Registry tests: a broker with the registry on, JSON over HTTP to it,
Protobuf message classes built at run time (no protoc), and produce/consume through
confluent-kafka's serializers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.helpers.broker_proc import free_port


def registry_overrides(port: int | None = None, **extra: str) -> dict[str, str]:
    return {"kbroker.schema.registry.listener": f"http://127.0.0.1:{port or free_port()}", **extra}


def url_of(broker: Any) -> str:
    return broker.overrides["kbroker.schema.registry.listener"]


def http(url: str, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None, timeout: float = 30) -> tuple[int, Any]:
    """(status, decoded JSON answer) of one request; error statuses are returned, not raised."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read()
            status = resp.status
    except urllib.error.HTTPError as e:
        text, status = e.read(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode(errors="replace")


def wait_http(url: str, path: str, ok: Any, deadline_s: float = 60) -> Any:
    """Ask ``path`` until ``ok(status, body)``; returns the last body (fails past the deadline)."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = http(url, "GET", path, timeout=10)
            if ok(*last):
                return last[1]
        except OSError as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"GET {url}{path} never satisfied the condition; last answer {last!r}")


def produce_serialized(bootstrap: str, topic: str, serializer: Any, values: list[Any], *,
                       key_serializer: Any = None, keys: list[Any] | None = None) -> list[Any]:
    """Produce ``values`` (serialized) and return the delivery errors (None each when accepted)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False, "retries": 0})
    results: list[Any] = []
    for i, v in enumerate(values):
        ctx = SerializationContext(topic, MessageField.VALUE)
        payload = serializer(v, ctx) if serializer is not None else v
        key = None
        if keys is not None:
            k = keys[i]
            key = key_serializer(k, SerializationContext(topic, MessageField.KEY)) if key_serializer else k
        p.produce(topic, value=payload, key=key, on_delivery=lambda err, msg: results.append(err))
        p.flush(30)
    assert len(results) == len(values), "not every record got a delivery report"
    return results


def consume_deserialized(bootstrap: str, topic: str, deserializer: Any, count: int, *, timeout_s: float = 60) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[Any] = []
    end = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < end:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE, msg.headers())))
    finally:
        c.close()
    assert len(out) == count, f"consumed {len(out)} of {count} records"
    return out


def protobuf_classes() -> dict[str, Any]:
    """Message classes of two files built at run time: kbtest/address.proto (Address) and
    kbtest/user.proto (User, importing it and google/protobuf/timestamp.proto)."""
    from google.protobuf import descriptor_pb2 as D
    from google.protobuf import (
        descriptor_pool,
        message_factory,
        timestamp_pb2,  # noqa: F401 - puts timestamp.proto in the default pool
    )

    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("kbtest/user.proto")
    except KeyError:
        dep = D.FileDescriptorProto(name="kbtest/address.proto", package="kbtest", syntax="proto3")
        m = dep.message_type.add(name="Address")
        m.field.add(name="city", number=1, type=D.FieldDescriptorProto.TYPE_STRING, label=1)
        pool.Add(dep)
        main = D.FileDescriptorProto(name="kbtest/user.proto", package="kbtest", syntax="proto3",
                                     dependency=["kbtest/address.proto", "google/protobuf/timestamp.proto"])
        u = main.message_type.add(name="User")
        u.field.add(name="name", number=1, type=D.FieldDescriptorProto.TYPE_STRING, label=1)
        u.field.add(name="address", number=2, type=D.FieldDescriptorProto.TYPE_MESSAGE, label=1,
                    type_name=".kbtest.Address")
        u.field.add(name="at", number=3, type=D.FieldDescriptorProto.TYPE_MESSAGE, label=1,
                    type_name=".google.protobuf.Timestamp")
        u.field.add(name="tags", number=4, type=D.FieldDescriptorProto.TYPE_STRING, label=3)
        pool.Add(main)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"kbtest.{n}")) for n in ("User", "Address")}
