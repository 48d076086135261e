"""A short fault campaign (issue 28, acceptance 5): 150 s, a fixed seed, one fault of each kind (kill,
pause, partition, clock, disk, membership: one round with shortened holds), both workloads, then
the drain and the check: no anomaly, nothing wrong in the run (the cluster whole again, complete
drains, no traceback in a broker log).

Root (network namespaces, tmpfs) and the Debian packages etcd-server, faketime and nftables. Slow
(about 3.5 minutes with start-up, drain and check): ``make test-all``; ``make chaos`` runs longer ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.campaign.nemeses import KINDS
from tests.campaign.options import Options
from tests.campaign.runner import Campaign
from tests.helpers.fake_clock import library
from tests.helpers.netns import unavailable_reason

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0 or unavailable_reason() is not None or library() is None
                       or shutil.which("etcd") is None,
                       reason="needs root, etcd-server, faketime, nftables (make tools)"),
]


def test_short_campaign_with_one_fault_of_each_kind(tmp_path: Path) -> None:
    opts = Options(duration=150, seed=28, rounds=1, hold_scale=0.5, fault_gap=(2.0, 4.0), out=tmp_path)
    campaign = Campaign(opts)
    code = campaign.run()
    summary = json.loads((campaign.run_dir / "summary.json").read_text())
    assert code == 0, (f"exit {code}: anomalies {list(summary['result']['anomalies'])}, "
                       f"problems {summary['problems']}; see {campaign.run_dir}/summary.txt")
    assert sorted(f["kind"] for f in summary["faults"]) == sorted(KINDS)
    stats = summary["result"]["stats"]
    assert stats["txn_commits"] > 100 and stats["by_f_type"].get("send:ok", 0) > 1000, stats
    assert (campaign.run_dir / "timeline.png").exists()
