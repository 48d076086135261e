"""``python -m broker`` is the ``kbroker`` command."""

import sys

from broker.cli import main

sys.exit(main())
