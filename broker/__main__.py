"""``python -m broker [serve] [FILE] [--override k=v ...]`` starts a broker (the ``kbroker serve``
entry). The tools are ``python -m cli`` (the ``kbroker`` command)."""

import sys

from broker.serve import main

argv = sys.argv[1:]
if argv[:1] == ["serve"]:
    argv = argv[1:]
sys.exit(main(argv))
