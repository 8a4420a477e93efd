"""Retrieval metrics: an ir_measures wrapper, nb-recall and DPR top-k answer accuracy.

Explained in chapter 4, `notebooks/04_finetune.ipynb`.

A *run* is ``{query_id: {doc_id: score}}`` and *qrels* are ``{query_id: {doc_id: grade}}``,
the dictionaries ``ir_measures`` (and pytrec_eval, BEIR, Tevatron) use.
"""

from __future__ import annotations

import math
import unicodedata
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ir_measures
import regex

from ..data.beir import corpus_texts
from ..utils.errors import ConfigError, SchemaError

__all__ = ["evaluate_run", "nb_recall", "topk_answer_accuracy", "dpr_tokens", "has_answer", "metric_depth",
           "answer_cutoffs", "check_run_depth"]

# The names the papers use, mapped to ir_measures' names.
_ALIASES = {"MRR@": "RR@", "Recall@": "R@", "NDCG@": "nDCG@"}


def _parse_measure(name: str):
    canonical = name
    for alias, target in _ALIASES.items():
        if canonical.startswith(alias):
            canonical = target + canonical[len(alias):]
    try:
        return ir_measures.parse_measure(canonical)
    except Exception as err:  # ir_measures raises several types for bad names
        raise ConfigError(
            f"metrics: cannot parse {name!r}; use ir_measures names such as 'nDCG@10', 'RR@10', 'R@100'"
        ) from err


def _clean_run(run: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    # pytrec_eval wants str ids and python floats (numpy float32 is rejected).
    out = {str(q): {str(d): float(s) for d, s in docs.items()} for q, docs in run.items()}
    if not any(out.values()):
        raise SchemaError("evaluate_run: the run is empty (no query has a retrieved document); nothing to score")
    for q, docs in out.items():
        bad = [d for d, s in docs.items() if not math.isfinite(s)]
        if bad:  # NaN sorts arbitrarily: the metrics would be noise
            raise SchemaError(f"evaluate_run: query {q!r} has {len(bad)} non-finite scores (e.g. document {bad[0]!r}: "
                              f"{docs[bad[0]]}); the retriever produced NaN or infinite scores")
    return out


def ranked(run: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """``run`` with each query's scores replaced by its ranks, counted down (the first of ``n``
    documents scores ``n``), ordered by score and, among equal scores, by document id
    (ascending): the one order every measure then reads (chapter 4). ir_measures sends some
    measures to trec_eval, which breaks ties by document id descending, and others to its own
    code, which breaks them ascending; given no ties, both rank alike. Ties are common in BM25
    runs and among duplicate passages."""
    return {q: {d: float(len(docs) - i) for i, d in enumerate(_top(docs, len(docs)))} for q, docs in run.items()}


def _clean_qrels(qrels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    return {str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in qrels.items() if len(docs) > 0}


def evaluate_run(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str] = ("nDCG@10", "RR@10", "R@100"),
    per_query: bool = False,
) -> dict:
    """Mean of each metric over the queries that have qrels (explained in chapter 4).

    A run that is empty or holds a NaN or infinite score raises ``SchemaError``.
    Queries whose grades are all 0 (nothing to find) count as zero too, with a warning.
    Queries with qrels that are missing from the run count as zero, so a retriever cannot
    look better by skipping hard queries (ir_measures 0.4 already does this; we make it
    explicit so the rule does not depend on the provider). Run entries for queries without
    qrels are ignored. Tied scores are ordered by document id, ascending, for every measure
    (``ranked``). ``MRR@k`` and ``Recall@k`` are accepted as aliases.

    Returns ``{metric: mean}``; with ``per_query=True`` returns ``{query_id: {metric: value}}``
    for every query with qrels.
    """
    qrels = _clean_qrels(qrels)
    if not qrels:
        raise SchemaError("evaluate_run: qrels are empty; pass the relevance labels of the evaluated split")
    hopeless = sorted(q for q, docs in qrels.items() if not any(g > 0 for g in docs.values()))
    if hopeless:  # counted as 0, as BEIR and pytrec_eval do; said, so that a low mean is not a mystery
        warnings.warn(f"{len(hopeless)} of the {len(qrels)} labelled queries have no relevant document (every grade "
                      f"is 0 or less, e.g. {hopeless[:3]}): they score 0, as in BEIR and pytrec_eval; drop their "
                      "qrels lines to leave them out of the mean", stacklevel=2)
    if isinstance(metrics, str):
        metrics = (metrics,)
    parsed = {name: _parse_measure(name) for name in metrics}
    run = ranked({q: docs for q, docs in _clean_run(run).items() if q in qrels})

    table = {q: {name: 0.0 for name in parsed} for q in qrels}
    by_measure = {m: name for name, m in parsed.items()}
    if run:
        for row in ir_measures.iter_calc(list(parsed.values()), qrels, run):
            table[row.query_id][by_measure[row.measure]] = float(row.value)
    if per_query:
        return table
    n = len(table)
    return {name: sum(row[name] for row in table.values()) / n for name in parsed}


def _top(docs: Mapping[str, float], depth: int) -> list[str]:
    # Sort by score, ties broken by doc id so results do not depend on dict order.
    return [d for d, _ in sorted(docs.items(), key=lambda x: (-x[1], x[0]))[:depth]]


def nb_recall(
    run1: Mapping[str, Mapping[str, float]],
    run2: Mapping[str, Mapping[str, float]],
    n: int,
    k: int,
) -> float:
    """Neighbourhood recall nb-recall^n@k, coCondenser eq. 17 (explained in chapter 4).

    For each query of the stage-2 run: |top-k of stage 1 ∩ top-n of stage 2| / n, averaged over
    the stage-2 queries (a query missing from ``run1`` scores zero). It measures how many of the
    passages the final retriever ranks highest the first-stage retriever already found, i.e.
    how well stage 1 located the hard negatives stage 2 trained on.
    """
    if n < 1 or k < 1:
        raise ValueError(f"nb_recall: n and k must be >= 1, got n={n}, k={k}")
    if not run2:
        raise ValueError("nb_recall: run2 (the stage-2 run) is empty")
    total = 0.0
    for q, docs2 in run2.items():
        top2 = set(_top(docs2, n))
        top1 = set(_top(run1.get(q, {}), k))
        total += len(top1 & top2) / n
    return total / len(run2)


# --- DPR top-k accuracy ------------------------------------------------------------

# DPR's SimpleTokenizer (its qa_validation.has_answer, match_type "string"): a token is a run of
# letters, digits and combining marks, or any single other character that is not a separator
# or a control character, so punctuation stays as tokens and articles are kept.
_DPR_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]",
                           flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)


