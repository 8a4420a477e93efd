"""Wikipedia and WikiText markup -> plain-text sections: the pre-training corpus's cleaning.

Explained in chapter 1, `notebooks/01_readiness.ipynb`. `sources.load_pretraining_corpus` reads the
files; this module only turns their text into rows, one per *section* of an article (columns
`source`, `doc_id`, `title`, `section`, `text`; paragraphs joined by "\\n"; the lead section's
heading is ""). Three inputs, one row format:

* a MediaWiki XML export (the Wikipedia sample): `parse_mediawiki_dump`, which strips the markup
  with `clean_wikitext_markup` and splits at `== Heading ==` lines with `split_wiki_sections`;
* WikiText (`Salesforce/wikitext`, tokenized or raw): `parse_wikitext_lines` / `wikitext_articles`,
  which undo only WikiText's `@-@`-style artefacts and map `<unk>` to `[UNK]` (our tokenizer's
  unknown token, so no fake word "unk" enters the vocabulary);
* the full-scale `wikimedia/wikipedia` plain text: `split_plain_article`.

Sections shorter than `MIN_SECTION_WORDS` words and reference-like sections ("References",
"See also", ...) are dropped and counted in a `SectionStats` (`emit_sections`).
"""

from __future__ import annotations

import bz2
import html
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Iterator

MIN_SECTION_WORDS = 20
# Sections that hold citations or link lists, not prose: useless (and repetitive) for MLM.
BOILERPLATE_SECTIONS = {
    "references", "external links", "see also", "notes", "further reading", "bibliography",
    "sources", "citations", "footnotes", "notes and references", "works cited",
    "references and notes", "external link", "selected bibliography",
}


@dataclass
class SectionStats:
    """What a parser kept and dropped for one source (logged; stored in `info.description`). Chapter 1."""

    documents: int = 0
    sections: int = 0
    words: int = 0
    dropped_short: int = 0
    dropped_boilerplate: int = 0


def emit_sections(source: str, doc_id: str, title: str,
                   sections: list[tuple[str, list[str]]], stats: SectionStats) -> list[dict]:
    """Turn one article's (heading, paragraphs) list into rows, dropping short/boilerplate ones. Chapter 1."""
    rows = []
    for heading, paragraphs in sections:
        text = "\n".join(p for p in paragraphs if p)
        if heading.strip().lower() in BOILERPLATE_SECTIONS:
            stats.dropped_boilerplate += 1
            continue
        n_words = len(text.split())
        if n_words < MIN_SECTION_WORDS:
            stats.dropped_short += 1
            continue
        rows.append({"source": source, "doc_id": doc_id, "title": title, "section": heading,
                     "text": text})
        stats.sections += 1
        stats.words += n_words
    stats.documents += 1
    return rows



# ---- MediaWiki markup -----------------------------------------------------------------------

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref(?:\s[^>]*)?>.*?</ref\s*>", re.S | re.I)
_DROP_BLOCKS = re.compile(
    r"<(math|gallery|timeline|score|syntaxhighlight|source|pre|imagemap|chem|hiero|graph)"
    r"\b[^>]*>.*?</\1\s*>", re.S | re.I)
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}")
_INNER_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_EXT_LINK = re.compile(r"\[(?:https?:|ftp:)?//[^\s\]]*\s*([^\]]*)\]")
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_QUOTES = re.compile(r"'{2,}")
_MAGIC = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^(={2,6})\s*(.+?)\s*\1\s*$")
_DROP_LINK_NS = ("file:", "image:", "category:", "media:")
_INTERLANG = re.compile(r"^:?[a-z]{2,3}(?:-[a-z]+)?:")  # [[de:Anarchismus]] and the like
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
_EMPTY_PARENS = re.compile(r"\(\s*[,;]?\s*\)")
_SPACES = re.compile(r"[ \t\u00a0]+")


