"""``python -m timetravel`` is the ``timetravel`` command."""

import sys

from timetravel.cli import main

sys.exit(main())