def dpr_tokens(text: str) -> list[str]:
    """Lower-cased tokens by DPR's matching rule (chapter 4): NFD-normalised, words (letters,
    digits, marks) and every punctuation character as its own token; nothing dropped, so
    "The Who" does not match "who" and "AT&T" does not match "AT T"."""
    return [t.lower() for t in _DPR_TOKEN.findall(unicodedata.normalize("NFD", text))]


def _contains(haystack: list[str], needle: list[str]) -> bool:
    m = len(needle)
    if m == 0 or m > len(haystack):
        return False
    first = needle[0]
    return any(haystack[i] == first and haystack[i:i + m] == needle for i in range(len(haystack) - m + 1))


def has_answer(passage: str, answers: Iterable[str]) -> bool:
    """True if any answer's DPR token sequence occurs contiguously in the passage's (chapter 4)."""
    tokens = dpr_tokens(passage)
    return any(_contains(tokens, dpr_tokens(a)) for a in answers)


def topk_answer_accuracy(
    run: Mapping[str, Mapping[str, float]],
    passages_text: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
    ks: Sequence[int] = (5, 20, 100),
) -> dict[str, float]:
    """DPR's top-k retrieval accuracy: share of questions with an answer in the top k (chapter 4).

    The metric the papers report for NQ and TriviaQA, with DPR's matching rule (``dpr_tokens``).
    ``answers`` maps each question id to its answer strings; every question counts (one missing
    from the run scores zero). ``passages_text`` maps doc id to passage text (only the retrieved
    ones are read). Returns ``{"Top-5": ..., "Top-20": ..., "Top-100": ...}``.
    """
    if not answers:
        raise ValueError("topk_answer_accuracy: answers is empty; pass {question_id: [answer, ...]}")
    ks = sorted(set(int(k) for k in ks))
    if ks[0] < 1:
        raise ValueError(f"topk_answer_accuracy: ks must be >= 1, got {ks}")
    hits = {k: 0 for k in ks}
    cache: dict[str, list[str]] = {}
    for q, ans in answers.items():
        if isinstance(ans, str):
            ans = [ans]
        ans_tokens = [t for t in (dpr_tokens(a) for a in ans) if t]
        first_hit = None
        for rank, doc in enumerate(_top(run.get(q, {}), ks[-1])):
            if doc not in passages_text:
                raise KeyError(f"topk_answer_accuracy: doc {doc!r} of query {q!r} is not in passages_text")
            if doc not in cache:
                cache[doc] = dpr_tokens(passages_text[doc])
            if any(_contains(cache[doc], a) for a in ans_tokens):
                first_hit = rank
                break
        for k in ks:
            hits[k] += first_hit is not None and first_hit < k
    return {f"Top-{k}": hits[k] / len(answers) for k in ks}


