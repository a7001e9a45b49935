"""``python -m reliability`` (see :mod:`reliability.runner`)."""

import sys

from .runner import main

sys.exit(main())
