"""Where the tests find the repository, their fixtures and the local data mirror, from any folder
under tests/ (a test file's own ``Path(__file__).parents[k]`` would depend on how deep it sits)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository
FIXTURES = TESTS / "fixtures"
MIRROR = ROOT.parent / "shared" / "data"  # the local data mirror beside the checkout (CI: ../shared/data)
