"""Encoding, exact inner-product search with FAISS, TREC run files, and evaluating a retriever.

Explained in chapter 4, `notebooks/04_finetune.ipynb`. The corpus is encoded once (``encode``,
``encode_corpus``: last-layer CLS, batches sorted by length), searched by inner product
(``FaissIndex``: exact ``IndexFlatIP`` as the papers, approximate options for corpora whose flat
index does not fit), and the run scored with ``metrics.evaluate_run`` (``evaluate_retriever``).
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from .biencoder import BiEncoder, cls_embedding, load_model_and_tokenizer, pad_batch, passage_strings, token_ids
from .data import corpus_columns, query_columns
from .errors import DataSourceError, SchemaError
from .metrics import evaluate_run
from .tevatron import check_qrels

def _pick_encoder(model: Any, side: str) -> nn.Module:
    if isinstance(model, BiEncoder):
        return model.encoder(side)
    inner = getattr(model, "encoder", None)
    if isinstance(inner, PreTrainedModel):  # e.g. similarity.SentenceEncoder
        return inner
    if isinstance(model, PreTrainedModel):
        return model.base_model  # BertForMaskedLM -> its BertModel; BertModel -> itself
    raise TypeError(f"cannot encode with a {type(model).__name__}; pass a BiEncoder, a transformers model or a checkpoint dir")


def _autocast(device: torch.device, amp: bool | None):
    if device.type == "cuda" and amp is not False:
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()


@torch.inference_mode()
def encode(
    model_or_dir: Any,
    texts: Sequence[str] | tuple[Sequence[str], Sequence[str]],
    tokenizer=None,
    max_len: int = 128,
    batch_size: int = 128,
    device: str | torch.device | None = None,
    side: str | None = None,
    amp: bool | None = None,
    chunk_size: int = 65536,
) -> np.ndarray:
    """Embed texts with the last-layer CLS, ``float32 [N, H]`` in input order (chapter 4).

    ``texts`` is a list of strings (queries) or a ``(titles, texts)`` pair (passages, encoded as
    ``title [SEP] text``). ``side`` picks a ``BiEncoder``'s query or passage encoder (default:
    passage for a pair, query otherwise). Batches are formed after sorting by length, so little
    compute goes to padding; eval mode, no grad, bf16/fp16 autocast on a GPU (``amp=False`` turns
    it off). Texts are tokenised ``chunk_size`` at a time to bound memory on large corpora.
    With ``device`` the model is moved there (and stays); by default it runs where it is
    (a checkpoint dir is loaded onto the GPU when there is one).
    """
    model_or_dir, tokenizer, device = load_model_and_tokenizer(model_or_dir, tokenizer, device, caller="encode")
    is_pair = isinstance(texts, tuple) and len(texts) == 2 and not isinstance(texts[0], str)
    side = side or ("passage" if is_pair else "query")
    if side not in ("query", "passage"):
        raise ValueError(f"encode: side must be 'query' or 'passage', got {side!r}")
    strings = passage_strings(tokenizer, texts[0], texts[1]) if is_pair else [str(t) for t in texts]
    encoder = _pick_encoder(model_or_dir, side)
    limit = getattr(encoder.config, "max_position_embeddings", None)
    if limit is not None and max_len > limit:
        raise ValueError(f"encode: max_len={max_len} exceeds the model's max_position_embeddings={limit}; use max_len <= {limit}")
    if device is not None:
        encoder.to(device)
    dev = next(encoder.parameters()).device
    hidden = encoder.config.hidden_size
    out = np.zeros((len(strings), hidden), dtype=np.float32)
    was_training = encoder.training
    encoder.eval()
    try:
        for start in range(0, len(strings), chunk_size):
            ids = token_ids(tokenizer, strings[start : start + chunk_size], max_len)
            order = np.argsort([-len(s) for s in ids], kind="stable")  # longest first: OOM shows at once
            for b in range(0, len(order), batch_size):
                rows = order[b : b + batch_size]
                input_ids, mask = pad_batch([ids[r] for r in rows], tokenizer.pad_token_id)
                with _autocast(dev, amp):
                    reps = cls_embedding(encoder, input_ids.to(dev), mask.to(dev))
                out[start + rows] = reps.float().cpu().numpy()
    finally:
        encoder.train(was_training)
    return out


def encode_corpus(model: Any, corpus: Any, tokenizer, p_max_len: int = 128, **kwargs) -> tuple[np.ndarray, list[str]]:
    """``(embeddings, doc_ids)`` of a BEIR or Tevatron corpus (chapter 4)."""
    ids, titles, texts = corpus_columns(corpus)
    return encode(model, (titles, texts), tokenizer, max_len=p_max_len, side="passage", **kwargs), ids


def _available_memory() -> int:
    """Bytes of available RAM (``MemAvailable`` in /proc/meminfo; total pages elsewhere)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30  # unknown: assume a modest 8 GiB


