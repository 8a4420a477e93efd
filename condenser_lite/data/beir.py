"""Retrieval data in BEIR's layout: any BEIR set by name, any folder in that layout (your own
data), documents to pre-train on, and the columns of a corpus or query set whatever its layout
(BEIR, Tevatron, a list of dicts, a dict).

A name is read through `data`'s one code path (the Hub's ``BeIR/<name>`` or ``<mirror>/<name>/``);
a path is a folder holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
Explained in chapter 4, `notebooks/04_finetune.ipynb` (and chapter 3 for `load_documents`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import datasets
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, Features, Value

from ..utils.errors import DataSourceError, SchemaError
from .sources import BEIR_HUB, DATA_ENV, REGISTRY, DataSpec, bad_utf8_line, check_fields, read_dataset, resolve_mirror

# --------------------------------------------------------------------------------------------
# BEIR: any BEIR data set by name, or any folder in BEIR's format
# --------------------------------------------------------------------------------------------

QRELS_FEATURES = Features({"query-id": Value("string"), "corpus-id": Value("string"),
                           "score": Value("int64")})
BEIR_LAYOUT = ("corpus.jsonl (_id, title, text), queries.jsonl (_id, text), "
               "qrels/<split>.tsv (query-id, corpus-id, score)")


@dataclass
class BeirData:
    """A BEIR data set: corpus (`_id`, `title`, `text`), queries (`_id`, `text`) and qrels
    by split -> query id -> doc id -> relevance; ``answers`` (split -> query id -> answer
    strings) where the data set has them (NQ, for DPR's top-k accuracy). Explained in chapter 4,
    `notebooks/04_finetune.ipynb`."""

    name: str
    corpus: Dataset
    queries: Dataset
    qrels: dict[str, dict[str, dict[str, int]]]
    answers: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def split_qrels(self, split: str) -> dict[str, dict[str, int]]:
        """The qrels of ``split``, or a SchemaError naming the splits there are."""
        if split not in self.qrels:
            raise SchemaError(f"data set {self.name!r} has no {split!r} split (qrels for: {sorted(self.qrels)}); "
                              f"pass one of those with --split / split=, or add qrels/{split}.tsv")
        return self.qrels[split]

    def queries_for(self, split: str) -> Dataset:
        """Only the queries that have relevance labels in `split` (e.g. 809 train, 300 test)."""
        keep = self.split_qrels(split)
        return self.queries.filter(lambda ids: [i in keep for i in ids], input_columns="_id",
                                   batched=True)


def _normalise_beir_table(ds: Dataset, required: list[str], where: str) -> Dataset:
    check_fields(ds.column_names, required, where)
    ds = ds.select_columns(required)
    for c in required:
        if not isinstance(ds.features[c], Value):
            # a column mixing types (ids 12 and "12a") is read as JSON values, and a cast would
            # keep their JSON text ('"12a"'); the value itself, as text, is what the qrels name
            values = [None if v is None else str(v) for v in ds[c]]
            ds = ds.remove_columns(c).add_column(c, values, feature=Value("string"))
    ds = ds.select_columns(required)  # the columns' order again
    casts = {c: Value("string") for c in required if ds.features[c] != Value("string")}
    return ds.cast(Features({**ds.features, **casts})) if casts else ds


def _check_ids(ds: Dataset, where: str, kind: str) -> None:
    """Refuse a table whose ``_id`` is missing, empty or repeated, naming the first such row: a
    repeated document id would be searched as one document (a run holds it once)."""
    ids = ds.data.table.column("_id")
    blank = pc.or_kleene(pc.is_null(ids), pc.equal(ids, "")).fill_null(True)
    if pc.any(blank).as_py():
        row = pc.indices_nonzero(blank)[0].as_py()
        raise SchemaError(f"{where}:{row + 1}: a {kind} without an _id (row {row}); give every {kind} a "
                          "non-empty, unique _id")
    if pc.count_distinct(ids).as_py() < len(ids):
        counts = pc.value_counts(ids)
        first = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
        rows = pc.indices_nonzero(pc.equal(ids, first)).to_pylist()
        raise SchemaError(f"{where}: {kind} id {first!r} appears {len(rows)} times (lines {rows[0] + 1} and "
                          f"{rows[1] + 1}); ids must be unique: give each {kind} its own _id, or drop the copies")


def _qrels_layout(path: Path) -> dict[str, Any]:
    """How to read a qrels file, from its first line: BEIR's header (``query-id``, ``corpus-id``,
    ``score``; other columns are ignored), or no header, rows of ``query-id corpus-id score`` or
    TREC's ``query-id iteration corpus-id score``, tab-separated."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:  # -sig: a byte-order mark
        first = next(csv.reader([f.readline().rstrip("\r\n")], delimiter="\t"), [])
    if not first or "query-id" in first:
        return {"features": QRELS_FEATURES}
    if first[-1].strip().lstrip("-").isdigit() and len(first) in (3, 4):  # a data row: no header
        names = ["query-id", *(["iteration"] if len(first) == 4 else []), "corpus-id", "score"]
        return {"column_names": names,
                "features": Features({n: QRELS_FEATURES.get(n, Value("string")) for n in names})}
    raise SchemaError(f"{path}:1: {chr(9).join(first)!r} is neither BEIR's header 'query-id<TAB>corpus-id<TAB>"
                      "score' nor a row 'query-id<TAB>corpus-id<TAB>score' (or TREC's 'query-id<TAB>0<TAB>corpus-id"
                      "<TAB>score'); rewrite the file tab-separated in one of those layouts")


