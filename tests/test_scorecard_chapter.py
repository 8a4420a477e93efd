"""Chapter 8's prose as a reader sees it (notebooks/08_scorecard.md with the executed notebook's
glued values pasted in): no sentence over 60 words, no commit hash, glossary roles only for the
book's glossary terms, and its numbers glued, not typed. Each check is shown to see a bad
sentence."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "08_scorecard"
MAX_WORDS = 60
# the glossary's terms (book/glossary.md), which chapter 8 may link with {term}: each entry is an
# unindented line inside its {glossary} block
_GLOSSARY = (ROOT / "book" / "glossary.md").read_text().split("```{glossary}")[1].split("```")[0]
TERMS = {line.strip() for line in _GLOSSARY.splitlines() if line.strip() and not line[0].isspace()
         and not line.startswith(":")}
ABBREVIATIONS = ("e.g.", "i.e.", "eq.", "vs.", "cf.", "et al.", "Fig.", "No.")
HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def glued(path: Path) -> dict[str, str]:
    """The chapter's glued values as the book pastes them (text)."""
    out = {}
    for cell in nbformat.read(path, as_version=4).cells:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            text = o.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None:
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    value = text
                out[name] = str(value)
    return out


def prose(md: Path, values: dict[str, str]) -> list[str]:
    """The chapter's Markdown cells with glue pasted and roles reduced to their text, one block per
    paragraph, list item or table row; headings, math blocks and MyST targets left out."""
    blocks = []
    for cell in jupytext.read(md).cells:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"\$\$.*?\$\$", " ", cell.source, flags=re.S)
        text = re.sub(r"\{glue:text\}`([^`]+)`", lambda m: values.get(m.group(1), f"<unglued {m.group(1)}>"), text)
        text = re.sub(r"\{(term|doc|ref)\}`([^`<]+?)\s*(<[^`]*>)?`", r"\2", text)
        text = re.sub(r"\{numref\}`[^`]+`", "Figure 1", text)
        text = re.sub(r"\{cite\}`[^`]+`", "(Author, 2022)", text)
        for block in re.split(r"\n\s*\n|\n(?=\s*(?:[*-]|\d+\.) )|\n(?=\|)", text):
            block = " ".join(block.split())
            if block and not block.startswith(("#", "(", "[![", "|---")):
                blocks.append(block)
    return blocks


def sentences(block: str) -> list[str]:
    """A block's sentences: split after . ! ? followed by a space and a capital, a backtick or an
    opening bracket, abbreviations kept whole."""
    protected = re.sub(r"([.!?])(\*+)(\s)", r"\1\3\2", block)  # "work.** Then": a sentence ends
    for i, abbr in enumerate(ABBREVIATIONS):
        protected = protected.replace(abbr, f"\0{i}\0")
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z`(*{\"'])", protected)
    out = []
    for part in parts:
        for i, abbr in enumerate(ABBREVIATIONS):
            part = part.replace(f"\0{i}\0", abbr)
        out.append(part)
    return out


def long_sentences(blocks: list[str], limit: int = MAX_WORDS) -> list[str]:
    return [s for b in blocks for s in sentences(b) if len(s.split()) > limit]


@pytest.fixture(scope="module")
def blocks():
    return prose(CHAPTER.with_suffix(".md"), glued(CHAPTER.with_suffix(".ipynb")))


def test_every_glued_name_in_the_prose_is_glued(blocks):
    assert not [b for b in blocks if "<unglued" in b], [b for b in blocks if "<unglued" in b][:3]


def test_no_sentence_over_sixty_words(blocks):
    long = long_sentences(blocks)
    assert not long, [f"{len(s.split())} words: {s[:120]}..." for s in long]


def test_the_sentence_check_sees_a_long_sentence():
    long = "The head " + "reads a word and " * 15 + "stops."
    assert long_sentences([f"Short one, e.g. this. {long} Another short one."]) == [long]
    assert sentences("It is 0.5 vs. 0.6 here. Then (C4) falls.") == ["It is 0.5 vs. 0.6 here.", "Then (C4) falls."]
    assert len(sentences("**A bold lead.** Then a sentence.")) == 2


def test_no_commit_hash_in_the_prose(blocks):
    hits = [m.group(0) for b in blocks for m in HASH.finditer(b)]
    assert not hits, hits
    assert HASH.search("fixed in commit d199379 before") and not HASH.search("seed 42, 0.281 and nDCG@10")


def test_glossary_roles_name_glossary_terms():
    text = CHAPTER.with_suffix(".md").read_text()
    used = {m.group(2) or m.group(1) for m in re.finditer(r"\{term\}`([^`<]+?)\s*(?:<([^`>]+)>)?`", text)}
    used = {u.strip() for u in used}
    assert used and used <= TERMS, sorted(used - TERMS)


def test_the_prose_types_no_measured_number(blocks):
    """Numbers of the run come from glue: a decimal with three or more places typed in the
    prose would be one the results file does not check. The glued values are pasted, so this
    reads the Markdown source."""
    text = "\n".join(c.source for c in jupytext.read(CHAPTER.with_suffix(".md")).cells if c.cell_type == "markdown")
    text = re.sub(r"\$[^$]*\$", " ", text)
    typed = re.findall(r"(?<![\w.])\d\.\d{3,}\b", text)
    assert not typed, typed
