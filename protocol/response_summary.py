"""A compact error-code summary of a response, for the DEBUG request log (``kbroker.request``).

Only called when that logger is at DEBUG, so it may walk the response. The summary is the
top-level ``error_code`` when the response has one and it is non-zero; otherwise the first
non-zero nested error code with the count of non-zero ones (``3@topics[].partitions[]x2``); ``0``
when every code is zero; ``none`` when nothing is due (acks=0 produce).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

_FETCH_TOP = struct.Struct(">ih")  # throttle_time_ms, error_code (FetchResponse v7+)


def _field_names(obj: Any) -> list[str] | None:
    """The fields of a kafka-python struct (those of its version) or of a response dataclass
    (protocol.produce_response); None for anything else."""
    struct_ = getattr(obj, "_struct", None)
    if struct_ is not None:
        version = obj.version
        return [f.name for f in struct_._fields if version is None or f.for_version_q(version)]
    if dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj)]
    return None


def _walk(obj: Any, path: str, found: list[tuple[int, str]]) -> None:
    names = _field_names(obj)
    if names is None:
        return
    for name in names:
        value = getattr(obj, name, None)
        if name == "error_code" and isinstance(value, int) and value != 0:
            found.append((value, path or "top"))
        elif isinstance(value, list) and value and _field_names(value[0]) is not None:
            for item in value:
                _walk(item, f"{path}{name}[].", found)
        elif _field_names(value) is not None:
            _walk(value, f"{path}{name}.", found)


def error_summary(api_key: int, version: int, response: Any) -> str:
    try:
        return _summary(api_key, version, response)
    except Exception as e:  # a log line must never fail a request
        return f"?({type(e).__name__})"


def _summary(api_key: int, version: int, response: Any) -> str:
    if response is None:
        return "none"
    chunks = getattr(response, "chunks", None)
    if chunks is not None:  # a RawResponse (Fetch, Metadata, ApiVersions)
        if api_key == 18:
            return "0"  # the kept ApiVersions answers all have error_code 0
        if api_key == 1 and version >= 7 and chunks and len(chunks[0]) >= 6:
            return str(_FETCH_TOP.unpack_from(chunks[0], 0)[1])
        return "raw"
    top = getattr(response, "error_code", None)
    if isinstance(top, int) and top != 0:
        return str(top)
    found: list[tuple[int, str]] = []
    _walk(response, "", found)
    if not found:
        return "0"
    code, where = found[0]
    where = where.rstrip(".")
    return f"{code}@{where}" + (f"x{len(found)}" if len(found) > 1 else "")
