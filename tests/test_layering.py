"""The package's layering, read from its imports: each folder imports only from the folders below
it, nothing imports a private name of another module, and no module imports itself in a circle.

    condenser_book/                  (the book's side: what the chapters show; nothing imports it)
    book.py, cli.py, parameters.py   (the top: the chapters' setup, the command line)
    studies/
    reproduction/                    (in layers: runs/ over claims/ over evidence/ over
                                      statistics/ over configuration/)
    training/
    retrieval/
    modeling/   data/                (the papers' ideas and the data, side by side)
    utils/
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parent.parent / "condenser_lite"
BOOK_SIDE = PACKAGE.parent / "condenser_book"
# floor of each part of the package; a module may import from strictly lower floors and its own folder
FLOORS = {"utils": 0, "modeling": 1, "data": 1, "retrieval": 2, "training": 3, "reproduction": 4, "studies": 5, "": 6}
# and within reproduction/, the floor of each of its sub-folders
LAYERS = {"configuration": 0, "statistics": 1, "evidence": 2, "claims": 3, "runs": 4}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    return ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")


def part(module: str) -> str:
    """The folder of ``condenser_lite.<folder>.<module>``, "" for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""


def layer(module: str) -> str | None:
    """The sub-folder of ``condenser_lite.reproduction.<layer>.<module>``, else None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "reproduction" else None


def imports(path: Path, root: Path = PACKAGE) -> list[tuple[int, str, list[str]]]:
    """``(line, absolute module, names)`` of every import of the package in ``path``."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith(("condenser_lite", "condenser_book")):
                continue
            names = [a.name for a in node.names]
            # ``from .pkg import module`` imports the module itself
            for name in list(names):
                if (root.parent / (module.replace(".", "/") + f"/{name}.py")).exists():
                    out.append((node.lineno, f"{module}.{name}", []))
                    names.remove(name)
            if names:
                out.append((node.lineno, module, names))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names
                    if a.name.startswith(("condenser_lite", "condenser_book"))]
    return out


def violations(root: Path = PACKAGE) -> list[str]:
    """Every import that breaks the layering, as ``file:line: what``."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        for line, module, names in imports(path, root):
            where = f"{path.relative_to(root.parent)}:{line}"
            if module == "condenser_lite":
                if names:  # a plain ``import condenser_lite`` reads __version__, which is all __init__ holds
                    bad.append(f"{where}: imports {', '.join(names)} from the package; import from the module")
                continue
            book_side = me.startswith("condenser_book")
            if module.startswith("condenser_book") and not book_side:
                bad.append(f"{where}: {me} imports {module}, the book's side, which the library never imports")
            mine, theirs = part(me), part(module)
            if book_side or module.startswith("condenser_book"):
                pass  # the book's side may import any of the library
            elif mine != theirs and FLOORS[theirs] >= FLOORS[mine]:
                bad.append(f"{where}: {me} ({mine or 'top'}) imports {module} ({theirs or 'top'}), "
                           "which is not below it")
            low, high = layer(me), layer(module)
            if low and high and low != high and LAYERS[high] >= LAYERS[low]:
                bad.append(f"{where}: {me} (reproduction/{low}) imports {module} (reproduction/{high}), "
                           "which is not below it")
            private = [n for n in names if n.startswith("_")]
            if private and module != me:
                bad.append(f"{where}: {me} imports private names {private} of {module}")
    return bad


def cycles(root: Path = PACKAGE) -> list[list[str]]:
    """Circles in the import graph between modules (a module imported inside a function counts)."""
    graph: dict[str, set[str]] = {}
    modules = {module_name(p, root) for p in root.rglob("*.py")}
    for path in root.rglob("*.py"):
        me = module_name(path, root)
        graph[me] = {m for _, m, _ in imports(path, root) if m != me and m in modules}
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_each_folder_imports_only_from_the_folders_below_it():
    bad = violations() + violations(BOOK_SIDE)
    assert not bad, "\n".join(bad)


def test_the_package_root_holds_only_its_version():
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and n.module != "__future__"]


def test_no_circle_in_the_package():
    assert not cycles(), cycles()


def test_every_folder_says_what_it_holds_and_may_import():
    folders = [PACKAGE / f for f in FLOORS if f] + [PACKAGE / "reproduction" / f for f in LAYERS] + [BOOK_SIDE]
    assert {p.parent for p in PACKAGE.rglob("__init__.py")} | {BOOK_SIDE} == set(folders) | {PACKAGE}
    for folder in folders:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc and "May import" in doc, folder
        # the docstring names every module and sub-folder of the folder
        modules = {f"{p.stem}.py" for p in folder.glob("*.py")} - {"__init__.py"}
        modules |= {f"{p.parent.name}/" for p in folder.glob("*/__init__.py")}
        assert all(m in doc for m in modules), (folder, sorted(m for m in modules if m not in doc))


def test_reproduction_is_in_layers():
    """reproduction/ is its sub-folders, with no more than two modules of its own."""
    assert {p.parent.name for p in (PACKAGE / "reproduction").glob("*/__init__.py")} == set(LAYERS)
    assert len(list((PACKAGE / "reproduction").glob("*.py"))) <= 2


def test_the_check_sees_a_wrong_import(tmp_path):
    """The checks fail, naming the line, on a copy of the package with an import that runs up."""
    import shutil

    copy = tmp_path / "condenser_lite"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    losses = copy / "modeling" / "losses.py"
    losses.write_text(losses.read_text() + "\nfrom ..reproduction.claims.scorecard import scorecard  # wrong: runs up\n")
    gauges = copy / "modeling" / "gauges.py"
    gauges.write_text(gauges.read_text() + "\nfrom .losses import _private  # wrong: a private name\n")
    rules = copy / "reproduction" / "statistics" / "rules.py"
    rules.write_text(rules.read_text() + "\nfrom ..claims.scorecard import scorecard  # wrong: a layer up\n")
    wording = copy / "reproduction" / "statistics" / "wording.py"
    wording.write_text(wording.read_text() + "\nfrom condenser_book.plots import SMALL  # wrong: the book's side\n")
    bad = violations(copy)
    assert any("modeling/losses.py" in b and "reproduction.claims.scorecard" in b for b in bad), bad
    assert any("statistics/rules.py" in b and "(reproduction/claims)" in b for b in bad), bad
    assert any("statistics/wording.py" in b and "the book's side" in b for b in bad), bad
    assert any("private names ['_private']" in b for b in bad), bad
    # and a circle: losses -> gauges -> losses
    losses.write_text(losses.read_text() + "\nfrom .gauges import cls_reliance\n")
    assert any("condenser_lite.modeling.losses" in c and "condenser_lite.modeling.gauges" in c for c in cycles(copy))


@functools.lru_cache(maxsize=None)  # a module is parsed once, not once per import of it (5 s -> 1 s)
def defined_names(module: str) -> frozenset[str]:
    """The names ``module`` defines at its top level (not those it imports)."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {e.id for t in targets for e in ast.walk(t) if isinstance(e, ast.Name)}
    return frozenset(names)


