"""Encoding, exact inner-product search with FAISS, and evaluating a retriever.

Explained in chapter 4, `notebooks/04_finetune.ipynb`. The corpus is encoded once (``encode``,
``encode_corpus``: last-layer CLS, batches sorted by length, into memory or a float16 memmap on
disk), searched by inner product shard by shard (``search_indices``; ``FaissIndex``: exact
``IndexFlatIP`` as the papers, approximate options for corpora whose flat index does not fit),
and the run scored with ``metrics.score_run`` (``evaluate_retriever``). Run files are
``runfiles.py``'s.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from typing import Any

import faiss
import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from ..data.beir import corpus_columns, query_columns
from ..data.tevatron import check_qrels
from ..modeling.mlm import bert_of
from ..utils.devices import cuda_amp_dtype, is_xla
from ..utils.errors import ConfigError, SchemaError
from .biencoder import BiEncoder, embed, load_model_and_tokenizer, pad_batch, passage_strings, token_ids
from .pooling import CLS, Pooling
from .metrics import metric_depth, score_run, split_labels


def _pick_encoder(model: Any, side: str) -> nn.Module:
    if isinstance(model, BiEncoder):
        return model.encoder(side)
    inner = getattr(model, "encoder", None)
    if isinstance(inner, PreTrainedModel):  # e.g. similarity.SentenceEncoder
        return inner
    if isinstance(model, PreTrainedModel):
        return bert_of(model)  # BertForMaskedLM -> its BertModel; BertModel -> itself
    raise TypeError(f"cannot encode with a {type(model).__name__}; pass a BiEncoder, a transformers model or a checkpoint dir")


def _autocast(device: torch.device, amp: bool | None):
    if device.type == "cuda" and amp is not False:
        return torch.autocast("cuda", dtype=cuda_amp_dtype())
    if is_xla(device) and amp is not False:  # TPUs compute in bf16
        return torch.autocast("xla", dtype=torch.bfloat16)
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
    out: np.ndarray | None = None,
    pooling: Pooling | str | None = None,
) -> np.ndarray:
    """Embed texts with the last-layer CLS, ``[N, H]`` in input order (chapter 4).

    ``pooling`` (``pooling.Pooling``) is a ``BiEncoder``'s own by default (its checkpoint's: a
    sentence-transformers folder's mean pooling, say), ``[CLS]`` for any other model.
    ``texts`` is a list of strings (queries) or a ``(titles, texts)`` pair (passages, encoded as
    ``title [SEP] text``). ``side`` picks a ``BiEncoder``'s query or passage encoder (default:
    passage for a pair, query otherwise). Batches are formed after sorting by length, so little
    compute goes to padding; eval mode, no grad, bf16/fp16 autocast on a GPU or TPU (``amp=False``
    turns it off). Texts are tokenised ``chunk_size`` at a time to bound memory on large corpora.
    The vectors go into ``out`` when given (any float dtype, e.g. a float16 ``np.memmap`` on disk,
    so a corpus of millions never sits in memory), else into a new float32 array.
    With ``device`` the model is moved there (and stays); by default it runs where it is
    (a checkpoint dir is loaded onto the accelerator when there is one: ``devices.default_device``).
    On a TPU every batch is padded to ``max_len`` rows of one shape, which XLA compiles once.
    """
    model_or_dir, tokenizer, device = load_model_and_tokenizer(model_or_dir, tokenizer, device, caller="encode")
    is_pair = isinstance(texts, tuple) and len(texts) == 2 and not isinstance(texts[0], str)
    side = side or ("passage" if is_pair else "query")
    if side not in ("query", "passage"):
        raise ValueError(f"encode: side must be 'query' or 'passage', got {side!r}")
    n = len(texts[0]) if is_pair else len(texts)
    encoder = _pick_encoder(model_or_dir, side)
    pooling = Pooling.parse(pooling) if pooling is not None else getattr(model_or_dir, "pooling", CLS)
    limit = getattr(encoder.config, "max_position_embeddings", None)
    if limit is not None and max_len > limit:
        raise ConfigError(f"encode: max_len={max_len} exceeds the model's max_position_embeddings={limit}; use max_len "
                          f"<= {limit} (command line: --p-max-len / --q-max-len)")
    if device is not None:
        encoder.to(device)
    dev = next(encoder.parameters()).device
    hidden = encoder.config.hidden_size
    if out is None:
        out = np.zeros((n, hidden), dtype=np.float32)
    elif out.shape != (n, hidden):
        raise ValueError(f"encode: out has shape {out.shape}, expected ({n}, {hidden})")
    fixed_width = max_len if is_xla(dev) else None  # XLA recompiles for every new shape
    was_training = encoder.training
    encoder.eval()
    try:
        for start in range(0, n, chunk_size):
            end = min(start + chunk_size, n)
            strings = (passage_strings(tokenizer, texts[0][start:end], texts[1][start:end]) if is_pair
                       else [str(t) for t in texts[start:end]])
            ids = token_ids(tokenizer, strings, max_len)
            order = np.argsort([-len(s) for s in ids], kind="stable")  # longest first: OOM shows at once
            for b in range(0, len(order), batch_size):
                rows = order[b : b + batch_size]
                input_ids, mask = pad_batch([ids[r] for r in rows], tokenizer.pad_token_id, width=fixed_width)
                with _autocast(dev, amp):
                    reps = embed(encoder, input_ids.to(dev), mask.to(dev), pooling)
                out[start + rows] = reps.float().cpu().numpy()
    finally:
        encoder.train(was_training)
    return out


def encode_corpus(model: Any, corpus: Any, tokenizer=None, p_max_len: int = 128, path: str | os.PathLike | None = None,
                  dtype: str = "float32", **kwargs) -> tuple[np.ndarray, list[str]]:
    """``(embeddings, doc_ids)`` of a BEIR or Tevatron corpus (chapter 4).

    With ``path`` the embeddings are written batch by batch into a ``.npy`` file there and
    returned as a read-only ``np.memmap``: MS MARCO's 8.84M x 768 passages never sit in memory
    (13.6 GB on disk in ``dtype="float16"``, 27 GB in float32). float16 keeps about three
    significant digits per dimension: rankings can swap only between passages whose scores agree
    to about 1e-3, which the papers' MRR@10 and R@1000 tolerate; scores are computed in float32.
    """
    model, tokenizer, device = load_model_and_tokenizer(model, tokenizer, kwargs.pop("device", None), caller="encode_corpus")
    ids, titles, texts = corpus_columns(corpus, lazy=True)
    out = None
    if path is not None:
        hidden = _pick_encoder(model, "passage").config.hidden_size
        out = np.lib.format.open_memmap(str(path), mode="w+", dtype=np.dtype(dtype), shape=(len(ids), hidden))
    elif dtype != "float32":
        out = np.zeros((len(ids), _pick_encoder(model, "passage").config.hidden_size), dtype=np.dtype(dtype))
    embs = encode(model, (titles, texts), tokenizer, max_len=p_max_len, side="passage", device=device, out=out, **kwargs)
    if path is not None:
        embs.flush()
        del embs, out
        embs = np.load(str(path), mmap_mode="r")
    return embs, ids


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


def _copy_bytes(embs: np.ndarray) -> int:
    """Bytes of the float32 copy that FAISS needs of ``embs`` (0 when it can read them as they are)."""
    return 0 if embs.dtype == np.float32 and embs.flags.c_contiguous else embs.shape[0] * embs.shape[1] * 4


def _resident_bytes(embs: np.ndarray) -> int:
    """Bytes ``embs`` hold in memory (a memmap lives on disk)."""
    return 0 if isinstance(embs, np.memmap) else embs.nbytes


class FaissIndex:
    """Inner-product FAISS index over passage embeddings (chapter 4).

    ``index_type="flat"`` (default) is exact search, as the papers use; ``"hnsw"`` (HNSW32) and
    ``"ivf"`` (IVF with about 4*sqrt(N) lists, trained on the vectors) are approximate options for
    corpora whose flat index does not fit; any other string is passed to ``faiss.index_factory``.
    Before building, the memory it needs (the embeddings held in memory, FAISS's float32 copy of
    them and the index itself) is checked against ``memory_budget`` bytes (default: 80% of
    available RAM) and a clear error suggests the alternatives. For exact search over a large
    corpus use ``search_indices`` instead, which never builds a flat index (shard by shard).
    """

    def __init__(
        self,
        passage_embs: np.ndarray,
        passage_ids: Sequence[str],
        index_type: str = "flat",
        memory_budget: int | None = None,
        nprobe: int = 32,
    ):
        if passage_embs.ndim != 2 or passage_embs.shape[0] != len(passage_ids):
            raise ValueError(f"passage_embs must be [N, H] with N = len(passage_ids) = {len(passage_ids)}, got {passage_embs.shape}")
        if passage_embs.shape[0] == 0:
            raise ValueError("cannot build an index over an empty corpus")
        n, dim = passage_embs.shape
        budget = _budget(memory_budget)
        per_vector = {"flat": 4 * dim, "ivf": 4 * dim + 8, "hnsw": 4 * dim + 2 * 32 * 4}.get(index_type, 4 * dim)
        need = _resident_bytes(passage_embs) + _copy_bytes(passage_embs) + n * per_vector
        if need > budget:
            raise MemoryError(
                f"a {index_type!r} index of {n:,} x {dim} vectors needs about {need / 2**30:.1f} GiB (embeddings, "
                f"FAISS's float32 copy and the index), over the memory budget of {budget / 2**30:.1f} GiB; for exact "
                "search use search.search_indices (shard by shard, embeddings in a memmap: encode_corpus(path=...)), "
                "or an index with less memory per vector (index_type='ivf', 'hnsw', a factory string like "
                "'IVF4096,PQ64'), or raise memory_budget"
            )
        embs = np.ascontiguousarray(passage_embs, dtype=np.float32)
        self.ids = list(passage_ids)
        metric = faiss.METRIC_INNER_PRODUCT
        try:
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
        except RuntimeError as err:  # a factory string faiss cannot parse, or cannot train on these vectors
            last = str(err).strip().splitlines()[-1]  # faiss's own words, after its C++ location
            why = last.split("failed: ")[-1] if "failed: " in last else last.rsplit(": ", 1)[-1]
            raise ConfigError(f"index {index_type!r}: faiss cannot build it for {n:,} passages of {dim} dims ({why}); "
                              "use flat, hnsw, ivf or another faiss factory string") from None
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
        return run_from_indices(*self.search_indices(query_embs, k), self.ids, query_ids)


def _budget(memory_budget: int | None) -> int:
    return int(0.8 * _available_memory()) if memory_budget is None else int(memory_budget)


SHARD_ROWS = 1_000_000  # passages per shard of exact search: 3 GiB of float32 at 768 dimensions


def shard_rows(n: int, dim: int, n_queries: int, k: int, memory_budget: int | None = None) -> int:
    """Passages per shard of ``search_indices`` (chapter 4): at most ``SHARD_ROWS`` and what fits
    ``memory_budget`` (default 80% of available RAM) beside the queries and the top-k heaps;
    a MemoryError when not even one passage fits."""
    budget = _budget(memory_budget)
    fixed = n_queries * dim * 4 + 2 * n_queries * k * 12  # queries; running heap + a shard's top k
    rows = (budget - fixed) // (dim * 4 + 8 * k)  # a float32 shard row (+ faiss's per-row work)
    if rows < 1:
        raise MemoryError(f"exact search of {n_queries:,} queries at k={k} needs {fixed / 2**30:.2f} GiB before any "
                          f"passage, over the memory budget of {budget / 2**30:.2f} GiB; search the queries in "
                          "batches or raise memory_budget")
    return int(min(rows, SHARD_ROWS, n))


def search_indices(passage_embs: np.ndarray, query_embs: np.ndarray, k: int, memory_budget: int | None = None,
                   rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-``k`` as ``(scores [Q, k], row indices [Q, k])``, shard by shard
    (chapter 4). ``passage_embs`` may be any float dtype and a ``np.memmap`` on disk (``encode_corpus(path=)``):
    each shard of ``rows`` passages (``shard_rows``: what fits ``memory_budget``) is read as float32,
    searched with ``faiss.knn`` (no index, so no second copy) and merged into a running top-k
    (``faiss.ResultHeap``). One shard gives exactly ``IndexFlatIP``'s result."""
    n, dim = passage_embs.shape
    if n == 0:
        raise ValueError("cannot search an empty corpus")
    q = np.ascontiguousarray(query_embs, dtype=np.float32)
    k = min(k, n)
    rows = rows or shard_rows(n, dim, q.shape[0], k, memory_budget)
    heap = faiss.ResultHeap(q.shape[0], k, keep_max=True)
    for start in range(0, n, rows):
        shard = np.ascontiguousarray(passage_embs[start:start + rows], dtype=np.float32)
        scores, idx = faiss.knn(q, shard, min(k, shard.shape[0]), metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(scores, np.where(idx >= 0, idx + start, -1))
        del shard
    heap.finalize()
    return heap.D, heap.I


def run_from_indices(scores: np.ndarray, idx: np.ndarray, passage_ids: Sequence[str],
                     query_ids: Sequence[str]) -> dict[str, dict[str, float]]:
    """A run ``{qid: {docid: score}}`` from ``search_indices``' arrays (chapter 4)."""
    if len(query_ids) != len(scores):
        raise ValueError(f"got {len(scores)} query results but {len(query_ids)} query ids")
    return {str(qid): {passage_ids[j]: float(s) for s, j in zip(scores[i], idx[i]) if j >= 0}
            for i, qid in enumerate(query_ids)}


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
    Exact (``search_indices``, shard by shard) unless ``index_type`` names an approximate index
    (``FaissIndex``)."""
    if len(passage_ids) != len(passage_embs):
        raise ValueError(f"passage_embs must be [N, H] with N = len(passage_ids) = {len(passage_ids)}, got {passage_embs.shape}")
    if index_type == "flat":
        return run_from_indices(*search_indices(passage_embs, query_embs, k, memory_budget), list(passage_ids), query_ids)
    return FaissIndex(passage_embs, passage_ids, index_type=index_type, memory_budget=memory_budget).search(
        query_embs, query_ids, k=k
    )


def evaluate_retriever(
    model_dir_or_model: Any,
    beir_data: Any,
    split: str = "test",
    tokenizer=None,
    q_max_len: int = 32,
    p_max_len: int = 128,
    k: int | None = None,
    metrics: Sequence[str] = ("nDCG@10", "RR@10", "R@100"),
    batch_size: int = 128,
    device: str | None = None,
    corpus_embeddings: tuple[np.ndarray, list[str]] | None = None,
    index_type: str = "flat",
    embeddings_path: str | os.PathLike | None = None,
    embedding_dtype: str = "float32",
) -> dict:
    """Encode the corpus and the split's queries, search, score (chapter 4).

    ``metrics``: ir_measures names scored against the qrels (``nDCG@10``, ``RR@10``, ``R@1000``)
    and DPR's answer accuracy ``Top-k`` (NQ, TriviaQA: ``metrics.topk_answer_accuracy`` against the
    split's ``answers``). ``k``, the run's depth, defaults to the deepest cutoff asked for (at least
    100); a shallower ``k`` is refused. ``embeddings_path`` writes the corpus embeddings to a
    ``.npy`` memmap in ``embedding_dtype`` (``encode_corpus``) instead of memory.
    Returns ``{"metrics": {name: value}, "run": run, "corpus_embeddings": (embs, ids)}``; pass
    ``corpus_embeddings`` back in (e.g. to ``mine_hard_negatives``) to skip re-encoding the corpus
    with the same model.
    """
    need = metric_depth(metrics)
    k = k if k is not None else max(need or 0, 100)
    qrels, answers = split_labels(beir_data, split, metrics)
    model, tokenizer, device = load_model_and_tokenizer(model_dir_or_model, tokenizer, device, caller="evaluate_retriever")
    qids_all, qtexts_all = query_columns(beir_data.queries)
    if corpus_embeddings is None:
        corpus_embeddings = encode_corpus(model, beir_data.corpus, tokenizer, p_max_len, path=embeddings_path,
                                          dtype=embedding_dtype, batch_size=batch_size, device=device)
    p_embs, p_ids = corpus_embeddings
    if need and k < min(need, len(p_ids)):
        raise ConfigError(f"k={k} is shallower than the deepest metric asked for (top {need}); use k >= {need} "
                          f"(command line: --k {need})")
    if qrels:
        check_qrels(qrels, p_ids, qids_all)
    qtext = dict(zip(qids_all, qtexts_all))
    qids = [q for q in qids_all if q in qrels or q in answers]
    if not qids:
        raise SchemaError(f"split {split!r}: none of the queries has qrels; nothing to evaluate")
    q_embs = encode(model, [qtext[q] for q in qids], tokenizer, max_len=q_max_len, batch_size=batch_size, device=device, side="query")
    run = search(p_embs, p_ids, q_embs, qids, k=k, index_type=index_type)
    return {"metrics": score_run(beir_data, split, run, metrics), "run": run, "corpus_embeddings": corpus_embeddings}
