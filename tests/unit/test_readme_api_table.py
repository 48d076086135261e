"""The README's compatibility table lists exactly the APIs and versions the handler registry serves."""

from __future__ import annotations

import re
from pathlib import Path

from broker.handlers import load_handlers
from protocol.api_table import get_spec

README = Path(__file__).resolve().parents[2] / "README.md"
_ROW = re.compile(r"^\| (\w+) \| (\d+) \| (\d+)(?:–(\d+))? \|", re.M)


def test_readme_api_table_matches_the_handler_registry() -> None:
    text = README.read_text(encoding="utf-8")
    table = text[text.index("## Compatibility"):text.index("## What is not supported yet")]
    rows = {int(key): (name, int(lo), int(hi or lo)) for name, key, lo, hi in _ROW.findall(table)}
    served = {key: (get_spec(key).name, r.min_version, r.max_version) for key, r in load_handlers().items()}
    assert rows == served
    keys = [int(k) for _, k, _, _ in _ROW.findall(table)]
    assert keys == sorted(keys)  # in key order
