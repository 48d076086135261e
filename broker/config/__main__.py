"""``python -m broker.config [PATH]``: regenerate docs/config-reference.md."""

import os
import sys

from broker.config.reference import config_reference_markdown

target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                                                              "config-reference.md")
with open(target, "w", encoding="utf-8") as fh:
    fh.write(config_reference_markdown())
