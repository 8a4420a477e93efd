"""coCondenser's training data: two random spans per document, drawn afresh every epoch.

coCondenser (Gao & Callan 2022, section 3.2) takes a random list of documents and "extracts
randomly from each a pair of spans"; the two spans of one document are each other's positive in
the contrastive loss (eq. 6) and every span of another document is a negative. The authors drew
random non-overlapping sequences of about 128 tokens, new ones every epoch. Any document
collection works: the scaled-down book uses the SciFact abstracts, the full-size runs MS MARCO
passages or Wikipedia (``tokenize_documents`` reads rows with ``text`` and an optional ``title``).

The unit of data is a *document* (``{"spans": [ids_1, ids_2]}``), not a span: the training loop
shuffles examples one by one, and shuffling spans would separate partners. ``SpanPairCollator``
then flattens a list of documents into ``2n`` sequences with partners adjacent
(``[d1s1, d1s2, d2s1, d2s2, ...]``, the layout ``losses.span_contrastive_loss`` expects) and masks
every span independently.

Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..utils.errors import ConfigError

__all__ = ["tokenize_documents", "SpanPairs", "EpochSpanPairs", "SpanPairCollator"]


def tokenize_documents(
    dataset: Iterable[dict[str, Any]],
    tokenizer: Any,
    text_field: str = "text",
    title_field: str | None = "title",
    batch_size: int = 1000,
) -> list[list[int]]:
    """Token ids (no special tokens) of ``title + " " + text`` for every row of ``dataset``.

    ``dataset`` is any iterable of dicts (a ``datasets.Dataset``, a list of rows); rows without a
    title (or an empty one) use the text alone. ``tokenizer`` is a ``transformers`` tokenizer
    or a ``tokenizers.Tokenizer``. CLS/SEP are left out because spans are cut from these ids and
    the collator adds them around each span.
    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
    """
    texts: list[str] = []
    for i, row in enumerate(dataset):
        if text_field not in row:
            raise ValueError(
                f"row {i} has no {text_field!r} field (fields: {sorted(row)}); pass text_field= to name the text column"
            )
        title = (row.get(title_field) or "").strip() if title_field else ""
        text = (row[text_field] or "").strip()
        texts.append(f"{title} {text}".strip() if title else text)
    ids: list[list[int]] = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        if hasattr(tokenizer, "encode_batch"):  # tokenizers.Tokenizer
            ids.extend(enc.ids for enc in tokenizer.encode_batch(chunk, add_special_tokens=False))
        else:  # transformers tokenizer
            ids.extend(tokenizer(chunk, add_special_tokens=False)["input_ids"])
    return ids


class EpochSpanPairs(Sequence):
    """One epoch's span pairs: item ``k`` is ``{"spans": [ids_1, ids_2]}`` for the k-th kept document.

    A lazy, read-only sequence (the ids are sliced on access), so a corpus of millions of passages
    costs four integer arrays per epoch rather than millions of Python lists.
    """

    def __init__(self, flat: np.ndarray, doc_start: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        self._flat, self._doc_start, self._starts, self._lengths = flat, doc_start, starts, lengths

    def __len__(self) -> int:
        return len(self._doc_start)

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        base = int(self._doc_start[k])
        spans = []
        for j in range(2):
            s, n = base + int(self._starts[k, j]), int(self._lengths[k, j])
            spans.append(self._flat[s : s + n].tolist())
        return {"spans": spans}

    def span_bounds(self) -> np.ndarray:
        """``[n_docs, 2, 2]`` array of (start, end) of both spans within each kept document."""
        return np.stack([self._starts, self._starts + self._lengths], axis=-1)


class SpanPairs:
    """Draws two random spans per document, a fresh draw per epoch: calling the object with an
    epoch gives that epoch's pairs (so the object itself is the training loop's ``data``).

    >>> span_pairs = SpanPairs([list(range(5, 105)), list(range(5, 45))], max_len=34, min_span=8)
    >>> len(span_pairs(0)), len(span_pairs(0)[0]["spans"])  # both documents give a pair; two spans each
    (2, 2)

    ``documents``: token ids per document (``tokenize_documents``), without special tokens.
    Each span holds at most ``span_len = max_len - 2`` tokens (CLS and SEP are added later). For a
    document of ``L`` tokens:

    * ``L >= 2 * span_len``: two non-overlapping spans of exactly ``span_len`` tokens at random
      positions (the free ``L - 2*span_len`` tokens are split at random into the gaps before,
      between and after them), in random order;
    * ``2 * min_span <= L < 2 * span_len``: one random cut splits the document into two parts of
      ``min_span .. span_len`` tokens each, so the spans cover it without overlapping;
    * ``L < 2 * min_span``: the document cannot give two spans of ``min_span`` tokens: it is skipped
      (a span is never paired with itself or with an overlapping copy). ``n_skipped`` counts them,
      a ``UserWarning`` (``skip_message``) says how many and how to keep them, and ``pretrain``
      records and prints it; if every document is too short, ``ValueError``.

    Choosing ``min_span``: a document of ``L`` tokens (title and text, without CLS/SEP) gives a
    pair if and only if ``L >= 2 * min_span``. A corpus of single sentences (15-25 tokens) needs
    ``min_span`` of about 6 or less; MS MARCO passages are short too (a few sentences, well under
    the ``2 * span_len`` = 252 tokens of the papers' ``max_len`` 128, so every kept passage is cut
    once into two tiling spans), which is why the ``paper`` preset sets ``min_span=8`` (passages
    of fewer than 16 tokens skipped) instead of the scaled-down default 16.

    The draw for an epoch depends only on ``(seed, epoch)`` (its own numpy generator, not the
    global RNG), so a resumed run sees the same spans. Calling the object, ``span_pairs(epoch)``,
    returns that epoch's ``EpochSpanPairs``: a sequence of ``{"spans": [ids_1, ids_2]}`` in document order
    (``draw(epoch)`` gives the bare span bounds); the training loop shuffles it.
    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
    """

    def __init__(self, documents: Sequence[Sequence[int]], max_len: int = 128, min_span: int = 16, seed: int = 0):
        if max_len < 3:
            raise ValueError(f"max_len={max_len} leaves no room for a span next to CLS and SEP; use max_len >= 3")
        self.span_len = max_len - 2
        if not 1 <= min_span <= self.span_len:
            raise ValueError(
                f"min_span={min_span} must be between 1 and max_len - 2 = {self.span_len}; lower min_span or raise max_len"
            )
        if seed < 0:
            raise ValueError(f"seed={seed} must be >= 0")
        self.max_len, self.min_span, self.seed = max_len, min_span, seed
        lengths = np.fromiter((len(d) for d in documents), dtype=np.int64, count=len(documents))
        keep = lengths >= 2 * min_span
        self.n_documents = len(lengths)
        self.n_skipped = int((~keep).sum())
        if not keep.any():
            raise ConfigError(
                f"all {self.n_documents} documents are shorter than 2 * min_span = {2 * min_span} tokens, so none "
                f"can give two non-overlapping spans of min_span={min_span} tokens; lower min_span or use longer documents"
            )
        if self.n_skipped:
            warnings.warn(self.skip_message(), stacklevel=2)
        self.doc_index = np.flatnonzero(keep)  # positions of the kept documents in `documents`
        self.lengths = lengths[keep]
        # Kept documents concatenated into one int32 array (+ offsets): compact and fast to slice.
        self._flat = np.fromiter(
            (t for i in self.doc_index for t in documents[i]), dtype=np.int32, count=int(self.lengths.sum())
        )
        self._doc_start = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def skip_message(self) -> str:
        """One line: how many documents were too short for two spans, and the fix."""
        share = self.n_skipped / max(self.n_documents, 1)
        return (f"coCondenser spans: skipped {self.n_skipped} of {self.n_documents} documents ({share:.0%}) shorter "
                f"than 2 x min_span = {2 * self.min_span} tokens; lower min_span (pretrain --min-span N, or "
                f"--set stages.cocondenser.min_span=N) to keep them")

    def draw(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, lengths)``, each ``[n_docs, 2]``: the spans of every kept document in ``epoch``."""
        if epoch < 0:
            raise ValueError(f"epoch={epoch} must be >= 0")
        rng = np.random.default_rng([self.seed, epoch])  # a function of (seed, epoch) only
        L, S, m = self.lengths, self.span_len, self.min_span
        n = len(L)
        starts = np.zeros((n, 2), dtype=np.int64)
        lens = np.zeros((n, 2), dtype=np.int64)

        long = L >= 2 * S
        # Long documents: split the free tokens into three random gaps (before / between / after).
        free = L[long] - 2 * S
        gaps = np.sort(rng.integers(0, free[:, None] + 1, size=(len(free), 2)), axis=1)
        starts[long, 0], starts[long, 1] = gaps[:, 0], S + gaps[:, 1]
        lens[long] = S

        # Shorter documents: one random cut with both parts in [m, S] tokens, so they tile the document.
        short = ~long
        Ls = L[short]
        lo = np.maximum(m, Ls - S)
        hi = np.minimum(Ls - m, S)
        cut = lo + (rng.random(len(Ls)) * (hi - lo + 1)).astype(np.int64)
        starts[short, 0], starts[short, 1] = 0, cut
        lens[short, 0], lens[short, 1] = cut, Ls - cut

        # Random order within the pair, so "span 1" is not always the earlier one.
        swap = rng.random(n) < 0.5
        starts[swap] = starts[swap][:, ::-1]
        lens[swap] = lens[swap][:, ::-1]
        return starts, lens

    def __call__(self, epoch: int) -> EpochSpanPairs:
        starts, lens = self.draw(epoch)
        return EpochSpanPairs(self._flat, self._doc_start, starts, lens)


