"""DESIGN.md's map is the package's folder tree: every module listed once, in its folder, and
nothing listed that is not there (the private-name rule is tests/test_layering.py's)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "condenser_lite"


def design_map(top: str = "condenser_lite") -> set[str]:
    """The files DESIGN.md's tree of ``top`` lists, as paths inside it (``modeling/condenser.py``)."""
    text = (ROOT / "DESIGN.md").read_text()
    tree = re.search(rf"```\n{top}/[^\n]*\n(.*?)```", text, re.S).group(1)
    listed, folders = set(), []  # folders: (indent, name) of the folders the line sits in
    for line in tree.splitlines():
        m = re.match(r"^( *)(\w+)(/|\.py)", line)
        if not m:
            continue
        indent, name, kind = len(m.group(1)), m.group(2), m.group(3)
        folders = [(i, f) for i, f in folders if i < indent]
        if kind == "/":
            folders.append((indent, name))
        else:
            listed.add("/".join([f for _, f in folders] + [f"{name}.py"]))
    return listed


def test_design_lists_every_module():
    for top in ("condenser_lite", "condenser_book"):
        modules = {p.relative_to(ROOT / top).as_posix() for p in (ROOT / top).rglob("*.py")
                   if p.name not in ("__init__.py", "__main__.py")}
        listed = design_map(top)
        assert listed == modules, (top, sorted(modules - listed), sorted(listed - modules))


def test_the_check_reads_the_tree():
    assert {"modeling/condenser.py", "book.py", "utils/cache.py", "reproduction/runs/jobs.py"} <= design_map()
    assert "plots.py" in design_map("condenser_book")


def test_the_readmes_equation_table_names_real_functions():
    """Each function the README's table maps an equation to exists under condenser_lite.modeling,
    and the README names modeling/ before its first 120 lines end."""
    import importlib

    text = (ROOT / "README.md").read_text()
    assert "condenser_lite/modeling/" in "\n".join(text.splitlines()[:120])
    table = text.split("## What the book teaches, equation by equation", 1)[1].split("\n\n## ", 1)[0]
    names = [n for row in table.splitlines() if row.startswith("| ") and row.count("|") == 6
             for n in re.findall(r"`([a-z_]+\.[A-Za-z_.]+)`", row.split("|")[4])]
    assert len(names) >= 10, names
    for name in names:
        module, *attrs = name.split(".")
        obj = importlib.import_module(f"condenser_lite.modeling.{module}")
        for attr in attrs:
            obj = getattr(obj, attr)  # AttributeError names a renamed function
