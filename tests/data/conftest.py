"""Fixtures of the data tests (sources and beir both read the local mirror)."""

from pathlib import Path

import pytest
from locations import MIRROR as SHARED

from condenser_lite.data import sources as data


@pytest.fixture
def mirror(monkeypatch) -> Path:
    """Point the loaders at the shared mirror through the environment, as CI does."""
    if not (SHARED / "README.md").exists():
        pytest.skip(f"local data mirror not found at {SHARED}")
    monkeypatch.setenv(data.DATA_ENV, str(SHARED))
    return SHARED
