"""Sentence splitting, block packing, the held-out split and its fixed evaluation blocks (chapter 2;
condenser_lite/data/packing.py). The masking itself is tests/modeling/test_masking.py's."""

import pytest
import torch
from datasets import Dataset
from toy_data import pseudo_text

from condenser_lite.data.packing import heldout_split, mlm_eval_batches, pack_blocks, split_sentences
from condenser_lite.modeling.masking import MLMCollator

# ---- split_sentences ---------------------------------------------------------------


def test_split_sentences_handles_abbreviations_and_punctuation():
    text = (
        'Dr. Smith went to Washington, D.C. in 1990. He met J. R. R. Tolkien there! Was it fun? '
        '"Yes," he said. It cost $3.50, e.g. a lot. The U.S. Army arrived (see Fig. 3). Then they left... '
        "Next day it rained."
    )
    assert split_sentences(text) == [
        "Dr. Smith went to Washington, D.C. in 1990.",
        "He met J. R. R. Tolkien there!",
        "Was it fun?",
        '"Yes," he said.',
        "It cost $3.50, e.g. a lot.",
        "The U.S. Army arrived (see Fig. 3).",
        "Then they left...",
        "Next day it rained.",
    ]


def test_split_sentences_paragraphs_are_hard_boundaries_and_lowercase_text_splits():
    assert split_sentences("A heading without a stop\nThe body starts here. It goes on\n\n  \nlast") == [
        "A heading without a stop", "The body starts here.", "It goes on", "last",
    ]
    assert split_sentences("all lower case. another one follows! and a third") == [
        "all lower case.", "another one follows!", "and a third",
    ]
    assert split_sentences("") == [] and split_sentences("\n \n") == []


# ---- pack_blocks ---------------------------------------------------------------------


def _doc_stream(tokenizer, text):
    """A document's tokens (no specials) and the offsets where its sentences end."""
    sentences = tokenizer(split_sentences(text), add_special_tokens=False)["input_ids"]
    stream, ends = [], set()
    for s in sentences:
        stream += s
        ends.add(len(stream))
    return stream, ends, max(len(s) for s in sentences)


def test_pack_blocks_never_crosses_documents_and_respects_max_len(pseudo_tokenizer):
    texts = pseudo_text(1, 30)
    max_len = 32
    blocks = pack_blocks(Dataset.from_dict({"text": texts}), pseudo_tokenizer, max_len=max_len, short_seq_prob=0.0,
                         min_len=1)
    assert blocks.column_names == ["input_ids", "doc_index"]
    cls_id, sep_id = pseudo_tokenizer.cls_token_id, pseudo_tokenizer.sep_token_id
    by_doc = {}
    for ids, doc in zip(blocks["input_ids"], blocks["doc_index"]):
        assert ids[0] == cls_id and ids[-1] == sep_id and len(ids) <= max_len
        assert cls_id not in ids[1:-1] and sep_id not in ids[1:-1]
        by_doc.setdefault(doc, []).append(ids[1:-1])
    assert sorted(by_doc) == list(range(len(texts)))
    n_cut = 0
    for doc, doc_blocks in by_doc.items():
        stream, ends, longest = _doc_stream(pseudo_tokenizer, texts[doc])
        # The document's blocks, in order, are exactly its own tokens: nothing from another row, nothing lost.
        assert sum(doc_blocks, []) == stream
        # Blocks end on sentence ends, except where a sentence longer than a block had to be cut.
        offset = 0
        for block in doc_blocks[:-1]:
            offset += len(block)
            if offset not in ends:
                assert longest > max_len - 2
                n_cut += 1
    assert len(blocks) > len(texts)  # the packing really had to split documents


def test_pack_blocks_cuts_overlong_sentences_and_drops_short_blocks(pseudo_tokenizer):
    long_sentence = " ".join(["kalomiren tasvo"] * 40) + "."
    ds = Dataset.from_dict({"text": [long_sentence, "Ka lo.", long_sentence + " Mi."]})
    n_tokens = len(pseudo_tokenizer(long_sentence, add_special_tokens=False)["input_ids"])
    assert n_tokens > 3 * 30
    blocks = pack_blocks(ds, pseudo_tokenizer, max_len=32, short_seq_prob=0.0, min_len=8)
    first = [ids for ids, d in zip(blocks["input_ids"], blocks["doc_index"]) if d == 0]
    assert all(len(ids) == 32 for ids in first[:-1])
    kept = sum(len(ids) - 2 for ids in first)
    assert n_tokens - kept == (n_tokens % 30 if n_tokens % 30 < 8 else 0)  # only a short tail may be dropped
    assert 1 not in blocks["doc_index"]  # "Ka lo." is 3 tokens < min_len: dropped
    assert all(len(ids) - 2 >= 8 for ids in blocks["input_ids"])


