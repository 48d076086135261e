"""docs/share-groups.md's worked example (issue 27), run as a user pastes it: the fenced block
marked ``<!-- share-example -->`` runs against a fresh broker with default settings (only the
address replaced), and prints nine jobs, each accepted once, job 3 on its second delivery and no
job 7."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"<!-- share-example -->\s*```python\n(.*?)```", re.S)


def test_share_groups_doc_example_runs(broker) -> None:
    blocks = _BLOCK.findall((ROOT / "docs" / "share-groups.md").read_text(encoding="utf-8"))
    assert len(blocks) == 1
    code = blocks[0].replace("127.0.0.1:9092", broker.bootstrap)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"example failed ({r.returncode}):\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    done = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    jobs = [job for job, _, _ in done]
    assert sorted(jobs) == sorted(f"job {i}" for i in range(10) if i != 7), done
    assert {job: dc for job, _, dc in done}["job 3"] == 2
    assert all(dc == 1 for job, _, dc in done if job != "job 3")
