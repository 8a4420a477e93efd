"""DESIGN.md's module map matches the package, and no module imports another's private names."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "condenser_lite"


def test_design_lists_every_module():
    listed = set(re.findall(r"^\| `(\w+)\.py`", (ROOT / "DESIGN.md").read_text(), flags=re.M))
    listed |= {"__main__"}  # listed with cli.py
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert listed == modules, (sorted(modules - listed), sorted(listed - modules))


def test_no_module_imports_private_names_of_another():
    offenders = []
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                offenders += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not offenders, offenders
