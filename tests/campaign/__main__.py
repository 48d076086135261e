"""``python -m tests.campaign [options]``: run one fault campaign (``make chaos`` calls this).

``python -m tests.campaign --check RUN_DIR`` checks (and reports on) an existing run's history again.
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
    from .options import parse
    from .runner import run

    return run(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
