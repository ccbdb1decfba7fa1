"""``python -m timetravel`` is the ``timetravel`` command."""

import sys

try:
    from timetravel.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command is still being imported: nothing started yet
    sys.exit(130)

sys.exit(main())
