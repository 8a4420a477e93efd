"""``python -m condenser_lite ...``: see ``condenser_lite.cli``."""

from __future__ import annotations

from .cli import main

main()
