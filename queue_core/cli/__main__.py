"""``python -m queue_core.cli``: the perfectqueue command."""

from .main import main

main()
