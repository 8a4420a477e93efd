"""Where the tests find the repository, their fixtures, the local data mirror and the folder one
test run shares, from any folder under tests/ (a test file's own ``Path(__file__).parents[k]``
would depend on how deep it sits)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository
FIXTURES = TESTS / "fixtures"
MIRROR = ROOT.parent / "shared" / "data"  # the local data mirror beside the checkout (CI: ../shared/data)


def run_folder(tmp_path_factory, config) -> Path:
    """The temporary folder of this whole test run: the one every pytest-xdist worker sees (each
    worker's own base folder sits in it), or this process's own without xdist. The session
    fixtures that train build into it once (tests/conftest.py)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base
