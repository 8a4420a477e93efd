"""Raw data sets, read from the Hugging Face Hub *or* a local mirror through one code path.

Explained in chapter 1, `notebooks/01_readiness.ipynb` (what the data are and where they come
from); the pre-training corpus is used in chapters 2 and 3, SciFact in chapter 4, STS-b in chapter 7.

Where the data come from is decided once, by `resolve_mirror`:

    data_dir argument  >  environment variable CONDENSER_LITE_DATA  >  the Hugging Face Hub

Every loader then calls `datasets.load_dataset` with either the Hub id (or Hub files) or the
mirror files, and hands the result to one normalisation function per data set, so the rows a
notebook sees do not depend on where they were read from. The mirror layout is the one of
`../shared/data/README.md`; `REGISTRY` lists every data set, its Hub id and its mirror files.

Decisions worth knowing (the book repeats them):

* Pre-training rows are *sections*: one row per section of an article (columns `source`,
  `doc_id`, `title`, `section`, `text`), paragraphs separated by "\\n". The lead section of an
  article has `section == ""` (it has no heading in the source). Sections shorter than
  `MIN_SECTION_WORDS` words and reference-like sections ("References", "See also", ...) are
  dropped and counted; the counts are logged and stored as JSON in `dataset.info.description`.
* WikiText's `<unk>` (a word outside WikiText's own vocabulary) becomes `[UNK]`, which our
  tokenizer reads as its unknown-token special token: no fake word "unk" enters the
  vocabulary, and a collator that never masks special tokens never asks for it.
* The Wikipedia and news samples of the scaled-down corpus are not on the Hub; without a mirror
  they are downloaded from the gensim repository on GitHub, where they are test data.
* `full=True` streams the full-scale corpora (`wikimedia/wikipedia` 20231101.en,
  `Salesforce/wikitext` wikitext-103-raw-v1) and returns an `IterableDataset`. Their mirror
  is the Hub's own parquet files: `<mirror>/wikipedia-20231101.en/*.parquet` and
  `<mirror>/wikitext-103-raw-v1/train-*.parquet`.
* Tevatron's mirror layout is `<mirror>/<name>/<split>.jsonl` and `<mirror>/<name>/corpus.jsonl`
  (`<name>` without "Tevatron/"), the files of the Hub repos uncompressed.
"""

from __future__ import annotations

import bz2
import html
import json
import logging
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import datasets
from datasets import Dataset, Features, IterableDataset, Value

logger = logging.getLogger(__name__)

DATA_ENV = "CONDENSER_LITE_DATA"
MIN_SECTION_WORDS = 20
# Sections that hold citations or link lists, not prose: useless (and repetitive) for MLM.
BOILERPLATE_SECTIONS = {
    "references", "external links", "see also", "notes", "further reading", "bibliography",
    "sources", "citations", "footnotes", "notes and references", "works cited",
    "references and notes", "external link", "selected bibliography",
}
_GENSIM_DATA = "https://raw.githubusercontent.com/piskvorky/gensim/4.3.3/gensim/test/test_data"


class DataSourceError(RuntimeError):
    """A data set could not be read from where it was asked for (Hub offline, mirror incomplete)."""


class SchemaError(ValueError):
    """A data file lacks a field the loaders need."""


# --------------------------------------------------------------------------------------------
# Registry: every data set the book uses, its Hub source and its mirror files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataSpec:
    """Where one data set lives: on the Hub (or a public URL) and inside a mirror directory."""

    name: str
    hub_id: str  # Hub repo id, or a URL for the two samples that are not on the Hub
    mirror_files: dict[str, str]  # role -> path relative to the mirror root
    hub_config: str | None = None
    hub_files: dict[str, str] = field(default_factory=dict)  # role -> file inside the Hub repo
    description: str = ""
    license: str = ""


