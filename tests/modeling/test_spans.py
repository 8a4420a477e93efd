"""coCondenser span pairs: two random, non-overlapping spans per document, fresh every epoch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from locations import MIRROR

from condenser_lite.modeling.spans import SpanPairCollator, SpanPairs, tokenize_documents


def docs_of_lengths(lengths):
    """Documents whose token ids are their positions offset per document: a span's ids tell
    exactly where it came from (doc d holds ids d*10_000 + 0 .. L-1)."""
    return [list(range(d * 10_000, d * 10_000 + n)) for d, n in enumerate(lengths)]


def positions(span, doc_id):
    return [t - doc_id * 10_000 for t in span]


LENGTHS = [1000, 300, 254, 253, 200, 127, 60, 32, 31, 20, 5, 0]


def test_spans_are_contiguous_inside_the_document_and_never_overlap():
    docs = docs_of_lengths(LENGTHS)
    pairs = SpanPairs(docs, max_len=128, min_span=16, seed=3)
    kept = [i for i, n in enumerate(LENGTHS) if n >= 32]
    assert list(pairs.doc_index) == kept
    for epoch in range(5):
        data = pairs(epoch)
        assert len(data) == len(kept)
        for k, doc_id in enumerate(kept):
            L = LENGTHS[doc_id]
            s1, s2 = (positions(s, doc_id) for s in data[k]["spans"])
            for s in (s1, s2):
                assert s == list(range(s[0], s[0] + len(s)))  # contiguous piece of this document
                assert 0 <= s[0] and s[-1] < L
                assert 16 <= len(s) <= 126  # at least min_span, at most max_len - 2
            assert not set(s1) & set(s2)
            if L >= 2 * 126:  # long enough for two full-length spans
                assert len(s1) == len(s2) == 126
            else:  # one cut: the two parts tile the document
                assert sorted(s1 + s2) == list(range(L))


def test_fresh_spans_each_epoch_and_same_per_seed_and_epoch():
    docs = docs_of_lengths([1000] * 20 + [150] * 20)
    a, b = SpanPairs(docs, max_len=64, min_span=8, seed=0), SpanPairs(docs, max_len=64, min_span=8, seed=0)
    assert list(a(0)) == list(b(0)) and list(a(1)) == list(b(1))
    assert list(a(0)) != list(a(1))
    assert list(a(0)) != list(SpanPairs(docs, max_len=64, min_span=8, seed=1)(0))
    # Not a function of the global RNG state (the loop reseeds it anyway, but resume needs this).
    torch.manual_seed(123)
    first = list(a(2))
    torch.manual_seed(456)
    assert list(a(2)) == first
    # Both orders and many different start positions occur: the draw really is random.
    bounds = a(0).span_bounds()
    assert (bounds[:, 0, 0] < bounds[:, 1, 0]).any() and (bounds[:, 0, 0] > bounds[:, 1, 0]).any()
    assert len({int(x) for x in bounds[:20, :, 0].ravel()}) > 20


def test_short_documents_are_skipped_counted_and_reported():
    docs = docs_of_lengths([100, 15, 3, 40, 0])
    # a warning the user sees (not only a log line), with the share and the fix
    with pytest.warns(UserWarning, match=r"skipped 3 of 5 documents \(60%\).*--min-span"):
        pairs = SpanPairs(docs, max_len=32, min_span=8)
    assert pairs.n_skipped == 3 and len(pairs) == 2 and pairs.n_documents == 5
    # A document of exactly 2 * min_span tokens gives two spans of min_span tokens.
    exact = SpanPairs(docs_of_lengths([16]), max_len=32, min_span=8)(0)[0]["spans"]
    assert sorted(map(len, exact)) == [8, 8]


def test_all_too_short_raises_naming_min_span():
    with pytest.raises(ValueError, match="min_span=50"):
        SpanPairs(docs_of_lengths([10, 99, 0]), max_len=128, min_span=50)


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="min_span"):
        SpanPairs(docs_of_lengths([100]), max_len=16, min_span=15)
    with pytest.raises(ValueError, match="max_len"):
        SpanPairs(docs_of_lengths([100]), max_len=2, min_span=1)


class RecordingCollator:
    cls_id, sep_id = 101, 102

    def __init__(self):
        self.seen = None

    def __call__(self, examples):
        self.seen = examples
        return {"n": len(examples)}


def test_collator_flattens_partners_adjacent_and_adds_cls_sep():
    docs = docs_of_lengths([300, 100, 80])
    data = SpanPairs(docs, max_len=32, min_span=8)(0)
    rec = RecordingCollator()
    SpanPairCollator(rec, cls_id=101, sep_id=102)([data[2], data[0]])
    flat = [e["input_ids"] for e in rec.seen]
    assert len(flat) == 4
    expected = [data[2]["spans"][0], data[2]["spans"][1], data[0]["spans"][0], data[0]["spans"][1]]
    assert flat == [[101, *s, 102] for s in expected]
    with pytest.raises(ValueError, match="SpanPairs"):
        SpanPairCollator(rec, cls_id=101, sep_id=102)([{"input_ids": [1, 2]}])
    with pytest.raises(ValueError, match="cls_id"):
        SpanPairCollator(rec)


SCIFACT = Path(os.environ.get("CONDENSER_LITE_DATA", MIRROR)) / "scifact" / "corpus.jsonl"


@pytest.mark.skipif(not SCIFACT.exists(), reason="needs the local data mirror (CONDENSER_LITE_DATA)")
def test_scifact_abstracts_end_to_end_with_mlm_collator():
    from condenser_lite.data.tokenizer import train_wordpiece
    from condenser_lite.modeling.masking import MLMCollator

    with SCIFACT.open() as f:
        rows = [json.loads(line) for _, line in zip(range(60), f)]
    tok = train_wordpiece([r["title"] + " " + r["text"] for r in rows], vocab_size=400)
    ids = tokenize_documents(rows, tok)
    assert len(ids) == 60
    assert ids[0][:3] == tok(rows[0]["title"], add_special_tokens=False)["input_ids"][:3]  # title first
    assert tok.cls_token_id not in ids[0] and tok.sep_token_id not in ids[0]
    pairs = SpanPairs(ids, max_len=64, min_span=16)
    data = pairs(0)
    collate = SpanPairCollator(MLMCollator(tok))
    torch.manual_seed(0)
    batch = collate([data[i] for i in range(4)])
    assert batch["input_ids"].shape[0] == 8
    assert batch["input_ids"].shape[1] <= 64
    assert (batch["input_ids"][:, 0] == tok.cls_token_id).all()
    assert ((batch["labels"] != -100).sum(1) >= 1).all()  # every span is masked on its own
    # Row 2i and 2i+1 hold document i's two spans (unmasked tokens agree with the spans).
    for r in range(8):
        span = data[r // 2]["spans"][r % 2]
        n = len(span) + 2
        got = torch.where(batch["labels"][r, :n] == -100, batch["input_ids"][r, :n], batch["labels"][r, :n])
        assert got.tolist() == [tok.cls_token_id, *span, tok.sep_token_id]
        assert batch["attention_mask"][r].sum() == n
