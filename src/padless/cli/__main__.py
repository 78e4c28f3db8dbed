"""``python -m padless.cli``: the ``padless`` command."""

import sys

from . import main

sys.exit(main())