class FaissIndex:
    """Inner-product FAISS index over passage embeddings (chapter 4).

    ``index_type="flat"`` (default) is exact search, as the papers use; ``"hnsw"`` (HNSW32) and
    ``"ivf"`` (IVF with about 4*sqrt(N) lists, trained on the vectors) are approximate options for
    corpora whose flat index does not fit; any other string is passed to ``faiss.index_factory``.
    Before building, the index size is checked against ``memory_budget`` bytes (default: 80% of
    available RAM) and a clear error suggests the alternatives.
    """

    def __init__(
        self,
        passage_embs: np.ndarray,
        passage_ids: Sequence[str],
        index_type: str = "flat",
        memory_budget: int | None = None,
        nprobe: int = 32,
    ):
        embs = np.ascontiguousarray(passage_embs, dtype=np.float32)
        if embs.ndim != 2 or embs.shape[0] != len(passage_ids):
            raise ValueError(f"passage_embs must be [N, H] with N = len(passage_ids) = {len(passage_ids)}, got {embs.shape}")
        if embs.shape[0] == 0:
            raise ValueError("cannot build an index over an empty corpus")
        n, dim = embs.shape
        budget = int(0.8 * _available_memory()) if memory_budget is None else int(memory_budget)
        per_vector = {"flat": 4 * dim, "ivf": 4 * dim + 8, "hnsw": 4 * dim + 2 * 32 * 4}.get(index_type, 4 * dim)
        need = n * per_vector
        if need > budget:
            raise MemoryError(
                f"a {index_type!r} index of {n:,} x {dim} float32 vectors needs about {need / 2**30:.1f} GiB, "
                f"over the memory budget of {budget / 2**30:.1f} GiB; use index_type='ivf' or 'hnsw' with less memory "
                "per vector (e.g. a factory string like 'IVF4096,PQ64'), search shards of the corpus and merge the top-k, "
                "or raise memory_budget"
            )
        self.ids = list(passage_ids)
        metric = faiss.METRIC_INNER_PRODUCT
        if index_type == "flat":
            self.index = faiss.IndexFlatIP(dim)
        elif index_type == "hnsw":
            self.index = faiss.index_factory(dim, "HNSW32,Flat", metric)
        elif index_type == "ivf":
            nlist = max(1, min(int(4 * math.sqrt(n)), n // 39 or 1))  # faiss wants >= 39 points per list
            self.index = faiss.index_factory(dim, f"IVF{nlist},Flat", metric)
        else:
            self.index = faiss.index_factory(dim, index_type, metric)
        if not self.index.is_trained:
            self.index.train(embs)
        if hasattr(self.index, "nprobe"):
            self.index.nprobe = nprobe
        self.index.add(embs)

    def search_indices(self, query_embs: np.ndarray, k: int, batch_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """``(scores [Q, k], row indices [Q, k])``; -1 where fewer than k passages were found."""
        q = np.ascontiguousarray(query_embs, dtype=np.float32)
        k = min(k, len(self.ids))
        scores = np.empty((q.shape[0], k), dtype=np.float32)
        idx = np.empty((q.shape[0], k), dtype=np.int64)
        for s in range(0, q.shape[0], batch_size):
            scores[s : s + batch_size], idx[s : s + batch_size] = self.index.search(q[s : s + batch_size], k)
        return scores, idx

    def search(self, query_embs: np.ndarray, query_ids: Sequence[str], k: int = 100) -> dict[str, dict[str, float]]:
        if len(query_ids) != len(query_embs):
            raise ValueError(f"got {len(query_embs)} query embeddings but {len(query_ids)} query ids")
        scores, idx = self.search_indices(query_embs, k)
        return {
            str(qid): {self.ids[j]: float(s) for s, j in zip(scores[i], idx[i]) if j >= 0}
            for i, qid in enumerate(query_ids)
        }


def search(
    passage_embs: np.ndarray,
    passage_ids: Sequence[str],
    query_embs: np.ndarray,
    query_ids: Sequence[str],
    k: int = 100,
    index_type: str = "flat",
    memory_budget: int | None = None,
) -> dict[str, dict[str, float]]:
    """Top-``k`` passages per query by inner product, as a run ``{qid: {docid: score}}`` (chapter 4).
    Exact (``IndexFlatIP``) unless ``index_type`` says otherwise; see ``FaissIndex``."""
    return FaissIndex(passage_embs, passage_ids, index_type=index_type, memory_budget=memory_budget).search(
        query_embs, query_ids, k=k
    )


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | os.PathLike, tag: str = "condenser_lite") -> None:
    """Write ``qid Q0 docid rank score tag`` lines, best first per query (chapter 4)."""
    if any(c.isspace() for c in tag) or not tag:
        raise ValueError(f"tag must be a non-empty string without spaces, got {tag!r}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for q, docs in run.items():
            for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda x: (-x[1], x[0])), start=1):
                f.write(f"{q} Q0 {d} {rank} {float(s)!r} {tag}\n")


def read_trec_run(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Read a TREC run file back into ``{qid: {docid: score}}`` (chapter 4).

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
        parts = line.split()
        if len(parts) != 6:
            raise SchemaError(f"{path}:{n}: expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}: {line.strip()!r}")
        qid, docid, raw = parts[0], parts[2], parts[4]
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


def evaluate_retriever(
    model_dir_or_model: Any,
    beir_data: Any,
    split: str = "test",
    tokenizer=None,
    q_max_len: int = 32,
    p_max_len: int = 128,
    k: int = 100,
    metrics: Sequence[str] = ("nDCG@10", "RR@10", "R@100"),
    batch_size: int = 128,
    device: str | None = None,
    corpus_embeddings: tuple[np.ndarray, list[str]] | None = None,
    index_type: str = "flat",
) -> dict:
    """Encode the corpus and the split's queries, search, score (chapter 4).

    Returns ``{"metrics": {name: value}, "run": run, "corpus_embeddings": (embs, ids)}``; pass
    ``corpus_embeddings`` back in (e.g. to ``mine_hard_negatives``) to skip re-encoding the corpus
    with the same model.
    """
    if split not in beir_data.qrels:
        raise SchemaError(f"no qrels for split {split!r}; available: {sorted(beir_data.qrels)}")
    qrels = {q: d for q, d in beir_data.qrels[split].items() if d}
    model, tokenizer, device = load_model_and_tokenizer(model_dir_or_model, tokenizer, device, caller="evaluate_retriever")
    qids_all, qtexts_all = query_columns(beir_data.queries)
    if corpus_embeddings is None:
        corpus_embeddings = encode_corpus(model, beir_data.corpus, tokenizer, p_max_len, batch_size=batch_size, device=device)
    p_embs, p_ids = corpus_embeddings
    check_qrels(qrels, p_ids, qids_all)
    qtext = dict(zip(qids_all, qtexts_all))
    qids = [q for q in qids_all if q in qrels]
    if not qids:
        raise SchemaError(f"split {split!r}: none of the queries has qrels; nothing to evaluate")
    q_embs = encode(model, [qtext[q] for q in qids], tokenizer, max_len=q_max_len, batch_size=batch_size, device=device, side="query")
    run = search(p_embs, p_ids, q_embs, qids, k=k, index_type=index_type)
    return {"metrics": evaluate_run(qrels, run, metrics), "run": run, "corpus_embeddings": corpus_embeddings}
