"""The book's chapters: text sources in sync with their notebooks, conventions, figures that show.

Each chapter is a jupytext pair, ``notebooks/NN_name.md`` (the text you edit) and
``notebooks/NN_name.ipynb`` (the executed outputs the book renders). The figure checks read the
committed notebooks, or the executed copies in the folder ``$BOOK_NOTEBOOKS`` when it is set
(e.g. chapters run with ``papermill ... -p preset micro``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from condenser_lite import book

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.md"))
EXECUTED = Path(os.environ["BOOK_NOTEBOOKS"]).resolve() if os.environ.get("BOOK_NOTEBOOKS") else NOTEBOOKS
MAX_LINE = 88


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip("\n"), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def pair_differences(md: Path, ipynb: Path) -> list[str]:
    """Cells (type, source, tags) that differ between the two sides of a chapter pair."""
    a, b = _cells(jupytext.read(md)), _cells(nbformat.read(ipynb, as_version=4))
    out = [f"cell {i}: {x[1][:60]!r} vs {y[1][:60]!r}" for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) != len(b):
        out.append(f"{len(a)} cells in {md.name}, {len(b)} in {ipynb.name}")
    return out


def plotting_cells(nb) -> list:
    """Code cells that draw a figure: each saves it under the chapter's figures folder."""
    return [c for c in nb.cells if c.cell_type == "code" and re.search(r"\bfigures\s*/", c.source)]


def missing_figures(nb) -> list[str]:
    """Plotting cells without an ``image/png`` output: a caption over an empty space in the book."""
    return [c.source.splitlines()[0] for c in plotting_cells(nb)
            if not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]


# --- pairs -----------------------------------------------------------------------------------


def test_every_chapter_is_a_pair():
    assert CHAPTERS, "no chapter sources notebooks/NN_name.md"
    notebooks = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert notebooks == CHAPTERS, "each notebooks/NN_name.ipynb needs its NN_name.md (jupytext pair)"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_pair_in_sync(chapter):
    diff = pair_differences(NOTEBOOKS / f"{chapter}.md", NOTEBOOKS / f"{chapter}.ipynb")
    assert not diff, (f"{chapter}.md and .ipynb differ ({diff[0]}); after editing the .md run "
                      f"`jupytext --sync notebooks/{chapter}.md`")


def test_pair_check_sees_an_edit(tmp_path):
    chapter = CHAPTERS[0]
    md = tmp_path / f"{chapter}.md"
    text = (NOTEBOOKS / f"{chapter}.md").read_text()
    edited = text.replace("print(ch)", "print(ch, 'edited')", 1)
    assert edited != text, f"{chapter}.md has no `print(ch)` line left to edit: edit another line here"
    md.write_text(edited)
    assert not pair_differences(NOTEBOOKS / f"{chapter}.md", NOTEBOOKS / f"{chapter}.ipynb")  # the pair before
    diff = pair_differences(md, NOTEBOOKS / f"{chapter}.ipynb")
    cell = next(i for i, c in enumerate(jupytext.read(md).cells) if "print(ch, 'edited')" in c.source)
    assert len(diff) == 1 and diff[0].startswith(f"cell {cell}: "), diff  # the edited cell, and only it