def _drop_templates(text: str) -> str:
    """Remove {{...}} templates, nested ones included, by counting brace depth."""
    out, depth, pos = [], 0, 0
    for m in _TEMPLATE_TOKEN.finditer(text):
        if m.group() == "{{":
            if depth == 0:
                out.append(text[pos:m.start()])
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                pos = m.end()
    if depth == 0:
        out.append(text[pos:])
    return "".join(out)


def _drop_tables(text: str) -> str:
    """Remove {| ... |} tables (nested too); table markers must start a line in MediaWiki."""
    out, depth = [], 0
    for line in text.split("\n"):
        s = line.lstrip()
        if s.startswith("{|"):
            depth += 1
        elif s.startswith("|}") and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(line)
    return "\n".join(out)


def _link_text(m: re.Match) -> str:
    parts = m.group(1).split("|")
    target = parts[0].strip()
    low = target.lower().lstrip(":")
    if low.startswith(_DROP_LINK_NS):
        return ""  # images and categories carry no running text
    if len(parts) == 1 and _INTERLANG.match(target.lower()) and not low.startswith("wikt:"):
        return ""  # interlanguage link
    shown = parts[-1] if len(parts) > 1 and parts[-1].strip() else target
    return shown.lstrip(":").split(":", 1)[-1] if shown.lower().startswith("wikt:") else shown.lstrip(":")


def _clean_line(line: str) -> str:
    line = _SPACES.sub(" ", line).strip()
    line = _EMPTY_PARENS.sub("", line)
    line = _SPACE_BEFORE_PUNCT.sub(r"\1", line)
    return _SPACES.sub(" ", line).strip()


def clean_wikitext_markup(markup: str) -> str:
    """MediaWiki markup -> plain text, keeping `== Heading ==` lines for the section split.

    Reasonable, not perfect: templates, tables, references, images, categories, comments and
    HTML tags go; link and bold/italic markup is replaced by its visible text.
    Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    text = _COMMENT.sub("", markup)
    text = _REF.sub("", text)
    text = _DROP_BLOCKS.sub("", text)
    text = _drop_templates(text)
    text = _drop_tables(text)
    for _ in range(5):  # innermost links first: an image caption may itself contain links
        new = _INNER_LINK.sub(_link_text, text)
        if new == text:
            break
        text = new
    text = _EXT_LINK.sub(r"\1", text)
    text = _TAG.sub("", text)
    text = _QUOTES.sub("", text)
    text = _MAGIC.sub("", text)
    text = html.unescape(text)
    lines = []
    for line in text.split("\n"):
        s = line.strip()
        if not s or s[0] in "|!{}" or s.startswith(("[[", "]]")):
            lines.append("")  # table debris or an unclosed link: not prose
            continue
        if _HEADING.match(s):
            lines.append(s)
            continue
        lines.append(_clean_line(re.sub(r"^[*#:;]+\s*", "", s)))
    return "\n".join(lines)


def split_wiki_sections(plain: str) -> list[tuple[str, list[str]]]:
    """Split cleaned article text at `== Heading ==` lines: [(heading, paragraphs), ...].

    The lead section's heading is "". Every heading level starts a new section. Chapter 1.
    """
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in plain.split("\n"):
        m = _HEADING.match(line.strip())
        if m:
            sections.append((_clean_line(m.group(2)), []))
        elif line.strip():
            sections[-1][1].append(line.strip())
    return sections


@lru_cache(maxsize=4)
def _parse_enwiki_cached(path: str, mtime_ns: int, size: int) -> tuple[tuple[dict, ...], SectionStats]:
    stats = SectionStats()
    rows: list[dict] = []
    with bz2.open(path, "rb") if path.endswith(".bz2") else open(path, "rb") as fh:
        for _, elem in ET.iterparse(fh, events=("end",)):
            if not elem.tag.endswith("}page") and elem.tag != "page":
                continue
            ns = elem.findtext("{*}ns") or elem.findtext("ns") or "0"
            redirect = elem.find("{*}redirect") is not None or elem.find("redirect") is not None
            text_el = elem.find("{*}revision/{*}text")
            if text_el is None:
                text_el = elem.find("revision/text")
            markup = (text_el.text or "") if text_el is not None else ""
            if ns.strip() == "0" and not redirect and not markup.lstrip().upper().startswith("#REDIRECT"):
                title = elem.findtext("{*}title") or elem.findtext("title") or ""
                page_id = elem.findtext("{*}id") or elem.findtext("id") or title
                sections = split_wiki_sections(clean_wikitext_markup(markup))
                rows.extend(emit_sections("enwiki", f"enwiki-{page_id}", title, sections, stats))
            elem.clear()  # keep memory flat on big dumps
    return tuple(rows), stats


def parse_mediawiki_dump(path: str | os.PathLike) -> tuple[list[dict], SectionStats]:
    """Parse a MediaWiki XML export (.xml or .xml.bz2) into section rows, with the stdlib only.

    Skips redirects and pages outside the article namespace (ns 0). Cached per file version.
    Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    st = os.stat(path)
    rows, stats = _parse_enwiki_cached(str(path), st.st_mtime_ns, st.st_size)
    return [dict(r) for r in rows], SectionStats(**vars(stats))


