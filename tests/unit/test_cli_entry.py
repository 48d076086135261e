"""The ``kbroker`` entry point lives in cli/ (issue 29, item 5): one table of subcommands in
``cli.main``; only ``serve`` and ``dump-log`` load broker/storage code, and only when called;
``python -m broker [serve] ...`` still starts a broker."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli.main import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ["topics", "configs", "console-producer", "console-consumer", "groups", "share-groups", "transactions",
         "get-offsets", "perf", "features", "users", "acls", "leader-election", "reassign-partitions", "cluster",
         "healthcheck", "schemas"]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_script_is_cli_main() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"kbroker": "cli.main:main"}
    assert set(SUBCOMMANDS) == {"serve", "dump-log", *TOOLS}


@pytest.mark.parametrize("command", ["--help", *TOOLS])
def test_tools_do_not_load_the_broker(command: str) -> None:
    """``kbroker --help`` and ``kbroker TOOL --help`` load no module of broker/ or storage/."""
    argv = [command] if command == "--help" else [command, "--help"]
    out = _python("import sys\nfrom cli.main import main\n"
                  f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
                  "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'broker', 'storage'}))\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "LOADED []", out.stdout[-2000:]
    assert "usage: kbroker" in out.stdout


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in text


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["no-such-tool"])
    assert e.value.code == 2
    assert "invalid choice: 'no-such-tool'" in capsys.readouterr().err


def test_serve_and_dump_log_reach_broker_and_storage(tmp_path: Path) -> None:
    """``kbroker serve --help`` prints the broker's config listing; ``python -m broker`` with or without
    ``serve`` is the serve entry (a missing file is one configuration-error line, exit 2)."""
    out = subprocess.run([sys.executable, "-m", "cli", "serve", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "usage: kbroker serve" in out.stdout and "log.dirs" in out.stdout
    for argv in (["serve", str(tmp_path / "none.properties")], [str(tmp_path / "none.properties")]):
        out = subprocess.run([sys.executable, "-m", "broker", *argv], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("kbroker: configuration error: cannot read config file"), out.stderr
    out = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--files", str(tmp_path / "none.log")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert "Traceback" not in out.stderr and "none.log" in out.stdout + out.stderr
