"""The campaign's checker can fail end to end (issue 28, acceptance 1): a short campaign whose brokers
run with the test-only switch ``KBROKERTEST_DROP_ACKED_BATCH`` (broker/dropped_batch.py: each leader
hides the 20th batch it acknowledges on topic ``cq0`` from every consumer) ends with exit code 1 and
the hidden records reported as ``lost-write``, at the offsets the brokers logged, with their writer
(and, for consumers that read across the hole, as ``poll-skip`` / ``int-poll-skip`` of those values).

No faults, no namespaces, no tmpfs, no faked clocks: it runs without root, on 127.0.0.1. Slow (a
whole campaign, ~25 s): ``make test-all``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.campaign.options import Options
from tests.campaign.runner import Campaign
from tests.helpers.tools import require_tool

SWITCH = {"KBROKERTEST_DROP_ACKED_BATCH": "cq0:20"}
HIDING = re.compile(r"hiding (cq0)-(\d+) offsets (\d+)-(\d+) from consumers")


@pytest.mark.slow  # a whole campaign: ~25 s
def test_a_dropped_acknowledged_batch_is_reported_as_lost_write(tmp_path: Path) -> None:
    import shutil

    require_tool("etcd", shutil.which("etcd") is not None, "etcd not on PATH (apt-get install etcd-server)")
    opts = Options(duration=15, seed=28, faults=(), queue_workers=2, kafka_python_workers=1, txn_workers=1,
                   queue_topics=1, txn_topics=1, netns=False, disk_mb=0, faketime=False, out=tmp_path,
                   broker_env={n: dict(SWITCH) for n in (1, 2, 3)})
    campaign = Campaign(opts)
    code = campaign.run()
    run_dir = campaign.run_dir
    hidden = set()
    for log in run_dir.glob("broker-*.log"):
        for m in HIDING.finditer(log.read_text()):
            hidden.add((f"{m[1]}/{m[2]}", int(m[3])))
    assert hidden, "no broker hid a batch (did the load reach 20 batches on cq0?)"
    summary = json.loads((run_dir / "summary.json").read_text())
    anomalies = summary["result"]["anomalies"]
    assert code == 1, f"exit code {code}; anomalies {list(anomalies)}"
    # Consumers that read across the hole also skipped it: the same values, as (int-)poll-skip.
    assert set(anomalies) <= {"lost-write", "unseen", "poll-skip", "int-poll-skip"}, list(anomalies)
    lost = {(case["key"], case["offset"]) for case in anomalies["lost-write"]["examples"]}
    assert lost == hidden
    lost_values = {case["value"] for case in anomalies["lost-write"]["examples"]}
    for name in ("poll-skip", "int-poll-skip"):
        for case in anomalies.get(name, {}).get("examples", []):
            assert set(case["skipped"]) <= lost_values, f"{name} over other values: {case}"
    for case in anomalies["lost-write"]["examples"]:
        assert case["writer"]["type"] == "ok" and case["writer"]["sends"][case["key"]][0][1] == case["value"]
        assert case["max_read"] is not None  # the reader that saw a later offset of that partition
