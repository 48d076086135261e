"""`make serve PORT=N` moves both the listener and the advertised address (overriding only
`listeners` kept advertising 9092, which sends clients to another broker)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.serve import parse_overrides

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_serve_port_sets_listener_and_advertised_listener() -> None:
    out = subprocess.run(["make", "-s", "-n", "serve", "PORT=19092"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    argv = shlex.split(out.strip().splitlines()[-1])
    assert argv[1:3] == ["serve", "config/server.properties"]
    overrides = parse_overrides([argv[i + 1] for i, a in enumerate(argv) if a == "--override"])
    config = BrokerConfig.load(str(ROOT / "config/server.properties"), overrides)
    assert [li.port for li in config.listeners] == [19092]
    assert [li.port for li in config.advertised_listeners] == [19092]