def _qrels_dict(ds: Dataset, where: str) -> dict[str, dict[str, int]]:
    check_fields(ds.column_names, ["query-id", "corpus-id", "score"], where)
    out: dict[str, dict[str, int]] = {}
    for q, d, s in zip(ds["query-id"], ds["corpus-id"], ds["score"]):
        out.setdefault(str(q), {})[str(d)] = int(s)
    return out


def is_path(source: str | os.PathLike) -> bool:
    """Whether a data argument names a file or folder rather than a registered name: it exists,
    or it looks like a path (``/``, ``./``, ``~``). Explained in chapter 4."""
    text = str(source)
    return isinstance(source, os.PathLike) or Path(text).expanduser().exists() or \
        (os.sep in text and not text.startswith(f"{BEIR_HUB}/")) or text.startswith((".", "~"))


def _jsonl(folder: Path, stem: str) -> Path | None:
    """``folder/<stem>.jsonl`` or its gzipped copy, whichever exists."""
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _beir_folder_files(folder: Path, hint: str) -> dict[str, Path]:
    """The files of a BEIR-format folder by role (``corpus``, ``queries``, ``qrels/<split>``)."""
    if not folder.is_dir():
        raise DataSourceError(f"{folder} is not a folder; {hint}")
    files = {"corpus": _jsonl(folder, "corpus"), "queries": _jsonl(folder, "queries")}
    files.update({f"qrels/{p.stem}": p for p in sorted((folder / "qrels").glob("*.tsv"))})
    missing = [f"{role}.jsonl" for role in ("corpus", "queries") if files[role] is None]
    if not any(role.startswith("qrels/") for role in files):
        missing.append("qrels/<split>.tsv")
    if missing:
        raise DataSourceError(f"the BEIR folder {folder} lacks {', '.join(missing)}. A BEIR folder holds "
                              f"{BEIR_LAYOUT}; {hint}")
    return files  # type: ignore[return-value]


@contextlib.contextmanager
def _quiet_reads() -> Iterator[None]:
    """Hide datasets' ``Generating train split`` bar, drawn once per file of a folder, unless the
    library's logger is at DEBUG (``--debug``) or ``HF_DATASETS_DISABLE_PROGRESS_BARS=0`` asks
    for it; bars drawn outside the reads (the library's own) are left as they were."""
    if (datasets.are_progress_bars_disabled() or datasets.config.HF_DATASETS_DISABLE_PROGRESS_BARS is False
            or logging.getLogger("condenser_lite").isEnabledFor(logging.DEBUG)):
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def _first_bad_json_line(path: Path) -> SchemaError | None:
    """The first line of a JSON-lines file that is JSON but not an object (a list, a string), as
    an error naming it; None otherwise (a line that is not JSON at all is the parser's to name).
    Read only after a failed load."""
    import gzip

    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8-sig", errors="replace") as f:
        for n, line in enumerate(f, start=1):
            try:
                value = json.loads(line) if line.strip() else {}
            except ValueError:
                return None
            if not isinstance(value, dict):
                shown = line.strip() if len(line.strip()) <= 40 else line.strip()[:37] + "..."
                return SchemaError(f"{path}:{n} is not a JSON object ({shown!r}); write one object a line, such as "
                                   '{"text": "...", "title": "..."}')
    return None


