"""The README's quick start, run as a user pastes it (issue 18, acceptance 4): every fenced block
marked ``<!-- quickstart -->`` runs against a fresh broker (its Schema Registry on, as with
``make serve``), in order, with the broker's address, registry URL, data dir and venv put in place
of 127.0.0.1:9092, http://localhost:8081, ``data/`` and ``.venv/bin/``. A Python block's last
``print(...)  # expected`` line must print what its comment says."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.schema_registry import registry_overrides, url_of
from tests.helpers.tools import require_tool

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"<!-- quickstart -->\s*```(\w+)\n(.*?)```", re.S)


def quickstart_blocks() -> list[tuple[str, str]]:
    return _BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_has_quickstart_blocks() -> None:
    langs = [lang for lang, _ in quickstart_blocks()]
    assert langs.count("sh") >= 2 and "python" in langs


def test_readme_quickstart_runs(broker_factory) -> None:
    require_tool("kcat", shutil.which("kcat") is not None, "kcat not on PATH (apt-get install kcat)")
    broker = broker_factory(registry_overrides())
    bindir = Path(sys.executable).parent
    for lang, code in quickstart_blocks():
        code = (code.replace("127.0.0.1:9092", broker.bootstrap)
                .replace("http://localhost:8081", url_of(broker))
                .replace(".venv/bin/", f"{bindir}/")
                .replace(" data/", f" {broker.data_dir}/"))
        if lang == "python":
            cmd = [sys.executable, "-c", code]
        else:
            cmd = ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, f"README {lang} block failed ({r.returncode}):\n{code}\n--- stdout\n{r.stdout}" \
                                  f"\n--- stderr\n{r.stderr}"
        if lang == "python":
            expected = re.findall(r"^print\(.*\)\s+# (.+)$", code, re.M)
            assert expected and expected[-1] in r.stdout, (expected, r.stdout)
