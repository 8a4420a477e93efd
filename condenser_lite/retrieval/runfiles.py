"""TREC run files: written so that any id survives, read back with checks.

A run file has six whitespace-separated fields a line (``qid Q0 docid rank score tag``), so ids
with whitespace (legal in a BEIR corpus) are percent-encoded on the way out (``trec_id``) and
decoded on the way in (``from_trec_id``); another tool's run with unescaped document ids holding
whitespace is read too, since its fields stay unambiguous. ``check_run`` refuses a run that does
not belong to the corpus and split it is scored on. Explained in chapter 4, ``notebooks/04_finetune.ipynb``.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data.tevatron import check_qrels
from ..utils.errors import DataSourceError, SchemaError


def _escape_char(c: str) -> str:
    return "".join(f"%{b:02X}" for b in c.encode("utf-8")) if c.isspace() or c == "%" else c


def trec_id(raw: Any) -> str:
    """A query or document id as a TREC run file holds it (chapter 4): whitespace (which splits
    the file's fields) and ``%`` percent-encoded as in URLs (``'a b'`` -> ``'a%20b'``), every
    other character, non-ASCII included, as it is. Ids without whitespace or ``%`` (all of the
    papers' data sets) are written unchanged, so trec_eval reads the file with the usual qrels."""
    text = str(raw)
    if not text:
        raise SchemaError("an empty query or document id cannot be written to a TREC run file; give every "
                          "query and document a non-empty _id")
    return "".join(map(_escape_char, text))


_ESCAPED = re.compile(r"(?:%[0-9A-F]{2})+")


def _unescape(match: re.Match) -> str:
    # only what trec_id writes is decoded: another tool's literal '%41' stays as it is
    try:
        text = bytes.fromhex(match.group().replace("%", "")).decode("utf-8")
    except UnicodeDecodeError:
        return match.group()
    return text if all(c.isspace() or c == "%" for c in text) else match.group()


def from_trec_id(field: str) -> str:
    """The id a ``trec_id`` field stands for (chapter 4): its percent-encoded whitespace and
    ``%`` decoded, anything else kept as written."""
    return _ESCAPED.sub(_unescape, field) if "%" in field else field


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | os.PathLike, tag: str = "condenser_lite") -> None:
    """Write ``qid Q0 docid rank score tag`` lines, best first per query (chapter 4). Ids are
    written by ``trec_id`` (whitespace percent-encoded) and ``read_trec_run`` gives them back,
    so every run this writes has six fields per line whatever the data set's ids are."""
    if any(c.isspace() for c in tag) or not tag:
        raise ValueError(f"tag must be a non-empty string without spaces, got {tag!r}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for q, docs in run.items():
            qid = trec_id(q)
            for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda x: (-x[1], x[0])), start=1):
                f.write(f"{qid} Q0 {trec_id(d)} {rank} {float(s)!r} {tag}\n")


_ITERATION = ("Q0", "0")  # the second field as TREC tools write it
# qid, the iteration field, the document id (whatever lies between), rank, score, tag
_LINE = re.compile(r"\s*(\S+)\s+(\S+)\s+(.+?)\s+(\S+)\s+(\S+)\s+(\S+)\s*")


def _run_fields(line: str, where: str) -> tuple[str, str, str]:
    """``(qid, docid, score)`` of a run line, ids decoded. More than six fields are read when the
    line is unambiguous: another tool's unescaped document id with whitespace (a BEIR id such as
    ``Tour de France:12``) lies between ``Q0`` and the last three fields, rank, score and tag."""
    parts = line.split()
    if len(parts) == 6:
        return from_trec_id(parts[0]), from_trec_id(parts[2]), parts[4]
    shape = f"expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}: {line.strip()!r}"
    if len(parts) < 6:
        raise SchemaError(f"{where}: {shape}")
    if parts[1] not in _ITERATION:
        raise SchemaError(f"{where}: {shape}; the second field is {parts[1]!r}, not Q0, so the query id holds "
                          "whitespace and where it ends is ambiguous: write query ids without whitespace, e.g. "
                          "percent-encoded as write_trec_run does ('query one' -> 'query%20one')")
    if not re.fullmatch(r"[+-]?\d+", parts[-3]):
        raise SchemaError(f"{where}: {shape}; the rank {parts[-3]!r} is not an integer, so the fields cannot be told "
                          "apart: write the run with one-word tags and ids without whitespace (or percent-encoded)")
    match = _LINE.fullmatch(line)
    return from_trec_id(match.group(1)), from_trec_id(match.group(3)), match.group(5)


