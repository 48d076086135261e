"""``kbroker schemas``: register, list, get, compatibility, config and delete against a broker's
registry, in process (cli.schemas.main) and once through the ``python -m cli`` entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli import schemas
from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.schema_registry import registry_overrides, url_of

V1 = {"type": "record", "name": "U", "fields": [{"name": "a", "type": "int"}]}
V2 = {"type": "record", "name": "U", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}


@pytest.fixture
def kb(broker_factory):
    return broker_factory(registry_overrides())


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = schemas.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_schemas_cli(kb, tmp_path, capsys):
    url = url_of(kb)
    f1, f2 = tmp_path / "v1.avsc", tmp_path / "v2.avsc"
    f1.write_text(json.dumps(V1))
    f2.write_text(json.dumps(V2))
    assert _cli(capsys, "--url", url, "register", "users-value", "--schema-file", str(f1)) == (0, "1\n", "")
    assert _cli(capsys, "--url", url, "list") == (0, "users-value\n", "")
    code, out, _ = _cli(capsys, "--url", url, "get", "users-value")
    assert code == 0 and json.loads(out)["version"] == 1
    assert _cli(capsys, "--url", url, "get", "--id", "1", "--schema-only")[1].strip() == json.dumps(
        V1, separators=(",", ":"))
    code, out, _ = _cli(capsys, "--url", url, "compatibility", "users-value", "--schema-file", str(f2))
    assert code == 1 and out.startswith("incompatible") and "READER_FIELD_MISSING_DEFAULT_VALUE" in out
    code, out, err = _cli(capsys, "--url", url, "register", "users-value", "--schema-file", str(f2))
    assert code == 1 and "(error 40901)" in err
    assert _cli(capsys, "--url", url, "config", "users-value", "--set", "forward") == (0, "FORWARD\n", "")
    assert _cli(capsys, "--url", url, "compatibility", "users-value", "--schema-file", str(f2))[:2] == (
        0, "compatible\n")
    assert _cli(capsys, "--url", url, "config") == (0, "BACKWARD\n", "")
    assert _cli(capsys, "--url", url, "delete", "users-value") == (0, "[1]\n", "")
    assert _cli(capsys, "--url", url, "list") == (0, "", "")
    code, _, err = _cli(capsys, "--url", url, "get", "nope")
    assert code == 1 and "(error 40401)" in err
    # The entry point (as a user types it).
    proc = subprocess.run([sys.executable, "-m", "cli", "schemas", "--url", url, "list", "--deleted"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "users-value\n"), proc.stderr
    code, _, err = _cli(capsys, "--url", "http://127.0.0.1:1", "list")
    assert code == 1 and "cannot reach the schema registry" in err