# --- how deep a run must be ---------------------------------------------------------

_TOPK = regex.compile(r"Top-(\d+)")


def answer_cutoffs(metrics: Sequence[str]) -> list[int]:
    """The k of every ``Top-k`` answer-accuracy name in ``metrics`` (chapter 4)."""
    return [int(m.group(1)) for m in (_TOPK.fullmatch(str(x)) for x in metrics) if m]


def metric_depth(metrics: Sequence[str]) -> int | None:
    """The deepest rank any of ``metrics`` reads (``R@1000`` -> 1000, ``Top-20`` -> 20), or None
    when none has a cutoff. A run must be at least this deep (chapter 4)."""
    if isinstance(metrics, str):
        metrics = (metrics,)
    cutoffs = answer_cutoffs(metrics)
    for name in metrics:
        if not _TOPK.fullmatch(str(name)):
            cutoff = _parse_measure(name).params.get("cutoff")
            if cutoff:
                cutoffs.append(int(cutoff))
    return max(cutoffs) if cutoffs else None


def check_run_depth(run: Mapping[str, Mapping[str, float]], metrics: Sequence[str], n_docs: int | None = None,
                    where: str = "the run") -> int:
    """Refuse metrics that read deeper than ``run`` ranks (chapter 4): R@1000 of a top-100 run is
    R@100 under another name. The run's depth is its longest ranking; a run that ranks all
    ``n_docs`` documents is complete at any cutoff. Returns the depth."""
    depth = max((len(docs) for docs in run.values()), default=0)
    need = metric_depth(metrics)
    if need and depth < need and (n_docs is None or depth < n_docs):
        deepest = max(metrics, key=lambda m: metric_depth([m]) or 0)
        raise ConfigError(f"{where} ranks at most {depth} documents per query, but {deepest} reads the top {need}: "
                         f"search again with --k {need} (k={need}), or ask for metrics within the top {depth}")
    return depth


def split_labels(beir_data: Any, split: str, metrics: Sequence[str]) -> tuple[dict, dict]:
    """The qrels (for ir_measures metrics) and answers (for Top-k) of ``split`` that ``metrics`` need."""
    top_ks = answer_cutoffs(metrics)
    qrels = {q: d for q, d in beir_data.split_qrels(split).items() if d} if len(top_ks) < len(metrics) else {}
    answers = {}
    if top_ks:
        answers = getattr(beir_data, "answers", {}).get(split)
        if not answers:
            raise SchemaError(f"{', '.join(f'Top-{t}' for t in top_ks)} needs the answer strings of the {split!r} queries, "
                              f"which {getattr(beir_data, 'name', 'this data set')!r} lacks; use ir_measures metrics "
                              "(RR@10, R@100) or a data set with answers (nq)")
    return qrels, answers


def score_run(beir_data: Any, split: str, run: Mapping[str, Mapping[str, float]], metrics: Sequence[str]) -> dict:
    """``{metric: value}`` of a run on ``split`` (chapter 4): ir_measures metrics against the qrels,
    ``Top-k`` (DPR's answer accuracy, NQ) against the answers. A metric that reads deeper than the
    run ranks is refused (``metrics.check_run_depth``) unless the run ranks the whole corpus."""
    qrels, answers = split_labels(beir_data, split, metrics)
    check_run_depth(run, metrics, n_docs=len(beir_data.corpus))
    ir_metrics = [m for m in metrics if not answer_cutoffs([m])]
    scores = evaluate_run(qrels, run, ir_metrics) if ir_metrics else {}
    if answers:
        texts = corpus_texts(beir_data.corpus, {d for docs in run.values() for d in docs})
        scores.update(topk_answer_accuracy(run, texts, answers, ks=answer_cutoffs(metrics)))
    return {m: scores[m] for m in metrics}