def read_trec_run(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Read a TREC run file back into ``{qid: {docid: score}}`` (chapter 4), ids decoded by
    ``from_trec_id`` (the original ids of a run ``write_trec_run`` wrote).

    A document id with whitespace that another tool wrote unescaped is read as it is
    (``_run_fields``); a query id with whitespace is ambiguous and refused.

    Refuses, naming the file and line (``SchemaError``): a line without the six fields, a score
    that is not a finite number, a (query, document) pair listed twice (the second would silently
    replace the first), and a file with no lines at all (it would score 0.0); an unreadable or
    non-UTF-8 file is a ``DataSourceError``."""
    run: dict[str, dict[str, float]] = {}
    first_seen: dict[tuple[str, str], int] = {}
    try:
        raw_lines = Path(path).read_bytes().splitlines()
    except OSError as err:
        raise DataSourceError(f"cannot read the run file {path}: {err.strerror or err}") from err
    for n, raw_line in enumerate(raw_lines, start=1):
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataSourceError(f"{path}:{n}: not UTF-8 text (byte {raw_line[err.start:err.start + 1]!r} at column "
                                  f"{err.start + 1}); write the run file as UTF-8") from None
        if not line.strip():
            continue
        qid, docid, raw = _run_fields(line, f"{path}:{n}")
        try:
            score = float(raw)
        except ValueError:
            raise SchemaError(f"{path}:{n}: score {raw!r} is not a number") from None
        if not math.isfinite(score):
            raise SchemaError(f"{path}:{n}: score {raw!r} is not finite; the retriever that wrote the run produced "
                              "NaN or infinite scores")
        if (qid, docid) in first_seen:
            raise SchemaError(f"{path}:{n}: query {qid!r} lists document {docid!r} a second time (first at line "
                              f"{first_seen[qid, docid]}); a run ranks each document once per query")
        first_seen[qid, docid] = n
        run.setdefault(qid, {})[docid] = score
    if not run:
        raise SchemaError(f"run file {path} holds no run lines ('qid Q0 docid rank score tag'); nothing to evaluate")
    return run


def check_run(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
              corpus_ids: Sequence[str], query_ids: Sequence[str] | None = None, where: str = "the run") -> None:
    """Refuse a run and qrels that do not belong to the corpus searched (chapter 4): labels or run
    documents that are not in it (``tevatron.check_qrels`` for the labels), or a run with none of
    the labelled queries (the wrong split). A run that covers only some of them is scored (the
    others count as 0) with a warning saying how many."""
    check_qrels(qrels, corpus_ids, query_ids)
    known = set(corpus_ids)
    foreign = sorted({d for docs in run.values() for d in docs if d not in known})
    if foreign:
        raise SchemaError(f"{where}: {len(foreign)} documents of the run are not in the corpus (e.g. {foreign[:5]}); "
                          "the run was made on another corpus or data set")
    labelled = {q for q, docs in qrels.items() if docs}
    covered = labelled & set(run)
    if not covered:
        raise SchemaError(f"{where}: none of its {len(run)} queries has relevance labels in this split (e.g. "
                          f"{sorted(run)[:3]}); check --split and --data")
    if len(covered) < len(labelled):
        warnings.warn(f"{where} covers {len(covered)} of the {len(labelled)} labelled queries; the other "
                      f"{len(labelled) - len(covered)} count as 0", stacklevel=2)
