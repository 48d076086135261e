"""``python -m cli ...`` is the ``kbroker`` command."""

import sys

from cli.main import main

sys.exit(main())