def test_pack_blocks_short_targets_and_determinism(pseudo_tokenizer):
    ds = Dataset.from_dict({"text": pseudo_text(2, 40, (8, 16))})
    full = pack_blocks(ds, pseudo_tokenizer, max_len=64, short_seq_prob=0.0)
    short = pack_blocks(ds, pseudo_tokenizer, max_len=64, short_seq_prob=1.0, seed=0)
    mean = lambda d: sum(map(len, d["input_ids"])) / len(d)  # noqa: E731
    assert mean(short) < 0.8 * mean(full)
    assert all(len(ids) <= 64 for ids in short["input_ids"])
    again = pack_blocks(ds, pseudo_tokenizer, max_len=64, short_seq_prob=1.0, seed=0)
    other = pack_blocks(ds, pseudo_tokenizer, max_len=64, short_seq_prob=1.0, seed=1)
    assert again["input_ids"] == short["input_ids"]
    assert other["input_ids"] != short["input_ids"]


def test_pack_blocks_rejects_bad_arguments(pseudo_tokenizer):
    ds = Dataset.from_dict({"body": ["Some text here."]})
    with pytest.raises(ValueError, match="no column 'text'"):
        pack_blocks(ds, pseudo_tokenizer)
    ds = Dataset.from_dict({"text": ["Some text here."]})
    with pytest.raises(ValueError, match="max_len"):
        pack_blocks(ds, pseudo_tokenizer, max_len=8, min_len=8)
    with pytest.raises(ValueError, match="short_seq_prob"):
        pack_blocks(ds, pseudo_tokenizer, short_seq_prob=1.5)


# ---- held-out split and evaluation set ------------------------------------------------------

def _sections(n_docs: int = 60) -> Dataset:
    rows = [{"source": src, "doc_id": f"{src}-{d}", "section": str(s), "text": f"{src} {d} {s}"}
            for src in ("wiki", "news") for d in range(n_docs) for s in range(3)]
    return Dataset.from_list(rows)


def test_heldout_split_keeps_documents_whole_and_ignores_row_order():
    corpus = _sections()
    train, held = heldout_split(corpus, fraction=0.2)
    assert len(train) + len(held) == len(corpus) and 0.08 < len(held) / len(corpus) < 0.35
    held_docs = set(zip(held["source"], held["doc_id"]))
    assert not held_docs & set(zip(train["source"], train["doc_id"]))  # no article on both sides
    assert all(len([1 for r in zip(held["source"], held["doc_id"]) if r == d]) == 3 for d in held_docs)
    shuffled_train, shuffled_held = heldout_split(corpus.shuffle(seed=1), fraction=0.2)
    assert sorted(shuffled_held["text"]) == sorted(held["text"])  # by hash, not by position
    _, other = heldout_split(corpus, fraction=0.2, salt="another")
    assert sorted(other["text"]) != sorted(held["text"])
    with pytest.raises(ValueError, match="no column"):
        heldout_split(corpus.remove_columns("doc_id"))
    with pytest.raises(ValueError, match="one side empty"):
        heldout_split(corpus.select(range(3)), fraction=0.01)


def test_eval_batches_are_fixed_and_leave_the_global_rng_alone(pseudo_tokenizer):
    blocks = pack_blocks(Dataset.from_dict({"text": pseudo_text(3, 40)}), pseudo_tokenizer, max_len=32)
    collator = MLMCollator(pseudo_tokenizer)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = mlm_eval_batches(blocks, collator, n_blocks=20, batch_size=8, seed=5)
    assert torch.rand(1) == before  # the caller's RNG stream is untouched
    b = mlm_eval_batches(blocks, collator, n_blocks=20, batch_size=8, seed=5)
    assert [len(x["input_ids"]) for x in a] == [8, 8, 4]
    for x, y in zip(a, b):
        for k in x:
            assert torch.equal(x[k], y[k])
    c = mlm_eval_batches(blocks, collator, n_blocks=20, batch_size=8, seed=6)
    assert not all(torch.equal(x["labels"], y["labels"]) for x, y in zip(a, c))
