"""The examples in the library's docstrings run: every ``>>>`` line of ``condenser_lite`` is a
doctest, so an example a reader copies cannot drift from the code it shows."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parent.parent / "condenser_lite"
WITH_EXAMPLES = sorted(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
                       for p in PACKAGE.rglob("*.py") if ">>> " in p.read_text())


def test_some_modules_show_examples():
    assert len(WITH_EXAMPLES) >= 3, WITH_EXAMPLES


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {module} failed (see above)"
