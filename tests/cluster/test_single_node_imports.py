"""Single-node mode stays free of etcd: starting the broker code path loads neither aetcd nor cluster/."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.broker_proc import REPO_ROOT


def test_single_node_code_path_imports_no_etcd_client() -> None:
    code = ("import sys, broker.broker, broker.serve, broker.handlers\n"
            "broker.handlers.load_handlers()\n"
            "print(sorted(m for m in sys.modules if m == 'aetcd' or m.startswith(('aetcd.', 'cluster.node', "
            "'cluster.etcd'))))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