def _not_a_parse_report(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Failed to load JSON")


def _read_json_lines(spec: DataSpec, path: Path) -> Dataset:
    """A JSON-lines file through `read_dataset`, quietly; a line that is not a JSON object is named.
    datasets' own log line about a parse failure is dropped: the error raised here names it."""
    report = logging.getLogger("datasets.packaged_modules.json.json")
    report.addFilter(_not_a_parse_report)
    try:
        with _quiet_reads():
            return read_dataset(spec, True, "json", data_files=str(path), split="train")
    except DataSourceError as err:
        bad = _first_bad_json_line(path) if path.is_file() and path.stat().st_size else None
        if bad is None:
            raise
        raise bad from err
    finally:
        report.removeFilter(_not_a_parse_report)


def _read_beir_folder(spec: DataSpec, folder: Path,
                      hint: str) -> tuple[Dataset, Dataset, dict[str, Dataset], dict[str, str]]:
    """A BEIR folder's tables, each file read through `read_dataset` (so an empty, cut-short or
    non-UTF-8 file is a DataSourceError naming it, and a line that is not a JSON object a
    SchemaError naming the line)."""
    files = _beir_folder_files(folder, hint)
    corpus = _read_json_lines(spec, files["corpus"])
    queries = _read_json_lines(spec, files["queries"])
    with _quiet_reads():
        qrels = {role.split("/", 1)[1]: read_dataset(spec, True, "csv", data_files=str(path), delimiter="\t",
                                                     split="train", **_qrels_layout(path))
                 for role, path in files.items() if role.startswith("qrels/")}
    return corpus, queries, qrels, {k: str(v) for k, v in files.items()}


def load_beir(name: str | os.PathLike = "scifact", data_dir: str | os.PathLike | None = None) -> BeirData:
    """Any BEIR data set: a name (``scifact``, ``nfcorpus``, ``fiqa``, ... read from
    ``BeIR/<name>`` + ``BeIR/<name>-qrels`` on the Hub, or from ``<mirror>/<name>/``), or the path
    of a folder in BEIR's format (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``: your
    own data). Every qrels split found is loaded. Explained in chapter 4, `notebooks/04_finetune.ipynb`.
    """
    if is_path(name):
        folder = Path(name).expanduser().resolve()
        spec = DataSpec(folder.name, str(folder), {}, description=f"BEIR folder {folder}")
        corpus, queries, qrels, where = _read_beir_folder(
            spec, folder, "write your data in that layout (see README, 'Adapt to your own corpus')")
        label = folder.name
    else:
        label = str(name).removeprefix(f"{BEIR_HUB}/")
        if not label or any(c.isspace() for c in label):
            raise ValueError(f"load_beir: {name!r} is neither a BEIR name (e.g. 'scifact') nor a folder path")
        hub_id = f"{BEIR_HUB}/{label}"
        spec = REGISTRY.get(label) or DataSpec(label, hub_id, {}, description=f"BEIR {label}")
        root = resolve_mirror(data_dir)
        if root:
            hint = (f"fix the mirror, point data_dir= / ${DATA_ENV} at one that has {label}/, "
                    f"or unset ${DATA_ENV} to download {hub_id} from the Hugging Face Hub.")
            if not (root / label).is_dir():
                raise DataSourceError(f"unknown data set {label!r}: {root / label} is not a folder; {hint}")
            corpus, queries, qrels, where = _read_beir_folder(spec, root / label, hint)
        else:
            # A dict of splits: take its only split whatever it is called ("corpus", "queries").
            first = lambda dd: next(iter(dd.values()))  # noqa: E731
            corpus = first(read_dataset(spec, False, hub_id, "corpus"))
            queries = first(read_dataset(spec, False, hub_id, "queries"))
            qd = read_dataset(spec, False, f"{hub_id}-qrels")
            qrels = dict(qd)
            where = {"corpus": f"{hub_id} (corpus)", "queries": f"{hub_id} (queries)",
                     **{f"qrels/{s}": f"{hub_id}-qrels ({s})" for s in qrels}}
    corpus = _normalise_beir_table(corpus, ["_id", "title", "text"], where["corpus"])
    queries = _normalise_beir_table(queries, ["_id", "text"], where["queries"])
    _check_ids(corpus, where["corpus"], "document")
    _check_ids(queries, where["queries"], "query")
    return BeirData(label, corpus, queries,
                    {s: _qrels_dict(ds, where[f"qrels/{s}"]) for s, ds in qrels.items()})


def load_documents(source: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Dataset:
    """Documents to pre-train on (``_id``, ``title``, ``text``) from a BEIR name, a BEIR folder,
    a JSON-lines file (rows with ``text``; ``title`` and ``_id``/``docid`` optional) or a plain
    text file with one document per line (blank lines skipped). coCondenser's target corpus
    (``pretrain --corpus``). Explained in chapter 3, `notebooks/03_cocondenser.ipynb`.
    """
    if not is_path(source):
        return load_beir(source, data_dir=data_dir).corpus
    path = Path(source).expanduser().resolve()
    if path.is_dir():
        found = _jsonl(path, "corpus")
        if found is None:
            raise DataSourceError(f"the folder {path} has no corpus.jsonl; pass a BEIR folder, a .jsonl "
                                  "file of documents or a text file with one document per line")
        path = found
    if not path.is_file():
        raise DataSourceError(f"corpus {path} does not exist; pass a BEIR folder, a .jsonl file of documents "
                              "or a text file with one document per line")
    if path.name.endswith((".jsonl", ".jsonl.gz", ".json")):
        spec = DataSpec(path.name, str(path), {}, description=f"documents in {path}")
        ds = _read_json_lines(spec, path)
        check_fields(ds.column_names, ["text"], str(path))
        id_col = "_id" if "_id" in ds.column_names else "docid" if "docid" in ds.column_names else None
        ids = [str(i) if x is None else str(x) for i, x in enumerate(ds[id_col] if id_col else [None] * len(ds))]
        titles = _strings(ds["title"], path, "title") if "title" in ds.column_names else [""] * len(ds)
        texts = _strings(ds["text"], path, "text")
    else:
        if path.suffix.lower() in (".csv", ".tsv", ".parquet", ".gz", ".zip"):  # a table would train on its ids and header
            raise SchemaError(f"corpus {path}: a {path.suffix} file is read as one document per line; give a .jsonl of "
                              "documents ({\"text\": ...}), a BEIR folder or a plain text file")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise DataSourceError(f"corpus {bad_utf8_line(str(path))} is not UTF-8 text ({err}); "
                                  "re-encode the file as UTF-8") from err
        texts = [line.strip() for line in lines if line.strip()]
        ids, titles = [str(i) for i in range(len(texts))], [""] * len(texts)
    if not texts:
        raise SchemaError(f"corpus {path} holds no document; write one document per line (or per JSON row)")
    _check_texts(ids, titles, texts, use="pre-trained on")
    return Dataset.from_dict({"_id": ids, "title": titles, "text": texts})


def _strings(values, path: Path, field: str) -> list[str]:
    """A corpus file's ``field`` as text, a missing one as ""; a list, number or object there is
    refused, naming its row: its Python text (brackets, quotes) is not the document."""
    bad = next((i for i, v in enumerate(values) if v is not None and not isinstance(v, str)), None)
    if bad is not None:
        raise SchemaError(f"{path}:{bad + 1}: {field!r} is a {type(values[bad]).__name__}, not text; write each "
                          f"document's {field} as one string (join a list of paragraphs first)")
    return [v or "" for v in values]


# --------------------------------------------------------------------------------------------
# Columns of a corpus or a query set, whatever its layout
# --------------------------------------------------------------------------------------------


def column_names(data: Any) -> list[str]:
    """Column names of a `datasets.Dataset` or of a list of dicts (its first row's keys). Chapter 4."""
    names = getattr(data, "column_names", None)
    if names is None and isinstance(data, Sequence) and len(data) and isinstance(data[0], Mapping):
        names = list(data[0].keys())
    return list(names or [])


def corpus_columns(corpus: Any, lazy: bool = False) -> tuple[list[str], Sequence[str], Sequence[str]]:
    """(ids, titles, texts) of a corpus given as a BEIR ``Dataset[_id, title, text]``, a Tevatron
    ``Dataset[docid, title, text]``, a list of such dicts, or ``{id: text}`` / ``{id: {title, text}}``.
    With ``lazy`` a ``Dataset``'s titles and texts stay columns read on access (slices are lists),
    so encoding 21M passages never holds them all as Python strings. Chapter 4."""
    if isinstance(corpus, Mapping):
        ids = [str(k) for k in corpus]
        vals = list(corpus.values())
        if vals and isinstance(vals[0], Mapping):
            return _check_texts(ids, [str(v.get("title") or "") for v in vals], [str(v.get("text") or "") for v in vals])
        return _check_texts(ids, [""] * len(ids), [str(v) for v in vals])
    names = column_names(corpus)
    id_col = "_id" if "_id" in names else "docid" if "docid" in names else None
    if id_col is None or "text" not in names:
        raise SchemaError(
            f"corpus needs an id column ('_id' as in BEIR or 'docid' as in Tevatron) and 'text'; got columns {names}"
        )
    if hasattr(corpus, "column_names"):  # datasets.Dataset: columnar access is fast
        ids = [str(x) for x in corpus[id_col]]
        if lazy and ids:
            titles = corpus["title"] if "title" in names else [""] * len(ids)
            empty = _blank_rows(corpus)
            _report_missing_texts(ids, empty, [str(titles[i] or "") for i in empty], len(ids))
            return ids, titles, corpus["text"]
        texts = [str(x or "") for x in corpus["text"]]
        titles = [str(x or "") for x in corpus["title"]] if "title" in names else [""] * len(ids)
    else:
        ids = [str(r[id_col]) for r in corpus]
        texts = [str(r.get("text") or "") for r in corpus]
        titles = [str(r.get("title") or "") for r in corpus]
    if not ids:
        raise SchemaError("corpus is empty")
    return _check_texts(ids, titles, texts)


MAX_MISSING_TEXT = 0.5  # share of documents without text above which a corpus is refused


def _check_texts(ids: list[str], titles: list[str], texts: list[str],
                 use: str = "encoded from") -> tuple[list[str], list[str], list[str]]:
    """Say how many documents have no text, and which (their title alone gets ``use``d); refuse a
    corpus where most have none (the text is in another field)."""
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    _report_missing_texts(ids, empty, [titles[i] for i in empty], len(texts), use)
    return ids, titles, texts


def _blank_rows(corpus: Dataset) -> list[int]:
    """Rows of a ``Dataset`` whose ``text`` is missing (no key, null) or blank, read column-wise
    from Arrow, so a corpus of millions is checked without a Python string per passage."""
    column = corpus.with_format("arrow")["text"]  # a selection's rows, in its order
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        try:
            column = pc.cast(column, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # lists, objects: as text, row by row
            return [i for i, t in enumerate(corpus["text"]) if not str(t or "").strip()]
    blank = pc.or_kleene(pc.equal(pc.utf8_length(column), 0), pc.utf8_is_space(column)).fill_null(True)
    return pc.indices_nonzero(blank).to_pylist()


def _report_missing_texts(ids: Sequence[str], empty: list[int], empty_titles: list[str], n: int,
                          use: str = "encoded from") -> None:
    if not empty:
        return
    where = f"e.g. ids {[ids[i] for i in empty[:5]]} at rows {empty[:5]}"
    if len(empty) > MAX_MISSING_TEXT * n:
        raise SchemaError(f"{len(empty)} of the corpus's {n} documents have no 'text' ({where}); is the "
                          "text in another field? Each row needs 'text' (and may have 'title')")
    untitled = sum(1 for t in empty_titles if not t.strip())
    left = "as an empty passage" if use.startswith("encoded") else "nothing to learn from"
    warnings.warn(f"{len(empty)} of the corpus's {n} documents have no 'text' ({where}): they are "
                  f"{use} their title alone" + (f"; {untitled} without a title either, {left}" if untitled else ""),
                  stacklevel=4)


def corpus_texts(corpus: Any, wanted: Iterable[str]) -> dict[str, str]:
    """``{doc id: text}`` for the ``wanted`` ids only (the passages a run retrieved), without
    materialising every text of a corpus of millions (a ``datasets.Dataset`` is read by row).
    Chapter 4."""
    wanted = set(wanted)
    names = column_names(corpus)
    if hasattr(corpus, "select") and ("_id" in names or "docid" in names):
        id_col = "_id" if "_id" in names else "docid"
        rows = [i for i, d in enumerate(corpus[id_col]) if str(d) in wanted]
        picked = corpus.select(rows)
        return {str(d): str(t or "") for d, t in zip(picked[id_col], picked["text"])}
    ids, _, texts = corpus_columns(corpus)
    return {d: t for d, t in zip(ids, texts) if d in wanted}


def query_columns(queries: Any) -> tuple[list[str], list[str]]:
    """(ids, texts) of queries given as ``Dataset[_id, text]``, Tevatron rows or ``{id: text}``. Chapter 4."""
    if isinstance(queries, Mapping):
        return [str(k) for k in queries], [str(v) for v in queries.values()]
    names = column_names(queries)
    if "_id" in names and "text" in names:
        id_col, text_col = "_id", "text"
    elif "query_id" in names and "query" in names:
        id_col, text_col = "query_id", "query"
    else:
        raise SchemaError(f"queries need columns ('_id', 'text') or ('query_id', 'query'); got {names}")
    if hasattr(queries, "column_names"):
        return [str(x) for x in queries[id_col]], [str(x) for x in queries[text_col]]
    return [str(r[id_col]) for r in queries], [str(r[text_col]) for r in queries]
