"""Every `kbroker serve ...` command line written in the README and docs parses with the real parser
(docs/config-reference.md once documented a `--config FILE` option that does not exist)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from broker.serve import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `kbroker serve` up to the end of its code span or line; placeholders in brackets are dropped.
_SERVE = re.compile(r"kbroker serve(?![a-z])([^`\n]*)")


def _serve_commands() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))  # shell line continuations
        for m in _SERVE.finditer(text):
            args = re.sub(r"\[[^\]]*\]\.*", "", m.group(1)).strip()
            found.append((path.name, args))
    return found


@pytest.mark.parametrize(("doc", "args"), _serve_commands())
def test_documented_serve_command_parses(doc: str, args: str) -> None:
    argv = shlex.split(args)
    if "--help" in argv:
        return
    build_parser().parse_args(argv)
