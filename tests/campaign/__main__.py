"""``python -m tests.campaign [options]``: run one fault campaign (``make chaos`` calls this).

``python -m tests.campaign --check RUN_DIR`` checks an existing run's history again;
``python -m tests.campaign --cleanup [OUT]`` removes what a campaign killed before its end left behind
(network namespaces and bridges of dead owners, tmpfs log dirs still mounted under OUT).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--check"]:
        from pathlib import Path

        from .checker import check
        from .history import load

        result = check(load(Path(argv[1])))
        counts = dict(result.anomalies.counts)
        print(f"{'VALID' if result.valid else 'ANOMALIES'}: {counts or 'none'}; allowed {dict(result.allowed.counts)};"
              f" {result.stats['ops']} ops")
        return 0 if result.valid else 1
    if argv[:1] == ["--cleanup"]:
        from pathlib import Path

        from tests.helpers.netns import NetLab

        out = Path(argv[1] if len(argv) > 1 else "build/chaos").resolve()
        removed = NetLab.cleanup_stale()
        with open("/proc/mounts") as f:
            for line in f:
                _dev, mount, fstype, *_ = line.split()
                if fstype == "tmpfs" and mount.startswith(str(out) + "/") and "/disk-" in mount:
                    import subprocess

                    subprocess.run(["umount", "-l", mount], check=False)
                    removed.append(mount)
        print(f"removed {len(removed)}: {removed}")
        return 0
    from .options import parse
    from .runner import run

    return run(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