class SpanPairCollator:
    """Flattens documents' span pairs into one MLM batch of ``2n`` rows, partners adjacent.

    Each span becomes ``[CLS] span [SEP]`` and ``mlm_collator`` (e.g. ``masking.MLMCollator``,
    which pads and masks but adds no special tokens) is called on
    ``[{"input_ids": d1s1}, {"input_ids": d1s2}, {"input_ids": d2s1}, ...]``, so each span is masked
    independently (the MLM half of coCondenser's loss, eq. 7) and the row order is the one
    ``span_contrastive_loss`` needs (rows 2i and 2i+1 come from one document). ``cls_id``/``sep_id``
    default to ``mlm_collator.tokenizer``'s.
    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
    """

    def __init__(
        self,
        mlm_collator: Callable[[list[dict[str, list[int]]]], dict],
        cls_id: int | None = None,
        sep_id: int | None = None,
    ):
        tokenizer = getattr(mlm_collator, "tokenizer", None)
        self.cls_id = cls_id if cls_id is not None else getattr(tokenizer, "cls_token_id", None)
        self.sep_id = sep_id if sep_id is not None else getattr(tokenizer, "sep_token_id", None)
        if self.cls_id is None or self.sep_id is None:
            raise ValueError(
                "SpanPairCollator needs the CLS and SEP token ids to wrap each span: pass cls_id= and sep_id=, "
                "or an MLM collator whose .tokenizer has cls_token_id and sep_token_id"
            )
        self.mlm_collator = mlm_collator

    def __call__(self, documents: Sequence[dict[str, Any]]) -> dict:
        flat = []
        for i, doc in enumerate(documents):
            spans = doc.get("spans") if isinstance(doc, dict) else None
            if spans is None or len(spans) != 2:
                raise ValueError(
                    f"item {i} is not a span pair {{'spans': [ids_1, ids_2]}}: got "
                    f"{doc if not isinstance(doc, dict) else sorted(doc)}; build the data with SpanPairs"
                )
            flat.extend({"input_ids": [self.cls_id, *s, self.sep_id]} for s in spans)
        return self.mlm_collator(flat)