REGISTRY: dict[str, DataSpec] = {
    "enwiki": DataSpec(
        "enwiki", f"{_GENSIM_DATA}/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
        {"dump": "enwiki-sample/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"},
        description="English Wikipedia XML export, 106 articles (gensim test data)",
        license="CC BY-SA 3.0 / GFDL",
    ),
    "news": DataSpec(
        "news", f"{_GENSIM_DATA}/lee_background.cor",
        {"lines": "enwiki-sample/lee_background.cor"},
        description="Lee background corpus: 300 Australian news articles, one per line",
        license="gensim test data",
    ),
    "wikitext": DataSpec(
        "wikitext", "Salesforce/wikitext",
        {"validation": "wikitext-2-tokenized/valid.txt", "test": "wikitext-2-tokenized/test.txt"},
        hub_config="wikitext-2-v1",
        description="WikiText-2 (tokenized, with <unk>), validation and test splits: 124 articles",
        license="CC BY-SA 3.0",
    ),
    "wikipedia-full": DataSpec(
        "wikipedia-full", "wikimedia/wikipedia", {"parquet": "wikipedia-20231101.en"},
        hub_config="20231101.en",
        description="full English Wikipedia, 20231101 (streamed)", license="CC BY-SA 3.0 / GFDL",
    ),
    "wikitext-103": DataSpec(
        "wikitext-103", "Salesforce/wikitext", {"parquet": "wikitext-103-raw-v1"},
        hub_config="wikitext-103-raw-v1",
        description="WikiText-103 raw, train split (streamed)", license="CC BY-SA 3.0",
    ),
    "scifact": DataSpec(
        "scifact", "BeIR/scifact",
        {"corpus": "scifact/corpus.jsonl", "queries": "scifact/queries.jsonl",
         "qrels/train": "scifact/qrels/train.tsv", "qrels/test": "scifact/qrels/test.tsv"},
        description="BEIR SciFact: 5,183 abstracts, 1,109 claims, qrels train/test",
        license="claims CC BY 4.0, abstracts ODC-By 1.0",
    ),
    "stsb": DataSpec(
        "stsb", "sentence-transformers/stsb",
        {"train": "stsb/stsb-en-train.csv", "validation": "stsb/stsb-en-dev.csv",
         "test": "stsb/stsb-en-test.csv"},
        description="STS benchmark (English) sentence pairs, score in [0, 1]",
        license="CC BY-SA 4.0 scores",
    ),
    # Tevatron's repos are script-based, which `datasets` no longer runs: we read their JSON
    # files directly (hf://), with the same "json" builder that reads the mirror files.
    "Tevatron/msmarco-passage": DataSpec(
        "Tevatron/msmarco-passage", "Tevatron/msmarco-passage",
        {"train": "msmarco-passage/train.jsonl", "dev": "msmarco-passage/dev.jsonl",
         "corpus": "msmarco-passage/corpus.jsonl"},
        hub_files={"train": "train.jsonl.gz", "dev": "dev.jsonl.gz",
                   "corpus": "Tevatron/msmarco-passage-corpus:corpus.jsonl.gz"},
        description="MS MARCO passage ranking in Tevatron's training schema",
    ),
    "Tevatron/wikipedia-nq": DataSpec(
        "Tevatron/wikipedia-nq", "Tevatron/wikipedia-nq",
        {"train": "wikipedia-nq/train.jsonl", "dev": "wikipedia-nq/dev.jsonl",
         "test": "wikipedia-nq/test.jsonl", "corpus": "wikipedia-nq/corpus.jsonl"},
        hub_files={"train": "nq-train.jsonl.gz", "dev": "nq-dev.jsonl.gz", "test": "nq-test.jsonl.gz",
                   "corpus": "Tevatron/wikipedia-nq-corpus:corpus.jsonl.gz"},
        description="Natural Questions (DPR's Wikipedia split) in Tevatron's training schema",
    ),
    "Tevatron/scifact": DataSpec(
        "Tevatron/scifact", "Tevatron/scifact",
        {"train": "scifact/train.jsonl", "dev": "scifact/dev.jsonl", "test": "scifact/test.jsonl",
         "corpus": "scifact/corpus.jsonl"},
        hub_files={"train": "train.jsonl.gz", "dev": "dev.jsonl.gz", "test": "test.jsonl.gz",
                   "corpus": "Tevatron/scifact-corpus:corpus.jsonl.gz"},
        description="SciFact in Tevatron's training schema",
    ),
}
PRETRAINING_SOURCES = ("enwiki", "news", "wikitext")
TEVATRON_NAMES = tuple(k for k in REGISTRY if k.startswith("Tevatron/"))


def _spec(name: str, known: Iterable[str] | None = None) -> DataSpec:
    known = list(known) if known is not None else list(REGISTRY)
    if name not in known:
        raise ValueError(f"unknown data set {name!r}; known data sets: {', '.join(known)}")
    return REGISTRY[name]