def code_of(path: Path) -> str:
    """A Python file's text, or a chapter's code cells (MyST Markdown, read by jupytext), magics left out."""
    if path.suffix != ".md":
        return path.read_text()
    import jupytext

    cells = [c.source for c in jupytext.read(path).cells if c.cell_type == "code"]
    return "\n".join(line for c in cells for line in c.splitlines() if not line.lstrip().startswith(("%", "!")))


def second_paths(path: Path) -> list[str]:
    """Imports in ``path`` that take a name from a module that only re-exports it."""
    bad = []
    for node in ast.walk(ast.parse(code_of(path))):
        if isinstance(node, ast.ImportFrom) and not node.level \
                and (node.module or "").startswith(("condenser_lite", "condenser_book")):
            for alias in node.names:
                is_module = (PACKAGE.parent / (node.module.replace(".", "/") + f"/{alias.name}.py")).exists() \
                    or (PACKAGE.parent / node.module.replace(".", "/") / alias.name / "__init__.py").exists()
                if not is_module and alias.name not in defined_names(node.module):
                    bad.append(f"{path}:{node.lineno}: {alias.name} is not defined in {node.module}")
    return bad


def test_one_import_path_per_name():
    """Every name is imported from the module that defines it, in the package (relative imports
    resolved) and in its clients: tests, chapters, benchmarks, scripts."""
    root = PACKAGE.parent
    bad = []
    for path in sorted([*PACKAGE.rglob("*.py"), *BOOK_SIDE.rglob("*.py")]):
        for line, module, names in imports(path, PACKAGE if path.is_relative_to(PACKAGE) else BOOK_SIDE):
            if module != "condenser_lite":
                bad += [f"{path.relative_to(root)}:{line}: {n} is not defined in {module}"
                        for n in names if n not in defined_names(module)]
    clients = [*root.joinpath("tests").rglob("*.py"), *root.joinpath("benchmarks").glob("*.py"),
               *root.joinpath("scripts").glob("*.py"), *root.joinpath("notebooks").glob("*.md")]
    for path in clients:
        bad += second_paths(path)
    assert not bad, "\n".join(bad)