# --- conventions -----------------------------------------------------------------------------


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_conventions(chapter):
    nb = jupytext.read(NOTEBOOKS / f"{chapter}.md")
    code = [c for c in nb.cells if c.cell_type == "code"]
    install, parameters, setup = code[:3]
    assert install.source == book.colab_cell(), "first code cell: condenser_lite.book.colab_cell()"
    assert "remove-cell" in install.metadata.get("tags", [])
    assert book.colab_badge(chapter) in nb.cells[0].source, "title cell: colab_badge(chapter)"
    assert parameters.metadata.get("tags") == ["parameters"]
    assert "setup(" in setup.source and len(setup.source.splitlines()) <= 16
    for cell in code:
        tags = cell.metadata.get("tags", [])
        assert "NBVAL" not in cell.source, "use the nbval-ignore-output tag, not a marker comment"
        long = [line for line in cell.source.splitlines() if len(line) > MAX_LINE]
        assert not long, f"code lines over {MAX_LINE} characters: {long[0]!r}"
        if cell.source.startswith(("if check_claims", "assert")):
            assert {"check", "hide-cell"} <= set(tags), f"claim checks are tagged: {cell.source[:40]!r}"


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a cell binds (assignments, definitions, imports) and the names it reads."""
    import ast

    tree, bound = ast.parse(source), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return bound, {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_from_removed_cells(nb) -> dict[str, int]:
    """``{name: code cell index}`` of names that a cell the reader sees (or can unfold) reads but
    only a removed cell (``remove-cell``/``remove-input``) before it defines."""
    shown, removed, found = set(), {}, {}
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        bound, read = _names(cell.source)
        if {"remove-cell", "remove-input"} & set(cell.metadata.get("tags", [])):
            removed.update(dict.fromkeys(bound - shown, i))
            continue
        found.update({n: i for n in (read - bound - shown) & set(removed)})
        shown |= bound
    return found


# chapters whose findings table is made by a live cell (claims_table.findings_markdown) show it
# after their setup; every other page says what it finds before its first cell
FINDINGS_AFTER_SETUP = ("04_finetune", "05_attention_entropy", "06_loss_curves", "07_sentence_similarity",
                        "08_scorecard")


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c not in FINDINGS_AFTER_SETUP])
def test_a_page_opens_with_what_it_finds(chapter):
    text = (NOTEBOOKS / f"{chapter}.md").read_text()
    marker = re.search(r"^## What this (chapter|page) finds$", text, flags=re.M)
    assert marker, f"{chapter}: no 'What this page finds' section"
    assert marker.start() < text.index("```{code-cell}"), f"{chapter}: its findings come after a code cell"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_shown_cell_reads_only_names_the_reader_can_see(chapter):
    """A reader who unfolds a check or a solution can follow every name it reads: the cells that
    define them are shown or foldable (``hide-cell``), never removed."""
    found = names_from_removed_cells(jupytext.read(NOTEBOOKS / f"{chapter}.md"))
    assert not found, f"names defined only in removed cells: {found} (tag their cells hide-cell instead)"


def test_hidden_names_check_sees_a_removed_definition():
    nb = jupytext.reads("```{code-cell} ipython3\n:tags: [remove-cell]\n\nbest = 1\n```\n\n"
                        "```{code-cell} ipython3\nprint(best)\n```\n", fmt="md:myst")
    assert names_from_removed_cells(nb) == {"best": 1}


def test_no_machine_paths_in_outputs():
    for chapter in CHAPTERS:
        nb = nbformat.read(NOTEBOOKS / f"{chapter}.ipynb", as_version=4)
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                text = str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
                assert not re.search(r"(/home/|/work/|/tmp/|/Users/|site-packages)", text), \
                    f"{chapter}: an output prints a machine path: {text[:120]!r}"


# provenance lives on the running page and in the results files, not in a chapter's outputs: no
# commit hash, cache key (``mlm-4086d9b6b04b``) or machine name
PROVENANCE_IN_OUTPUT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|EPYC|Xeon|Core\(TM\)|Ryzen|"
                                  r"NVIDIA [A-Z]\d+")


def provenance_in_outputs(nb) -> list[str]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            text = "".join(str(x) for x in (out.get("text", ""), data.get("text/plain", ""),
                                            data.get("text/markdown", ""), data.get("text/html", "")))
            found += [m.group(0) for m in PROVENANCE_IN_OUTPUT.finditer(text)]
    return found


def test_the_provenance_check_sees_a_commit_and_a_machine():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("stream", text="commit e54408c on a 2-core AMD EPYC, 0.215 nats\n")])])
    assert provenance_in_outputs(nb) == ["e54408c", "EPYC"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_chapter_prints_provenance(chapter):
    found = provenance_in_outputs(nbformat.read(NOTEBOOKS / f"{chapter}.ipynb", as_version=4))
    assert not found, f"{chapter} prints {found[:5]}: provenance belongs on the running page (book/provenance.md)"


def test_the_running_pages_provenance_is_the_committed_files():
    """A regression check: ``book/provenance.md`` (the running page's "Where the numbers were
    made") is what ``provenance_summary`` makes of the committed results files; remake it with
    ``python -m condenser_book.provenance_summary > book/provenance.md``."""
    from condenser_book.provenance_summary import provenance_markdown

    assert (ROOT / "book" / "provenance.md").read_text() == provenance_markdown(ROOT / "results")


def test_notebooks_share_the_release_tag():
    assert re.fullmatch(r"v\d+\.\d+\.\d+", book.COLAB_RELEASE)
    for chapter in CHAPTERS:
        text = (NOTEBOOKS / f"{chapter}.md").read_text()
        tags = set(re.findall(r"\bv\d+\.\d+\.\d+\b", text))
        assert tags == {book.COLAB_RELEASE}, f"{chapter}: release tags {tags}"


# --- figures ---------------------------------------------------------------------------------


def test_missing_figures_sees_a_plot_without_image():
    plot = nbformat.v4.new_code_cell('fig.savefig(figures / "x.png")\nplt.show()')
    nb = nbformat.v4.new_notebook(cells=[plot])
    assert missing_figures(nb) == ['fig.savefig(figures / "x.png")']
    plot.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})]
    assert missing_figures(nb) == []


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_plotting_cells_have_images(chapter):
    nb = nbformat.read(EXECUTED / f"{chapter}.ipynb", as_version=4)
    missing = missing_figures(nb)
    assert not missing, f"{chapter}: plotting cells without an image output: {missing}"


def _build_book(tmp_path: Path) -> Path:
    """Build the book as `jupyter-book build book -W` does, from $BOOK_NOTEBOOKS if set."""
    site = tmp_path / "site"
    (site / "book").mkdir(parents=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, site / name)
    for item in (ROOT / "book").iterdir():
        if item.name not in ("notebooks", "_toc.yml"):
            (shutil.copytree if item.is_dir() else shutil.copy)(item, site / "book" / item.name)
    (site / "book" / "_toc.yml").symlink_to("../_toc.yml")
    shutil.copytree(EXECUTED, site / "notebooks", ignore=shutil.ignore_patterns(".*", "_build"))
    for chapter in CHAPTERS:  # the text sources, as in the repository (excluded from the build)
        shutil.copy(NOTEBOOKS / f"{chapter}.md", site / "notebooks" / f"{chapter}.md")
    (site / "book" / "notebooks").symlink_to("../notebooks")
    jb = Path(sys.executable).with_name("jupyter-book")
    run = subprocess.run([str(jb), "build", "book", "-W", "-q"], cwd=site, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return site / "_build" / "html"


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    return _build_book(tmp_path_factory.mktemp("book"))


def test_book_builds_from_the_notebooks_only(built_book):
    sources = sorted(p.name for p in (built_book / "_sources" / "notebooks").iterdir())
    assert sources == [f"{c}.ipynb" for c in CHAPTERS]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_built_page_shows_every_figure(built_book, chapter):
    html = (built_book / "notebooks" / f"{chapter}.html").read_text()
    shown = len(re.findall(r'<img[^>]+src="\.\./_images/[^"]+\.png"', html))
    expected = len(plotting_cells(nbformat.read(NOTEBOOKS / f"{chapter}.ipynb", as_version=4)))
    assert shown == expected, f"{chapter}: {shown} figures in the HTML, {expected} plotting cells"


def test_the_built_book_loads_no_script_from_the_network(built_book):
    """Equations render offline: MathJax is served from the build (sphinx-mathjax-offline), and no
    page loads a script from elsewhere; with MathJax from a CDN, a laptop offline saw raw TeX."""
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()
    for page in sorted(built_book.rglob("*.html")):
        html = page.read_text()
        remote = [src for src in re.findall(r'<script[^>]*\bsrc="([^"]+)"', html)
                  if src.startswith(("http:", "https:", "//"))]
        assert not remote, f"{page.relative_to(built_book)} loads {remote[0]}"
        # nor an image: offline, Colab's badge showed as a broken image; the chapters link instead
        images = [src for src in re.findall(r'<img[^>]*\bsrc="([^"]+)"', html) if src.startswith(("http:", "https:", "//"))]
        assert not images, f"{page.relative_to(built_book)} shows {images[0]}"


@pytest.mark.parametrize("viewport", [1280, 800])
def test_every_table_fits_the_text_column(built_book, viewport):
    """No table on any built page is wider than its text column, measured in headless Chromium
    with every fold open, at a laptop's window width and a narrow one; a wider table hides its
    right-hand columns (a verdict, a q) behind a sideways scroll."""
    import table_widths

    why = table_widths.available()
    if why and os.environ.get("CONDENSER_LITE_REQUIRE_BROWSER") == "1":  # CI: .ci/run installs it
        pytest.fail(f"cannot measure the built pages: {why}")
    if why:
        pytest.skip(f"cannot measure the built pages: {why}")
    wide = table_widths.wide_tables(built_book, viewport)
    assert not wide, "\n".join(f"{page}: a table {t['width']} px wide in a {t['column']} px column, "
                               f"headed {t['head']!r}" for page, tables in wide.items() for t in tables)


# --- prose a student can follow, on the built pages ----------------------------------------------

MAX_SENTENCE_WORDS = 60
PROSE_PAGES = ("intro", "glossary", "running", *(f"notebooks/{nb.stem}" for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.md"))))
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def prose_sentences(html: str) -> list[str]:
    """The sentences of a built page's prose: its paragraphs, list items and glossary entries,
    without code, cell outputs, tables or equations."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    main = soup.find("main") or soup
    for junk in main.select("div.cell_output, div.highlight, pre, table, .math, script, style, "
                            "div.toggle-details, details, nav, footer, .headerlink"):
        junk.decompose()
    blocks = [el for el in main.find_all(["p", "dd", "li"]) if not el.find_parent(["li", "dd"])]
    texts = [" ".join(el.get_text(" ").split()) for el in blocks]  # a paragraph ends its sentence
    return [s for t in texts for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[*]|co[A-Z])", t) if s.strip()]


def long_sentences(html: str, limit: int = MAX_SENTENCE_WORDS) -> list[str]:
    return [f"{len(s.split())} words: {s[:100]}..." for s in prose_sentences(html) if len(s.split()) > limit]


def test_the_prose_checks_see_a_long_sentence_and_a_hash():
    long = "<main><p>" + " ".join(["word"] * 61) + ". A short one.</p><pre>" + "x " * 90 + "</pre></main>"
    assert len(long_sentences(long)) == 1 and not long_sentences(long.replace("word word", "word. Word", 1))
    assert COMMIT_HASH.search("run at 757d05f on") and not COMMIT_HASH.search("the word faceted and 1234567")


@pytest.mark.parametrize("page", PROSE_PAGES)
def test_built_prose_has_no_overlong_sentence_and_no_commit_hash(built_book, page):
    html = (built_book / f"{page}.html").read_text()
    long = long_sentences(html)
    assert not long, f"{page}: sentences over {MAX_SENTENCE_WORDS} words: {long}"
    # the running page's "Where the numbers were made" (book/provenance.md) is the one place for them
    html = re.sub(r'<section id="where-the-numbers-were-made".*?</section>', "", html, flags=re.S)
    hashes = sorted({m.group(0) for s in prose_sentences(html) for m in COMMIT_HASH.finditer(s)})
    assert not hashes, f"{page}: commit hashes in the prose (provenance lives in the results files): {hashes}"


def share_before_first_table(html: str) -> float:
    """How far down a built page its first table starts, as the share of the article's text
    (prose, code and tables) that comes before it: a proxy for the share of the page's height."""
    from bs4 import BeautifulSoup

    main = BeautifulSoup(html, "html.parser").find("article") or BeautifulSoup(html, "html.parser")
    table = main.find("table")
    if table is None:
        return 1.0
    marker = "\x00TABLE\x00"
    table.insert_before(marker)
    text = " ".join(main.get_text(" ").split())
    return text.index(marker) / len(text)


def test_the_intros_claims_table_stands_in_the_first_quarter_of_its_page(built_book):
    share = share_before_first_table((built_book / "intro.html").read_text())
    assert share < 0.25, f"the claims table starts {share:.0%} of the way down the introduction"
    assert share_before_first_table("<article><p>" + "x " * 90 + "</p><table><tr><td>a</td></tr></table></article>") > 0.9


# a term the glossary defines is linked to it, or set in italics where the page defines it, at
# its first use in a page's prose (tables, code, outputs and headings aside); "the rule" is also
# an ordinary phrase, and "head" also names attention heads and the MLM head
FIRST_USE_EXEMPT = {"the rule"}
# a glossary word in another sense, which needs no link: an attention head, a loss plateau
OTHER_SENSE = {"head": r"(?<!attention )(?<!MLM )", "plateau": r"(?<!loss )"}


def glossary_terms(site: Path) -> dict[str, str]:
    """The built glossary's terms, by anchor (``term-...``)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((site / "glossary.html").read_text(), "html.parser")
    for link in soup.select("dl.glossary dt a.headerlink"):
        link.extract()
    return {dt["id"]: dt.get_text(" ", strip=True) for dt in soup.select("dl.glossary dt")}


def unlinked_first_uses(html: str, terms: dict[str, str]) -> list[str]:
    """The glossary terms whose first use in the page's prose is neither a link to the glossary
    nor in italics, each with the words around it."""
    from bs4 import BeautifulSoup

    article = BeautifulSoup(html, "html.parser").select_one("article.bd-article")
    seen, missed = set(), []
    for node in article.find_all(string=True):
        link = node.find_parent("a")
        target = (link.get("href") or "").partition("#term-")[2] if link else ""
        if target:  # a link, even in a table, introduces its term (and no other)
            seen.add(f"term-{target}")
            continue
        if node.find_parent(["pre", "code", "script", "style", "h1", "h2", "h3", "h4", "table"]) or \
                node.find_parent("div", class_=["cell_input", "cell_output"]):
            continue
        for anchor, term in terms.items():
            if anchor in seen or term in FIRST_USE_EXEMPT:
                continue
            flags = 0 if any(c.isupper() for c in term) else re.IGNORECASE
            # a term may break across the source's lines: any whitespace between its words
            word = re.escape(term).replace("’", "['’]").replace("'", "['’]").replace(r"\ ", r"\s+")
            if re.search(OTHER_SENSE.get(term, "") + rf"(?<![\w-]){word}(?![\w-])", node, flags):
                seen.add(anchor)
                if not node.find_parent(["em", "strong", "dfn"]):
                    missed.append(f"{term!r} in {' '.join(node.split())[:70]!r}")
    return missed


def test_the_first_use_check_sees_an_unlinked_term():
    terms = {"term-nats": "nats", "term-head": "head"}
    page = '<article class="bd-article"><p>The loss is 2 nats; the attention head {}.</p></article>'
    assert unlinked_first_uses(page.format(""), terms) == ["'nats' in 'The loss is 2 nats; the attention head .'"]
    linked = page.replace("2 nats", '2 <a href="../glossary.html#term-nats">nats</a>').format("and the head")
    assert unlinked_first_uses(linked, terms) == ["'head' in '; the attention head and the head.'"]
    assert unlinked_first_uses(page.replace("2 nats", "2 <em>nats</em>").format(""), terms) == []


@pytest.mark.parametrize("page", [p for p in PROSE_PAGES if p != "glossary"])
def test_every_glossary_term_is_linked_at_its_first_use(built_book, page):
    missed = unlinked_first_uses((built_book / f"{page}.html").read_text(), glossary_terms(built_book))
    assert not missed, f"{page}: link these to the glossary at their first use ({{term}}`...`): {missed}"


def test_the_glossary_is_linked_from_the_pages(built_book):
    linked = [p for p in ("intro", "notebooks/08_scorecard", "notebooks/10_mechanism")
              if 'href="glossary.html#term-' in (built_book / f"{p}.html").read_text().replace("../glossary", "glossary")]
    assert linked == ["intro", "notebooks/08_scorecard", "notebooks/10_mechanism"], linked


# --- the setup call --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _keep_threads():
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # setup() fixes the count for a chapter, not for the test run


def test_setup_parses_papermill_strings(tmp_path, monkeypatch):
    monkeypatch.delenv("CONDENSER_LITE_CACHE", raising=False)
    ch = book.setup(full="true", preset=" Micro ", seed="3", max_steps="None", workers="2",
                    cache_dir=str(tmp_path / "cache"), figures_dir=str(tmp_path / "figs"))
    assert (ch.full, ch.preset, ch.seed, ch.max_steps, ch.workers) == (True, "micro", 3, None, 2)
    assert os.environ["CONDENSER_LITE_CACHE"] == str(tmp_path / "cache")
    assert ch.figures.is_dir() and (ch.device in ("cpu", "cuda") or ch.device.startswith("xla"))
    assert ch.rerun and ch.live_preset.name == "paper"
    assert "full scale" in str(ch) and "seed 3, device" in str(ch)
    committed = book.setup(preset="None", figures_dir=str(tmp_path / "f"))  # papermill's text
    assert committed.preset is None and not committed.rerun
    assert "live cells' seed 0" in str(committed)  # reading committed runs: the seed is the live cells'
    assert committed.live_preset.name == book.LIVE_PRESET and "committed" in str(committed)
    rerun = book.setup(preset="micro", figures_dir=str(tmp_path / "f"))
    assert rerun.live_preset.name == book.LIVE_PRESET and "re-running the micro preset" in str(rerun)
    # the live cells build the committed run's model (its Condenser split), trained in float32
    from condenser_lite.reproduction.configuration.presets import get_preset

    small = get_preset(book.COMMITTED)
    assert (committed.live_preset.model, committed.live_preset.finetune, committed.live_preset.sts) == (small.model, small.finetune, small.sts)
    assert {r.mixed_precision for _, r in committed.live_preset.stages.items()} == {"no"}


def test_released_names_the_committed_models_or_the_fix(tmp_path, monkeypatch):
    from condenser_lite.reproduction.runs import release
    from condenser_lite.reproduction.configuration.presets import PAPER
    from condenser_lite.utils.errors import CheckpointError

    ch = book.setup(figures_dir=str(tmp_path / "f"))
    monkeypatch.setattr(release, "CHECKPOINTS_DIR", tmp_path / "checkpoints")
    with pytest.raises(CheckpointError, match="condenser_lite release results/small.json"):
        ch.released("condenser")
    (tmp_path / "checkpoints" / book.COMMITTED / "condenser").mkdir(parents=True)
    (tmp_path / "checkpoints" / book.COMMITTED / "condenser" / "config.json").write_text("{}")
    assert ch.released("condenser") == str(tmp_path / "checkpoints" / book.COMMITTED / "condenser")
    with pytest.raises(ValueError, match="choose from"):
        ch.released("bert_cont")
    full = book.setup(full="true", figures_dir=str(tmp_path / "f"))
    assert full.released("cocondenser") == PAPER.pretrained["cocondenser"]


def test_check_claims_only_for_the_committed_small_run(tmp_path):
    committed = book.setup(figures_dir=str(tmp_path / "f"))
    rerun = book.setup(preset="micro", figures_dir=str(tmp_path / "f"))
    small, micro = {"preset": {"name": book.COMMITTED}}, {"preset": {"name": "micro"}}
    assert committed.check_claims(small)
    assert not committed.check_claims(micro)  # a committed file of another preset
    assert not rerun.check_claims(small)  # a re-run shows its own numbers


def test_results_reads_the_committed_file_or_names_the_fix(tmp_path, monkeypatch, capsys):
    import json

    from condenser_lite.reproduction.evidence import results as evidence

    monkeypatch.setattr(evidence, "RESULTS_DIR", tmp_path)
    ch = book.setup(figures_dir=str(tmp_path / "f"))
    with pytest.raises(FileNotFoundError, match="experiments --preset small"):
        ch.results()
    results = {"protocol": "condenser_lite.protocol", "version": evidence.RESULTS_VERSION,
               "preset": {"name": "small"}, "seeds": [0, 1, 2], "pretraining_seeds": [42],
               "provenance": {"commit": "0123456789abcdef", "dirty": False, "wall_seconds": 5400}}
    (tmp_path / "small.json").write_text(json.dumps(results))
    assert ch.results() == results
    # the committed run's provenance is on the running page, not in a chapter's output
    assert capsys.readouterr().out.strip() == (
        "results/small.json, the committed run: preset small, 3 fine-tuning seeds, 1 pre-training seed")
    # a re-run names its commit and time; one that found stages in the cache says so, with the
    # work they stand for
    assert book.describe(results, committed=False).endswith("seed, commit 0123456, 90.0 min")
    results["provenance"].update(parts_reused=8, work_cpu_seconds=11880)
    assert book.describe(results, committed=False).endswith(
        "90.0 min (8 cached stages reused; 3.3 CPU-hours of work in all)")


def test_glue_pastes_numbers_with_fixed_decimals(monkeypatch):
    import myst_nb

    seen = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display: seen.update({name: (value, display)}))
    book.glue("small", -0.0001, 2)
    book.glue("half", 0.5, 2)
    book.glue("words", "reproduced")
    assert seen == {"small": ("0.00", False), "half": ("0.50", False), "words": ("reproduced", False)}


def test_live_checkpoint_rejects_an_unknown_method(tmp_path):
    with pytest.raises(ValueError, match="choose from"):
        book.setup(figures_dir=str(tmp_path / "f")).live_checkpoint("cocondenser")


@pytest.mark.parametrize("kwargs,message", [
    ({"full": "maybe"}, "parameter 'full' must be a boolean"),
    ({"preset": "huge"}, r"parameter 'preset' must be one of .*'micro'.*committed results/small\.json"),
    ({"seed": "-1"}, "'seed' must be >= 0"),
    ({"max_steps": "0"}, "'max_steps' must be >= 1"),
    ({"data_dir": 3}, "'data_dir' must be a folder path"),
    # the study and mechanism pages: their results come from their own commands
    ({"preset": "small", "remade_by": "python -m condenser_lite sizing"},
     r"'preset': this page reads its own committed results.*python -m condenser_lite sizing"),
    ({"full": "true", "remade_by": "python -m condenser_lite mechanism"}, "'full': this page reads its own"),
])
def test_setup_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        book.setup(**kwargs)


# --- voice ------------------------------------------------------------------------------------

# Phrases that speak about the project's history (a development log) instead of the papers and
# the runs. Whole words, any case. "used to" alone is ordinary English ("the vectors used to
# rank"), so only its past-habit forms are listed.
DEV_LOG_PHRASES = (
    "previous book", "first book", "first scaled-down book", "earlier version", "old recipe",
    "old split", "the old", "the issue", "issue asks", "issue's", "as the issue asks",
    "this session", "today", "we now", "no longer", "used to be", "we used to", "it used to",
    "this PR", "pull request", "this commit", "TODO", "FIXME",
)
DEV_LOG = re.compile(r"\b(" + "|".join(re.escape(p) for p in DEV_LOG_PHRASES) + r")\b", re.IGNORECASE)
BOOK_PAGES = sorted((ROOT / "book").glob("*.md"))


def _comments(code: str) -> str:
    """The comments of a code cell (its identifiers and strings may have to name data keys)."""
    import io
    import tokenize

    try:
        return "\n".join(t.string for t in tokenize.generate_tokens(io.StringIO(code).readline)
                         if t.type == tokenize.COMMENT)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join(line.split("#", 1)[1] for line in code.splitlines() if "#" in line)


def dev_log_hits(text: str) -> list[str]:
    """Each development-log phrase in ``text``, with its line."""
    return [f"{m.group(0)!r} in {line.strip()[:90]!r}" for line in text.splitlines()
            for m in DEV_LOG.finditer(line)]


def _reader_text(chapter: str) -> str:
    """What a reader of the chapter sees: its prose, its code's comments and its outputs' text."""
    nb = jupytext.read(NOTEBOOKS / f"{chapter}.md")
    parts = [c.source if c.cell_type == "markdown" else _comments(c.source) for c in nb.cells]
    executed = nbformat.read(NOTEBOOKS / f"{chapter}.ipynb", as_version=4)
    for cell in executed.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            parts += [str(out.get("text", "")), str(data.get("text/plain", "")),
                      str(data.get("text/html", "")), str(data.get("text/markdown", ""))]
    return "\n".join(parts)


def test_dev_log_check_sees_a_phrase():
    assert dev_log_hits("As the issue asks, we now train longer (today).")
    assert dev_log_hits("the previous book's tiny recipe")
    assert not dev_log_hits("the vectors used to rank passages; a reissued paper")
    assert _comments('x = "today"  # the old split\ny = 1') == "# the old split"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapters_speak_about_the_papers_not_the_project_history(chapter):
    hits = dev_log_hits(_reader_text(chapter))
    assert not hits, f"{chapter}: development-log voice: {hits}"


@pytest.mark.parametrize("page", [p.name for p in BOOK_PAGES])
def test_book_pages_speak_about_the_papers_not_the_project_history(page):
    hits = dev_log_hits((ROOT / "book" / page).read_text())
    assert not hits, f"book/{page}: development-log voice: {hits}"


def _plain(md: str) -> str:
    """Markdown with MyST roles read as their text ({term}`a <b>` -> a) and whitespace folded."""
    md = re.sub(r"\{term\}`([^`<]+?)(?:\s*<[^>]+>)?`", r"\1", md)
    return " ".join(md.split())


def test_the_intros_parameter_count_is_the_committed_models():
    """The introduction is plain Markdown (nothing glued there): its parameter count of the book's
    encoder is checked here against the committed model that chapter 4 counts live."""
    from transformers import AutoModel

    intro = _plain((ROOT / "book" / "intro.md").read_text())
    stated = float(re.search(r"BERT of ([\d.]+)M parameters", intro).group(1))
    share = float(re.search(r"\(([\d.]+)% of BERT-base's 110M\)", intro).group(1))
    model = AutoModel.from_pretrained(ROOT / "results" / "checkpoints" / "small" / "bert", add_pooling_layer=False)
    n = sum(p.numel() for p in model.parameters())
    assert stated == round(n / 1e6, 2) and share == round(100 * n / 110e6, 1)


def _comparisons(d, path=()):
    """Every paired comparison (a dict with ``per_seed`` and ``p``) under a claim's ``ours``."""
    if isinstance(d, dict):
        if isinstance(d.get("per_seed"), dict) and "p" in d:
            yield path, d
        for k, v in d.items():
            yield from _comparisons(v, (*path, k))


def test_the_intros_findings_are_the_committed_runs():
    """The introduction's findings (plain Markdown, nothing glued there) are checked here against
    ``results/small.json`` and ``results/mechanism.json``: each number at the precision it is
    stated, and each verdict its sentences rest on."""
    import json

    from scipy import stats as scipy_stats

    from condenser_lite.reproduction.claims.claims_table import headline_rows
    from condenser_lite.reproduction.claims.multiplicity import multiplicity
    from condenser_lite.reproduction.evidence.results import arm_seeds
    from condenser_lite.reproduction.configuration.settings_tree import preset_from_record

    intro = _plain((ROOT / "book" / "intro.md").read_text())
    part = intro[intro.index("## What the runs found"):intro.index("## How to read this book")]
    small = json.loads((ROOT / "results" / "small.json").read_text())
    mech = json.loads((ROOT / "results" / "mechanism.json").read_text())
    claims = {c["id"]: c for c in small["claims"]}
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    n_seeds = len(small["pretraining_seeds"])

    def all_verdicts(cid, verdict):
        return all(d["verdict"] == verdict for _, d in _comparisons(claims[cid]["ours"]))

    unseen = [str(s) for s in small["pretraining_seeds"] if s not in (42, 43)]

    def unseen_p(d):  # the one-sided paired t-test on the unseen seeds alone
        return scipy_stats.ttest_1samp([d["per_seed"][s] for s in unseen], 0, alternative="greater").pvalue
    arm_tests = [d for cid in ("C1m", "C7m", "Am") for path, d in _comparisons(claims[cid]["ours"])
                 if "control_vs_bert_cont" not in path]  # the controls against BERT-continued are not the arm's
    onset = mech["onset"]
    c0_l48 = mech["l48"]["c0"]["reliance"]
    passed = sum(r >= 0.2 for r in c0_l48)
    switched = sum(v["switched_on"] for v in onset["per_seed"].values())
    bm25 = small["bm25"]
    best_dense = max(d["nDCG@10"]["mean"] for arm in small["retrieval"].values() for rnd in arm.values()
                     for d in rnd.values())
    others = ("C1", "C4", "C5", "C6", "C7")
    m = multiplicity(small)
    rows = {r["id"]: r for r in headline_rows(small)}
    real = json.loads((ROOT / "results" / "real_model.json").read_text())
    h1, h2 = real["judged"]["H1"], real["judged"]["H2"]
    real_seeds = [s for s in real["units"] if s != "none"]
    stated = {
        f"Every arm is pre-trained from {words[n_seeds]} pre-training seeds":
            all(len(arm_seeds(small, a)) == n_seeds for a in small["arms"]),
        "coCondenser's contrastive pre-training works at this scale": claims["C2"]["verdict"] == "reproduced",
        "coCondenser's contrastive pre-training reproduces clearly": claims["C2"]["verdict"] == "reproduced",
        f"in its stage of {preset_from_record(small['preset']).stages.condenser.max_steps:,} Condenser updates, its head reads nothing through `[CLS]`":
            not claims["C0"]["ours"]["relies"] and max(abs(r) for r in claims["C0"]["ours"]["reliance"]) < 0.01,
        "Every dense retriever here stays below BM25": best_dense < bm25["truncated"]["nDCG@10"],
        "So by the rule it still does not read `[CLS]`": mech["scaling"]["points"]["l48"]["reads_cls"] is False,
        f"the reliance passes C0's 0.2 on {words[passed]} of the {words[len(c0_l48)]} seeds run with a control":
            0 < passed < len(c0_l48),
        f"reliance at most {max(abs(r) for r in claims['C0']['ours']['reliance']):.3f} against the 0.2 of the rule":
            not claims["C0"]["ours"]["relies"],
        "Of its other claims, only neighbourhood recall (C8) holds in full":
            claims["C8"]["verdict"] == "reproduced" and all(claims[c]["verdict"] != "reproduced" for c in others),
        "its reliance is {} on the seeds its choice never saw".format(
            ", ".join(f"{r:.2f}" for r in claims["C0m"]["ours"]["reliance"][:-1])
            + f" and {claims['C0m']['ours']['reliance'][-1]:.2f}"): claims["C0m"]["ours"]["relies"],
        "It beats both BERT arms in retrieval and on STS-b":
            all_verdicts("C1m", "reproduced") and all_verdicts("C7m", "reproduced"),
        "The modified Condenser's early fine-tuning loss (C6m) is significantly higher than BERT's, against the "
        "paper's direction": all_verdicts("C6m", "worse") and rows["C6m"]["q"] < 0.05,
        "Its attention entropy (C5m) also moves the wrong way, but that call does not stand under the FDR reading":
            all_verdicts("C5m", "worse") and rows["C5m"]["q"] >= 0.05,
        f"The verdicts rest on {m['tests']} distinct one-sided tests at 5%": m["alpha"] == 0.05,
        f"about {m['expected_false']:.1f} of them would call \"better\" by chance; {m['significant']} do": True,
        f"Holding the FDR at 5% keeps {m['bh']} of those {m['significant']} calls. The two that fall are C4's and "
        "C4m's": m["significant"] - m["bh"] == 2 and all(rows[c]["verdict_bh"] != rows[c]["verdict"]
                                                          for c in ("C4", "C4m")),
        "On the unseen seeds 44-46 alone, every C1m, C7m and Am comparison still has p < 0.05":
            unseen == ["44", "45", "46"] and arm_tests and all(unseen_p(d) < 0.05 for d in arm_tests),
        f"the faithful Condenser's head switched on in {words[switched]} of the {words[len(onset['per_seed'])]} "
        "pre-training seeds": 0 < switched < len(onset["per_seed"]),
        f"it beat an MLM control on all {words[len(real_seeds)]} pre-training seeds "
        f"({h1['diff']:+.3f} nDCG@10, p {h1['p']:.3f})":
            h1["reading"] == "better" and min(h1["per_seed"].values()) > 0 and len(h1["per_seed"]) == len(real_seeds),
        f"It did not beat fine-tuning alone ({h2['diff']:+.3f}, not detectable at this power: the test could "
        f"detect {h2['mdd']:.3f})": h2["reading"] == "not detectable at this power",
        "The gap came mostly from the control falling": h2["diff"] > h1["b"] - h2["b"],
        f"BM25 reaches nDCG@10 {bm25['truncated']['nDCG@10']:.3f} on the same {bm25['truncated_tokens']}-token "
        f"passages the dense models see, and {bm25['full']['nDCG@10']:.3f} on whole documents":
            best_dense < bm25["truncated"]["nDCG@10"],
    }
    missing = [s for s in stated if s not in part]
    assert not missing, f"book/intro.md no longer states (or states differently): {missing}"
    wrong = [s for s, ok in stated.items() if not ok]
    assert not wrong, f"book/intro.md states what the committed runs do not support: {wrong}"


def test_the_intros_claims_table_is_the_committed_runs():
    """A regression check: ``book/claims_table.md`` (included by the introduction) is what
    ``claims_summary.intro_tables`` makes of ``results/small.json``; remake it with
    ``python -m condenser_book.claims_summary > book/claims_table.md``."""
    import json

    from condenser_book.claims_summary import intro_tables

    made = intro_tables(json.loads((ROOT / "results" / "small.json").read_text()))
    assert (ROOT / "book" / "claims_table.md").read_text().strip() == made.strip()


def test_the_running_pages_rerun_time_is_the_committed_runs():
    import json

    page = _plain((ROOT / "book" / "running.md").read_text())
    prov = json.loads((ROOT / "results" / "small.json").read_text())["provenance"]
    hours = prov["work_cpu_seconds"] / 3600
    assert f"{hours:.1f} CPU-hours of work" in page
    assert f"about {hours / 2:.1f} hours of wall time on its two one-thread workers" in page