# ---- WikiText ---------------------------------------------------------------------------------

_WT_HEADING = re.compile(r"^((?:= )+)(.*?)((?: =)+)$")
_WT_ARTEFACTS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))


def _undo_wikitext_spacing(line: str) -> str:
    for old, new in _WT_ARTEFACTS:
        line = line.replace(old, new)
    return line.replace("<unk>", "[UNK]")


def parse_wikitext_lines(lines: Iterable[str], prefix: str = "wikitext") -> tuple[list[dict], SectionStats]:
    """Group WikiText lines into articles (` = Title = `) and sections (` = = Sub = = `).

    Works for the tokenized and raw variants, read from the Hub or a mirror file. Undoes only
    the `@-@`, `@,@`, `@.@` artefacts and maps `<unk>` to `[UNK]` (see module docstring).
    Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    return _collect(wikitext_articles(lines, prefix))


def wikitext_articles(lines: Iterable[str], prefix: str) -> Iterator[tuple[str, str, list]]:
    """``(doc_id, title, [(heading, paragraphs), ...])`` per WikiText article, streamed (the
    full-scale WikiText-103 is read this way). Chapter 1."""
    title, sections, n = None, [], 0
    for raw in lines:
        s = raw.replace("\ufeff", "").strip()
        if not s:
            continue
        m = _WT_HEADING.match(s)
        level = m.group(1).count("=") if m and m.group(1).count("=") == m.group(3).count("=") else 0
        if level == 1:
            if title is not None:
                yield f"{prefix}-{n}", title, sections
                n += 1
            title, sections = _undo_wikitext_spacing(m.group(2).strip()), [("", [])]
        elif level > 1:
            sections.append((_undo_wikitext_spacing(m.group(2).strip()), []))
        elif title is not None:
            sections[-1][1].append(_undo_wikitext_spacing(s))
    if title is not None:
        yield f"{prefix}-{n}", title, sections


def _collect(articles: Iterable[tuple[str, str, list]], source: str = "wikitext") -> tuple[list[dict], SectionStats]:
    stats, rows = SectionStats(), []
    for doc_id, title, sections in articles:
        rows.extend(emit_sections(source, doc_id, title, sections, stats))
    return rows, stats


# ---- full-scale Wikipedia (wikimedia/wikipedia: plain text, headings as short lines) ---------

def _looks_like_heading(paragraph: str) -> bool:
    words = paragraph.split()
    return ("\n" not in paragraph and 0 < len(words) <= 10
            and paragraph.rstrip()[-1] not in ".!?:;,\"')]")


def split_plain_article(text: str) -> list[tuple[str, list[str]]]:
    """Sections of a `wikimedia/wikipedia` article: blank-line blocks; a short block without
    final punctuation is taken as a heading. Explained in chapter 1."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if _looks_like_heading(block):
            sections.append((block, []))
        else:
            sections[-1][1].extend(line.strip() for line in block.split("\n") if line.strip())
    return sections
