"""server.properties parsing: the subset of java.util.Properties syntax Kafka's config files use."""

from __future__ import annotations

import re

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WS = " \t\f"


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        if c != "\\":
            out.append(c)
        i += 1
    return "".join(out)


def _continues(line: str) -> bool:
    """A line continues when it ends with an odd number of backslashes."""
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def parse_properties(text: str) -> dict[str, str]:
    """Parse server.properties text: '#'/'!' comments, '=' ':' or whitespace separators, backslash
    continuation lines, Java escapes; keys and values are whitespace-trimmed.  Later keys win."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WS)
            i += 1
        # The key ends at the first unescaped '=', ':' or whitespace.
        j = 0
        while j < len(line) and line[j] not in "=:" + _WS:
            j += 2 if line[j] == "\\" else 1
        key = line[:j]
        rest = line[j:].lstrip(_WS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_WS)
        result[_unescape(key).strip()] = _unescape(rest).strip()
    return result


