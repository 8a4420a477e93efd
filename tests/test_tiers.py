"""Every collected test is in exactly one tier: unit, protocol or book (tests/conftest.py)."""

import pytest

pytestmark = pytest.mark.unit


def test_every_collected_test_has_exactly_one_tier(collected_tiers):
    assert collected_tiers  # at least this test
    wrong = {nodeid: marks for nodeid, marks in collected_tiers.items() if len(marks) != 1}
    assert not wrong, f"{len(wrong)} tests without exactly one of unit, protocol, book: {wrong}"