def resolve_mirror(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local mirror root to read from, or None for the Hugging Face Hub.

    `data_dir` wins over the environment variable `CONDENSER_LITE_DATA`; with neither, None.
    Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    chosen = data_dir if data_dir not in (None, "") else os.environ.get(DATA_ENV) or None
    if chosen is None:
        return None
    root = Path(chosen).expanduser().resolve()
    if not root.is_dir():
        origin = "data_dir" if data_dir not in (None, "") else f"${DATA_ENV}"
        raise DataSourceError(
            f"the data mirror {root} (from {origin}) is not a directory. Point {origin} at a "
            f"folder laid out like ../shared/data/README.md, or unset it to read the Hub."
        )
    return root


def _layout(spec: DataSpec) -> str:
    return "\n".join(f"  <mirror>/{p}" for p in spec.mirror_files.values())


def _mirror_path(root: Path, spec: DataSpec, role: str) -> Path:
    """The mirror file for `role`, or a DataSourceError naming it and the expected layout."""
    path = root / spec.mirror_files[role]
    if not path.exists():
        raise DataSourceError(
            f"data set {spec.name!r}: the mirror {root} lacks {path}.\n"
            f"Expected layout for {spec.name!r}:\n{_layout(spec)}\n"
            f"Fix the mirror, point data_dir= / ${DATA_ENV} at a complete one, or unset "
            f"${DATA_ENV} to download {spec.hub_id} from the Hugging Face Hub."
        )
    return path


def _from_hub(spec: DataSpec, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a Hub (or URL) read; turn any failure into one DataSourceError that says the fix."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # offline, HF_HUB_OFFLINE, DNS, 404...: the fix is the same
        raise DataSourceError(
            f"could not read data set {spec.name!r} from {spec.hub_id} "
            f"({type(err).__name__}: {err}).\n"
            f"This machine may be offline (or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set). "
            f"Use a local mirror: set {DATA_ENV}=/path/to/mirror or pass data_dir=/path/to/mirror "
            f"(layout: ../shared/data/README.md)."
        ) from err


def _load(spec: DataSpec, from_mirror: bool, *args: Any, **kwargs: Any) -> Any:
    """`datasets.load_dataset(*args, **kwargs)`; Hub failures become DataSourceError."""
    if from_mirror:
        return datasets.load_dataset(*args, **kwargs)
    return _from_hub(spec, datasets.load_dataset, *args, **kwargs)


def _download(spec: DataSpec) -> Path:
    """Fetch a URL-hosted sample into the `datasets` download cache."""
    dm = datasets.DownloadManager(dataset_name=spec.name)
    return Path(_from_hub(spec, dm.download, spec.hub_id))


def _check_fields(columns: Iterable[str], required: Iterable[str], where: str) -> None:
    cols = set(columns)
    for name in required:
        if name not in cols:
            raise SchemaError(
                f"{where} has no field {name!r} (fields found: {sorted(cols)}). "
                f"Rewrite the file with the expected fields: {list(required)}."
            )


# --------------------------------------------------------------------------------------------
# Pre-training corpus: sections of articles
# --------------------------------------------------------------------------------------------

SECTION_FEATURES = Features({
    "source": Value("string"), "doc_id": Value("string"), "title": Value("string"),
    "section": Value("string"), "text": Value("string"),
})


@dataclass
class SectionStats:
    """What a parser kept and dropped for one source (logged; stored in `info.description`)."""

    documents: int = 0
    sections: int = 0
    words: int = 0
    dropped_short: int = 0
    dropped_boilerplate: int = 0


def _emit_sections(source: str, doc_id: str, title: str,
                   sections: list[tuple[str, list[str]]], stats: SectionStats) -> list[dict]:
    """Turn one article's (heading, paragraphs) list into rows, dropping short/boilerplate ones."""
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

    The lead section's heading is "". Every heading level starts a new section.
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
                rows.extend(_emit_sections("enwiki", f"enwiki-{page_id}", title, sections, stats))
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
    return _collect(_iter_wikitext(lines, prefix))


def _iter_wikitext(lines: Iterable[str], prefix: str) -> Iterator[tuple[str, str, list]]:
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
        rows.extend(_emit_sections(source, doc_id, title, sections, stats))
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


# ---- the loader -------------------------------------------------------------------------------

def _load_enwiki(root: Path | None) -> tuple[list[dict], SectionStats]:
    spec = REGISTRY["enwiki"]
    path = _mirror_path(root, spec, "dump") if root else _download(spec)
    return parse_mediawiki_dump(path)


def _load_news(root: Path | None) -> tuple[list[dict], SectionStats]:
    spec = REGISTRY["news"]
    path = _mirror_path(root, spec, "lines") if root else _download(spec)
    ds = datasets.load_dataset("text", data_files=str(path), split="train")
    stats, rows = SectionStats(), []
    for i, line in enumerate(ds["text"]):
        if line.strip():  # one article per line, a single section without heading
            rows.extend(_emit_sections("news", f"news-{i}", "", [("", [line.strip()])], stats))
    return rows, stats


def _wikitext_lines(root: Path | None, spec: DataSpec, splits: tuple[str, ...], streaming: bool = False):
    """Yield (split, lines) from the Hub config or the mirror text files; same rows either way."""
    for split in splits:
        if root and "parquet" in spec.mirror_files:
            folder = _mirror_path(root, spec, "parquet")
            args = ("parquet",), {"data_files": str(folder / f"{split}-*.parquet"), "split": "train"}
        elif root:
            args = ("text",), {"data_files": str(_mirror_path(root, spec, split)), "split": "train"}
        else:
            args = (spec.hub_id, spec.hub_config), {"split": split}
        ds = _load(spec, root is not None, *args[0], streaming=streaming, **args[1])
        yield split, (row["text"] for row in ds) if streaming else ds["text"]


def _load_wikitext(root: Path | None) -> tuple[list[dict], SectionStats]:
    spec = REGISTRY["wikitext"]
    rows, stats = [], SectionStats()
    for split, lines in _wikitext_lines(root, spec, ("validation", "test")):
        r, s = parse_wikitext_lines(lines, prefix=f"wikitext-{split}")
        rows += r
        for k, v in vars(s).items():
            setattr(stats, k, getattr(stats, k) + v)
    return rows, stats


_TINY_LOADERS = {"enwiki": _load_enwiki, "news": _load_news, "wikitext": _load_wikitext}


def _full_generator(source: str, root: str | None) -> Iterator[dict]:
    """Stream section rows of one full-scale source (used by `IterableDataset.from_generator`)."""
    mirror = Path(root) if root else None
    stats = SectionStats()
    if source == "enwiki":
        spec = REGISTRY["wikipedia-full"]
        if mirror:
            files = str(_mirror_path(mirror, spec, "parquet") / "*.parquet")
            ds = _load(spec, True, "parquet", data_files=files, split="train", streaming=True)
        else:
            ds = _load(spec, False, spec.hub_id, spec.hub_config, split="train", streaming=True)
        for art in ds:
            yield from _emit_sections("enwiki", f"enwiki-{art['id']}", art["title"],
                                      split_plain_article(art["text"]), stats)
    elif source == "wikitext":
        spec = REGISTRY["wikitext-103"]
        for split, lines in _wikitext_lines(mirror, spec, ("train",), streaming=True):
            for doc_id, title, sections in _iter_wikitext(lines, f"wikitext103-{split}"):
                yield from _emit_sections("wikitext", doc_id, title, sections, stats)
    else:  # news has no full-scale counterpart: the small sample is streamed as is
        yield from _TINY_LOADERS[source](mirror)[0]


def load_pretraining_corpus(sources: Iterable[str] = PRETRAINING_SOURCES,
                            data_dir: str | os.PathLike | None = None,
                            full: bool = False) -> Dataset | IterableDataset:
    """The unlabelled pre-training text, one row per article section.

    Columns: `source`, `doc_id`, `title`, `section` ("" for an article's lead), `text`
    (paragraphs joined by "\\n"). With `full=False` (the scaled-down book) the three samples
    of the mirror: `enwiki` (Wikipedia XML export), `news` (Lee corpus), `wikitext`
    (WikiText-2 validation+test). With `full=True` the enwiki and wikitext sources become
    `wikimedia/wikipedia` 20231101.en and WikiText-103 raw, streamed: an `IterableDataset`.
    Per-source counts (kept and dropped sections, words) are logged and stored as JSON in
    `dataset.info.description` (tiny scale only).
    Explained in chapter 1, `notebooks/01_readiness.ipynb`; used in chapters 2 and 3.
    """
    if isinstance(sources, str) or not tuple(sources):
        raise ValueError("sources must be a non-empty list of names, e.g. ('enwiki', 'news', 'wikitext')")
    sources = tuple(sources)
    for s in sources:
        _spec(s, PRETRAINING_SOURCES)
    root = resolve_mirror(data_dir)
    if full:
        parts = [IterableDataset.from_generator(_full_generator, features=SECTION_FEATURES,
                                                gen_kwargs={"source": s, "root": str(root) if root else None})
                 for s in sources]
        return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    rows, report = [], {}
    for s in sources:
        r, stats = _TINY_LOADERS[s](root)
        rows += r
        report[s] = vars(stats)
        logger.info("%s: %d documents -> %d sections, %d words (dropped %d short, %d reference-like)",
                    s, stats.documents, stats.sections, stats.words, stats.dropped_short,
                    stats.dropped_boilerplate)
    info = datasets.DatasetInfo(description=json.dumps(report), features=SECTION_FEATURES)
    return Dataset.from_list(rows, features=SECTION_FEATURES, info=info)


def corpus_summary(corpus: Dataset) -> dict[str, dict[str, int]]:
    """Documents, sections and words per source of a pre-training corpus. Explained in chapter 1."""
    out: dict[str, dict[str, Any]] = {}
    for src, doc, text in zip(corpus["source"], corpus["doc_id"], corpus["text"]):
        d = out.setdefault(src, {"documents": set(), "sections": 0, "words": 0})
        d["documents"].add(doc)
        d["sections"] += 1
        d["words"] += len(text.split())
    return {s: {**d, "documents": len(d["documents"])} for s, d in out.items()}


# --------------------------------------------------------------------------------------------
# BEIR (SciFact)
# --------------------------------------------------------------------------------------------

QRELS_FEATURES = Features({"query-id": Value("string"), "corpus-id": Value("string"),
                           "score": Value("int64")})


@dataclass
class BeirData:
    """A BEIR data set: corpus (`_id`, `title`, `text`), queries (`_id`, `text`) and qrels
    by split -> query id -> doc id -> relevance. Explained in chapter 4, `notebooks/04_finetune.ipynb`."""

    name: str
    corpus: Dataset
    queries: Dataset
    qrels: dict[str, dict[str, dict[str, int]]]

    def queries_for(self, split: str) -> Dataset:
        """Only the queries that have relevance labels in `split` (e.g. 809 train, 300 test)."""
        if split not in self.qrels:
            raise ValueError(f"split must be one of {sorted(self.qrels)}, got {split!r}")
        keep = self.qrels[split]
        return self.queries.filter(lambda ids: [i in keep for i in ids], input_columns="_id",
                                   batched=True)


def _normalise_beir_table(ds: Dataset, required: list[str], where: str) -> Dataset:
    _check_fields(ds.column_names, required, where)
    ds = ds.select_columns(required)
    casts = {c: Value("string") for c in required if ds.features[c] != Value("string")}
    return ds.cast(Features({**ds.features, **casts})) if casts else ds


def _qrels_dict(ds: Dataset, where: str) -> dict[str, dict[str, int]]:
    _check_fields(ds.column_names, ["query-id", "corpus-id", "score"], where)
    out: dict[str, dict[str, int]] = {}
    for q, d, s in zip(ds["query-id"], ds["corpus-id"], ds["score"]):
        out.setdefault(str(q), {})[str(d)] = int(s)
    return out


def load_beir(name: str = "scifact", data_dir: str | os.PathLike | None = None) -> BeirData:
    """A BEIR data set from `BeIR/<name>` (+ `BeIR/<name>-qrels`) or `<mirror>/<name>/`.

    Explained in chapter 4, `notebooks/04_finetune.ipynb`.
    """
    spec = _spec(name, ["scifact"])
    root = resolve_mirror(data_dir)
    if root:
        files = {role: _mirror_path(root, spec, role) for role in spec.mirror_files}
        corpus = datasets.load_dataset("json", data_files=str(files["corpus"]), split="train")
        queries = datasets.load_dataset("json", data_files=str(files["queries"]), split="train")
        qrels = {s: datasets.load_dataset("csv", data_files=str(files[f"qrels/{s}"]), delimiter="\t",
                                          features=QRELS_FEATURES, split="train")
                 for s in ("train", "test")}
        where = {k: str(v) for k, v in files.items()}
    else:
        # A dict of splits: take its only split whatever it is called ("corpus", "queries").
        first = lambda dd: next(iter(dd.values()))  # noqa: E731
        corpus = first(_load(spec, False, spec.hub_id, "corpus"))
        queries = first(_load(spec, False, spec.hub_id, "queries"))
        qd = _load(spec, False, f"{spec.hub_id}-qrels")
        qrels = {s: qd[s] for s in ("train", "test") if s in qd}
        where = {"corpus": f"{spec.hub_id} (corpus)", "queries": f"{spec.hub_id} (queries)",
                 **{f"qrels/{s}": f"{spec.hub_id}-qrels ({s})" for s in qrels}}
    corpus = _normalise_beir_table(corpus, ["_id", "title", "text"], where["corpus"])
    queries = _normalise_beir_table(queries, ["_id", "text"], where["queries"])
    return BeirData(name, corpus, queries,
                    {s: _qrels_dict(ds, where[f"qrels/{s}"]) for s, ds in qrels.items()})


# --------------------------------------------------------------------------------------------
# STS benchmark
# --------------------------------------------------------------------------------------------

STSB_FEATURES = Features({"sentence1": Value("string"), "sentence2": Value("string"),
                          "score": Value("float32")})
_SPLIT_ALIASES = {"dev": "validation", "valid": "validation", "validation": "validation",
                  "train": "train", "test": "test"}


def _normalise_stsb(ds: Dataset, scale: float, where: str) -> Dataset:
    _check_fields(ds.column_names, ["sentence1", "sentence2", "score"], where)
    ds = ds.select_columns(["sentence1", "sentence2", "score"])
    if scale != 1.0:
        ds = ds.map(lambda s: {"score": [x / scale for x in s]}, input_columns="score", batched=True)
    ds = ds.cast(STSB_FEATURES)
    lo, hi = min(ds["score"]), max(ds["score"])
    if lo < 0 or hi > 1 + 1e-6:
        raise SchemaError(f"{where}: scores span [{lo}, {hi}], expected [0, 1] after scaling")
    return ds


def load_stsb(split: str, data_dir: str | os.PathLike | None = None) -> Dataset:
    """STS-b pairs: `sentence1`, `sentence2`, `score` in [0, 1]. Splits train / validation (dev) / test.

    The mirror's CSV has no header and scores in [0, 5] (divided by 5 here); the Hub copy
    `sentence-transformers/stsb` is already in [0, 1]. Explained in chapter 7.
    """
    if split not in _SPLIT_ALIASES:
        raise ValueError(f"split must be one of train, validation (or dev), test; got {split!r}")
    split = _SPLIT_ALIASES[split]
    spec = REGISTRY["stsb"]
    root = resolve_mirror(data_dir)
    if root:
        path = _mirror_path(root, spec, split)
        ds = datasets.load_dataset(
            "csv", data_files=str(path), split="train", column_names=["sentence1", "sentence2", "score"],
            features=Features({"sentence1": Value("string"), "sentence2": Value("string"),
                               "score": Value("float64")}),
            na_filter=False)  # a sentence "NA" or "null" must stay text
        return _normalise_stsb(ds, 5.0, str(path))
    ds = _load(spec, False, spec.hub_id, split=split)
    return _normalise_stsb(ds, 1.0, f"{spec.hub_id} ({split})")


# --------------------------------------------------------------------------------------------
# Tevatron training data
# --------------------------------------------------------------------------------------------

TEVATRON_FIELDS = ("query_id", "query", "positive_passages", "negative_passages")
PASSAGE_FIELDS = ("docid", "title", "text")
PASSAGE_FEATURE = [{"docid": Value("string"), "title": Value("string"), "text": Value("string")}]


def _tevatron_spec(name: str) -> DataSpec:
    full = name if name.startswith("Tevatron/") else f"Tevatron/{name}"
    if full not in REGISTRY:
        raise ValueError(f"unknown Tevatron data set {name!r}; known: {', '.join(TEVATRON_NAMES)}")
    return REGISTRY[full]


def _passage_keys(feature: Any) -> set[str] | None:
    """Field names inside a list-of-passages feature, or None when it cannot tell (all empty)."""
    inner = getattr(feature, "feature", feature[0] if isinstance(feature, list) and feature else None)
    return set(inner) if isinstance(inner, dict) else None


def validate_tevatron(dataset: Dataset | IterableDataset, source: str = "the data set",
                      require_passages: bool = True) -> Dataset | IterableDataset:
    """Check Tevatron's training schema; raise SchemaError naming the first missing field.

    Rows: `query_id`, `query`, `positive_passages`, `negative_passages`, each passage a dict
    with `docid`, `title`, `text`. Returns the data set unchanged. Explained in chapter 4.
    """
    required = TEVATRON_FIELDS if require_passages else TEVATRON_FIELDS[:2]
    if dataset.features is None:  # streamed without declared features: check one row
        first = next(iter(dataset), None)
        if first is None:
            return dataset
        _check_fields(first, required, source)
        for col in ("positive_passages", "negative_passages"):
            if first.get(col):
                _check_fields(first[col][0], PASSAGE_FIELDS, f"{source}, {col}[*]")
        return dataset
    _check_fields(dataset.features, required, source)
    for col in ("positive_passages", "negative_passages"):
        keys = _passage_keys(dataset.features[col]) if col in dataset.features else None
        if keys is not None:
            _check_fields(keys, PASSAGE_FIELDS, f"{source}, {col}[*]")
    return dataset


def _normalise_tevatron(ds: Dataset, where: str, require_passages: bool) -> Dataset:
    validate_tevatron(ds, where, require_passages)
    casts = {c: Value("string") for c in ("query_id", "query") if ds.features[c] != Value("string")}
    for col in ("positive_passages", "negative_passages"):
        # Empty lists everywhere are inferred as list<null>; give every file the same schema.
        if col in ds.features and _passage_keys(ds.features[col]) in (None, set(PASSAGE_FIELDS)):
            if ds.features[col] != datasets.List(PASSAGE_FEATURE[0]):
                casts[col] = datasets.List(PASSAGE_FEATURE[0])
    return ds.cast(Features({**ds.features, **casts})) if casts else ds


def _tevatron_files(spec: DataSpec, role: str, root: Path | None) -> str:
    if root:
        return str(_mirror_path(root, spec, role))
    if role not in spec.hub_files:
        raise ValueError(f"{spec.name} has no {role!r} on the Hub; splits: "
                         f"{[r for r in spec.hub_files if r != 'corpus']}")
    hub_file = spec.hub_files[role]
    repo, _, path = hub_file.rpartition(":")
    return f"hf://datasets/{repo or spec.hub_id}/{path}"


def load_tevatron(name: str, split: str = "train", data_dir: str | os.PathLike | None = None) -> Dataset:
    """Tevatron training data (`Tevatron/msmarco-passage`, `Tevatron/wikipedia-nq`,
    `Tevatron/scifact`): `query_id`, `query`, `positive_passages`, `negative_passages`
    (extra columns such as NQ's `answers` are kept). Mirror: `<mirror>/<name>/<split>.jsonl`.
    Evaluation splits may lack passages. Explained in chapter 4, `notebooks/04_finetune.ipynb`.
    """
    spec = _tevatron_spec(name)
    if split == "corpus" or split not in {**spec.mirror_files, **spec.hub_files}:
        splits = [r for r in spec.mirror_files if r != "corpus"]
        raise ValueError(f"split must be one of {splits} for {spec.name}, got {split!r}")
    root = resolve_mirror(data_dir)
    files = _tevatron_files(spec, split, root)
    ds = _load(spec, root is not None, "json", data_files=files, split="train")
    return _normalise_tevatron(ds, files, require_passages=(split == "train"))


def load_tevatron_corpus(name: str, data_dir: str | os.PathLike | None = None) -> Dataset:
    """The passage collection of a Tevatron data set (`<name>-corpus` on the Hub): `docid`,
    `title`, `text`. Mirror: `<mirror>/<name>/corpus.jsonl`; a BEIR-style `_id` column is
    accepted as `docid`. Explained in chapter 4."""
    spec = _tevatron_spec(name)
    root = resolve_mirror(data_dir)
    files = _tevatron_files(spec, "corpus", root)
    ds = _load(spec, root is not None, "json", data_files=files, split="train")
    if "docid" not in ds.column_names and "_id" in ds.column_names:
        ds = ds.rename_column("_id", "docid")
    _check_fields(ds.column_names, PASSAGE_FIELDS, files)
    ds = ds.select_columns(list(PASSAGE_FIELDS))
    return ds.cast(Features({k: Value("string") for k in PASSAGE_FIELDS}))
