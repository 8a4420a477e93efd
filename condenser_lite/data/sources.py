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

* Pre-training rows are *sections* of articles, cut and cleaned by `data/wikitext.py` (which also says why
  WikiText's `<unk>` becomes `[UNK]`); kept and dropped counts are logged and stored in `dataset.info.description`.
* The Wikipedia and news samples of the scaled-down corpus are not on the Hub; without a mirror
  they are downloaded from the gensim repository on GitHub, where they are test data.
* `full=True` streams the full-scale corpora (`wikimedia/wikipedia` 20231101.en, `Salesforce/wikitext`
  wikitext-103-raw-v1) and returns an `IterableDataset`. Their mirror is the Hub's own parquet files:
  `<mirror>/wikipedia-20231101.en/*.parquet` and `<mirror>/wikitext-103-raw-v1/train-*.parquet`.
* Tevatron's training data (MS MARCO, NQ) are read by `data/tevatron.py` through the same helpers.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import datasets
from datasets import Dataset, Features, IterableDataset, Value

from ..utils.cache import content_id
from ..utils.errors import ConfigError, DataSourceError, SchemaError
from .wikitext import (
    SectionStats,
    emit_sections,
    parse_mediawiki_dump,
    parse_wikitext_lines,
    split_plain_article,
    wikitext_articles,
)

logger = logging.getLogger(__name__)

DATA_ENV = "CONDENSER_LITE_DATA"
_GENSIM_DATA = "https://raw.githubusercontent.com/piskvorky/gensim/4.3.3/gensim/test/test_data"


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
    # Tevatron's repos are script-based, which `datasets` 4.0 and later does not run: we read their
    # JSON files directly (hf://), with the same "json" builder that reads the mirror files.
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
BEIR_HUB = "BeIR"  # BeIR/<name> (configs corpus, queries) and BeIR/<name>-qrels (one split per file)
TEVATRON_NAMES = tuple(k for k in REGISTRY if k.startswith("Tevatron/"))


def _spec(name: str, known: Iterable[str] | None = None) -> DataSpec:
    known = list(known) if known is not None else list(REGISTRY)
    if name not in known:
        raise ConfigError(f"unknown data set {name!r}; known data sets: {', '.join(known)}")
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


def mirror_file(root: Path, spec: DataSpec, role: str) -> Path:
    """The mirror file of `spec` for `role`, or a DataSourceError naming it and the expected
    layout. Explained in chapter 1, `notebooks/01_readiness.ipynb`."""
    path = root / spec.mirror_files[role]
    if not path.exists():
        raise DataSourceError(
            f"data set {spec.name!r}: the mirror {root} lacks {path}.\n"
            f"Expected layout for {spec.name!r}:\n{_layout(spec)}\n"
            f"Fix the mirror, point --data-dir (data_dir= in Python) or ${DATA_ENV} at a complete one, or leave "
            f"both unset to download {spec.hub_id}{'' if '://' in spec.hub_id else ' from the Hugging Face Hub'}."
        )
    return path


def data_id(names: Iterable[str], data_dir: str | os.PathLike | None = None,
            roles: Iterable[str] | None = None) -> dict[str, Any]:
    """What the data sets ``names`` are read from, by content, as part of a cache key (chapter 1).

    From a mirror: a hash of each mirror file (of ``roles`` only, when given; None for a missing
    file, which its loader reports); from the Hub: the id and config. A name that is a local file
    or folder is hashed itself, and so is an unregistered BEIR name's mirror folder
    (``<mirror>/<name>/``, where ``load_beir`` reads it). A mirror folder that does not exist
    raises ``DataSourceError`` here, so a cache is never reused for data that cannot be read."""
    root = resolve_mirror(data_dir)
    wanted = None if roles is None else set(roles)
    out: dict[str, Any] = {}
    for name in names:
        spec = REGISTRY.get(name)
        if spec is None:
            path = Path(name).expanduser()
            beir_folder = None if root is None else root / str(name).removeprefix(f"{BEIR_HUB}/")
            out[name] = content_id(path) if path.exists() else \
                content_id(beir_folder) if beir_folder is not None and beir_folder.is_dir() else name
        elif root is None:
            out[name] = [spec.hub_id, spec.hub_config]
        else:
            out[name] = {rel: content_id(root / rel) for role, rel in spec.mirror_files.items()
                         if wanted is None or role in wanted}
    return out


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


def read_dataset(spec: DataSpec, from_mirror: bool, *args: Any, **kwargs: Any) -> Any:
    """`datasets.load_dataset(*args, **kwargs)` for `spec`; Hub failures become a DataSourceError
    that says how to use a mirror, and so does a mirror file that is empty, cut short, not in
    its format or not UTF-8 (naming the file and the parser's reason, or the line).
    Explained in chapter 1, `notebooks/01_readiness.ipynb`."""
    if not from_mirror:
        return _from_hub(spec, datasets.load_dataset, *args, **kwargs)
    files = kwargs.get("data_files")
    where = files if isinstance(files, str) else str(files)
    if isinstance(files, str) and Path(files).is_file() and Path(files).stat().st_size == 0:
        raise DataSourceError(f"data set {spec.name!r}: {files} is empty; replace it with a complete copy")
    try:
        ds = datasets.load_dataset(*args, **kwargs)
    except Exception as err:  # datasets wraps the parser's reason several layers down
        reason = _reason(err)
        fields = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", reason)
        if fields and where.endswith(".tsv"):  # one line with a tab too many: most often an id holding a tab
            want, line, got = fields.groups()
            raise DataSourceError(f"data set {spec.name!r}: {where}:{line} has {got} tab-separated fields where the "
                                  f"file's first lines have {want}; an id there holds a tab, which a TSV file cannot "
                                  "hold: rename that id (in the corpus, queries and qrels alike)") from err
        raise DataSourceError(f"data set {spec.name!r}: cannot read {where} ({reason}); the file is cut "
                              "short or not in its format: replace it with a complete copy") from err
    table = getattr(getattr(ds, "data", None), "table", None)
    if table is not None:
        try:
            table.validate(full=True)  # pyarrow's JSON reader lets invalid UTF-8 through
        except Exception as err:
            if "UTF8" not in str(err):
                raise
            raise DataSourceError(f"data set {spec.name!r}: {bad_utf8_line(where)} is not UTF-8 text ({err}); "
                                  "re-encode the file as UTF-8") from err
    return ds


def _reason(err: BaseException) -> str:
    """The most specific message in an exception's chain (the parser's, not datasets' wrapper's)."""
    seen, messages = set(), []
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if str(err).strip():
            messages.append(f"{type(err).__name__}: {str(err).strip().splitlines()[0]}")
        err = err.__cause__ or err.__context__
    specific = [m for m in messages if "error occurred while generating" not in m]
    return (specific or messages or ["no reason given"])[0]


def bad_utf8_line(path: str) -> str:
    """``path:line`` of the first line that is not UTF-8 (``path`` when none is found)."""
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(f, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return f"{path}:{n}"
    except OSError:
        pass
    return path


def _download(spec: DataSpec) -> Path:
    """Fetch a URL-hosted sample into the `datasets` download cache."""
    dm = datasets.DownloadManager(dataset_name=spec.name)
    return Path(_from_hub(spec, dm.download, spec.hub_id))


def check_fields(columns: Iterable[str], required: Iterable[str], where: str) -> None:
    """Raise a SchemaError naming the first of `required` missing from `columns` (chapter 1)."""
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




# ---- the loader -------------------------------------------------------------------------------

def _load_enwiki(root: Path | None) -> tuple[list[dict], SectionStats]:
    spec = REGISTRY["enwiki"]
    path = mirror_file(root, spec, "dump") if root else _download(spec)
    return parse_mediawiki_dump(path)


def _load_news(root: Path | None) -> tuple[list[dict], SectionStats]:
    spec = REGISTRY["news"]
    path = mirror_file(root, spec, "lines") if root else _download(spec)
    ds = datasets.load_dataset("text", data_files=str(path), split="train")
    stats, rows = SectionStats(), []
    for i, line in enumerate(ds["text"]):
        if line.strip():  # one article per line, a single section without heading
            rows.extend(emit_sections("news", f"news-{i}", "", [("", [line.strip()])], stats))
    return rows, stats


def _wikitext_lines(root: Path | None, spec: DataSpec, splits: tuple[str, ...], streaming: bool = False):
    """Yield (split, lines) from the Hub config or the mirror text files; same rows either way."""
    for split in splits:
        if root and "parquet" in spec.mirror_files:
            folder = mirror_file(root, spec, "parquet")
            args = ("parquet",), {"data_files": str(folder / f"{split}-*.parquet"), "split": "train"}
        elif root:
            args = ("text",), {"data_files": str(mirror_file(root, spec, split)), "split": "train"}
        else:
            args = (spec.hub_id, spec.hub_config), {"split": split}
        ds = read_dataset(spec, root is not None, *args[0], streaming=streaming, **args[1])
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
            files = str(mirror_file(mirror, spec, "parquet") / "*.parquet")
            ds = read_dataset(spec, True, "parquet", data_files=files, split="train", streaming=True)
        else:
            ds = read_dataset(spec, False, spec.hub_id, spec.hub_config, split="train", streaming=True)
        for art in ds:
            yield from emit_sections("enwiki", f"enwiki-{art['id']}", art["title"],
                                      split_plain_article(art["text"]), stats)
    elif source == "wikitext":
        spec = REGISTRY["wikitext-103"]
        for split, lines in _wikitext_lines(mirror, spec, ("train",), streaming=True):
            for doc_id, title, sections in wikitext_articles(lines, f"wikitext103-{split}"):
                yield from emit_sections("wikitext", doc_id, title, sections, stats)
    else:  # news has no full-scale counterpart: the small sample is streamed as is
        yield from _TINY_LOADERS[source](mirror)[0]


_REPORTED: set[tuple] = set()  # the loading summaries this process has logged


def _report_once(source: str, root: Path | None, stats: SectionStats) -> None:
    """Log one source's kept and dropped counts the first time this process loads it from
    ``root``: a run loads the corpus once per stage and for the tokenizer and the held-out set,
    and the counts are the same each time (every load stores them in ``info.description``)."""
    key = (source, str(root), tuple(sorted(vars(stats).items())))
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    logger.info("%s: %d documents -> %d sections, %d words (dropped %d short, %d reference-like)",
                source, stats.documents, stats.sections, stats.words, stats.dropped_short,
                stats.dropped_boilerplate)


def load_pretraining_corpus(sources: Iterable[str] = PRETRAINING_SOURCES,
                            data_dir: str | os.PathLike | None = None,
                            full: bool = False) -> Dataset | IterableDataset:
    """The unlabelled pre-training text, one row per article section.

    Columns: `source`, `doc_id`, `title`, `section` ("" for an article's lead), `text`
    (paragraphs joined by "\\n"). With `full=False` (the scaled-down book) the three samples
    of the mirror: `enwiki` (Wikipedia XML export), `news` (Lee corpus), `wikitext`
    (WikiText-2 validation+test). With `full=True` the enwiki and wikitext sources become
    `wikimedia/wikipedia` 20231101.en and WikiText-103 raw, streamed: an `IterableDataset`.
    Per-source counts (kept and dropped sections, words) are logged once per process (the first
    load from each mirror) and stored as JSON in `dataset.info.description` (tiny scale only).
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
        _report_once(s, root, stats)
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
# STS benchmark
# --------------------------------------------------------------------------------------------

STSB_FEATURES = Features({"sentence1": Value("string"), "sentence2": Value("string"),
                          "score": Value("float32")})
_SPLIT_ALIASES = {"dev": "validation", "valid": "validation", "validation": "validation",
                  "train": "train", "test": "test"}


def _normalise_stsb(ds: Dataset, scale: float, where: str) -> Dataset:
    check_fields(ds.column_names, ["sentence1", "sentence2", "score"], where)
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
        path = mirror_file(root, spec, split)
        ds = datasets.load_dataset(
            "csv", data_files=str(path), split="train", column_names=["sentence1", "sentence2", "score"],
            features=Features({"sentence1": Value("string"), "sentence2": Value("string"),
                               "score": Value("float64")}),
            na_filter=False)  # a sentence "NA" or "null" must stay text
        return _normalise_stsb(ds, 5.0, str(path))
    ds = read_dataset(spec, False, spec.hub_id, split=split)
    return _normalise_stsb(ds, 1.0, f"{spec.hub_id} ({split})")
