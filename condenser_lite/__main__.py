"""``python -m condenser_lite ...``: see ``condenser_lite.cli``."""

from .cli import main

main()
