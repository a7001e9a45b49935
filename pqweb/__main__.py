"""``python -m pqweb``: the ``pqweb`` command."""

from .cli import main

main()
