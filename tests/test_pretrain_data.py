"""Sentence splitting, block packing and whole-word MLM masking (chapter 2)."""

import random

import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from condenser_lite.data.packing import heldout_split, mlm_eval_batches, pack_blocks, split_sentences
from condenser_lite.modeling.masking import MLMCollator

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _pseudo_text(seed: int, n_docs: int, sentences_per_doc=(1, 12)) -> list[str]:
    """Documents of made-up words built from syllables, so a small WordPiece has many ## pieces."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "tas", "vo", "pri", "del", "sun", "mar", "tek", "o", "a", "is", "the"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.choice([1, 1, 2, 2, 3, 4]))) for _ in range(80)]

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 14))).capitalize() + rng.choice(".!?")

    return [" ".join(sentence() for _ in range(rng.randint(*sentences_per_doc))) for _ in range(n_docs)]


@pytest.fixture(scope="module")
def tokenizer():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(_pseudo_text(0, 200), trainers.WordPieceTrainer(vocab_size=100, special_tokens=SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )


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


def test_pack_blocks_never_crosses_documents_and_respects_max_len(tokenizer):
    texts = _pseudo_text(1, 30)
    max_len = 32
    blocks = pack_blocks(Dataset.from_dict({"text": texts}), tokenizer, max_len=max_len, short_seq_prob=0.0, min_len=1)
    assert blocks.column_names == ["input_ids", "doc_index"]
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    by_doc = {}
    for ids, doc in zip(blocks["input_ids"], blocks["doc_index"]):
        assert ids[0] == cls_id and ids[-1] == sep_id and len(ids) <= max_len
        assert cls_id not in ids[1:-1] and sep_id not in ids[1:-1]
        by_doc.setdefault(doc, []).append(ids[1:-1])
    assert sorted(by_doc) == list(range(len(texts)))
    n_cut = 0
    for doc, doc_blocks in by_doc.items():
        stream, ends, longest = _doc_stream(tokenizer, texts[doc])
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


def test_pack_blocks_cuts_overlong_sentences_and_drops_short_blocks(tokenizer):
    long_sentence = " ".join(["kalomiren tasvo"] * 40) + "."
    ds = Dataset.from_dict({"text": [long_sentence, "Ka lo.", long_sentence + " Mi."]})
    n_tokens = len(tokenizer(long_sentence, add_special_tokens=False)["input_ids"])
    assert n_tokens > 3 * 30
    blocks = pack_blocks(ds, tokenizer, max_len=32, short_seq_prob=0.0, min_len=8)
    first = [ids for ids, d in zip(blocks["input_ids"], blocks["doc_index"]) if d == 0]
    assert all(len(ids) == 32 for ids in first[:-1])
    kept = sum(len(ids) - 2 for ids in first)
    assert n_tokens - kept == (n_tokens % 30 if n_tokens % 30 < 8 else 0)  # only a short tail may be dropped
    assert 1 not in blocks["doc_index"]  # "Ka lo." is 3 tokens < min_len: dropped
    assert all(len(ids) - 2 >= 8 for ids in blocks["input_ids"])


def test_pack_blocks_short_targets_and_determinism(tokenizer):
    ds = Dataset.from_dict({"text": _pseudo_text(2, 40, (8, 16))})
    full = pack_blocks(ds, tokenizer, max_len=64, short_seq_prob=0.0)
    short = pack_blocks(ds, tokenizer, max_len=64, short_seq_prob=1.0, seed=0)
    mean = lambda d: sum(map(len, d["input_ids"])) / len(d)  # noqa: E731
    assert mean(short) < 0.8 * mean(full)
    assert all(len(ids) <= 64 for ids in short["input_ids"])
    again = pack_blocks(ds, tokenizer, max_len=64, short_seq_prob=1.0, seed=0)
    other = pack_blocks(ds, tokenizer, max_len=64, short_seq_prob=1.0, seed=1)
    assert again["input_ids"] == short["input_ids"]
    assert other["input_ids"] != short["input_ids"]


def test_pack_blocks_rejects_bad_arguments(tokenizer):
    ds = Dataset.from_dict({"body": ["Some text here."]})
    with pytest.raises(ValueError, match="no column 'text'"):
        pack_blocks(ds, tokenizer)
    ds = Dataset.from_dict({"text": ["Some text here."]})
    with pytest.raises(ValueError, match="max_len"):
        pack_blocks(ds, tokenizer, max_len=8, min_len=8)
    with pytest.raises(ValueError, match="short_seq_prob"):
        pack_blocks(ds, tokenizer, short_seq_prob=1.5)


# ---- MLMCollator ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def blocks(tokenizer):
    ds = Dataset.from_dict({"text": _pseudo_text(3, 300, (2, 10))})
    return pack_blocks(ds, tokenizer, max_len=64, short_seq_prob=0.3)["input_ids"]


def _word_ids(tokenizer, ids):
    """Word index of each non-special token (a token and its following ## pieces), -1 for specials."""
    out, word = [], -1
    for i, tok in enumerate(tokenizer.convert_ids_to_tokens(ids)):
        if tok in SPECIALS:
            out.append(-1)
            continue
        if not tok.startswith("##") or i == 0 or out[-1] == -1:
            word += 1
        out.append(word)
    return out


def test_collator_pads_and_never_masks_specials(tokenizer, blocks):
    collator = MLMCollator(tokenizer, pad_to_multiple_of=8)
    examples = [{"input_ids": ids} for ids in blocks[:16]]
    torch.manual_seed(0)
    batch = collator(examples)
    lengths = [len(e["input_ids"]) for e in examples]
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] >= max(lengths)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["attention_mask"].sum(1).tolist() == lengths
    special = torch.tensor(tokenizer.all_special_ids)
    for row, ids in enumerate(blocks[:16]):
        original = torch.tensor(ids)
        n = len(ids)
        labels, inputs = batch["labels"][row], batch["input_ids"][row]
        assert (labels[n:] == -100).all() and (inputs[n:] == tokenizer.pad_token_id).all()
        is_special = torch.isin(original, special)
        assert (labels[:n][is_special] == -100).all() and (inputs[:n][is_special] == original[is_special]).all()
        chosen = labels[:n] != -100
        assert chosen.any()  # at least one masked token per sequence
        assert (labels[:n][chosen] == original[chosen]).all()
        assert (inputs[:n][~chosen] == original[~chosen]).all()  # nothing else is touched
        assert not torch.isin(inputs[:n][chosen], special[special != tokenizer.mask_token_id]).any()


def test_collator_head_copy_masks_more_and_keeps_the_backbones_masks(tokenizer, blocks):
    """E5: with head_mlm_probability the backbone's batch is exactly the one drawn without it (same
    seed), and the head's copy selects about that share of whole words, every backbone label
    among them, each extra one shown as [MASK]."""
    plain, variant = MLMCollator(tokenizer), MLMCollator(tokenizer, head_mlm_probability=0.5)
    examples = blocks[:32]
    torch.manual_seed(7)
    a = plain(examples)
    torch.manual_seed(7)
    b = variant(examples)
    for k in ("input_ids", "attention_mask", "labels"):
        assert torch.equal(a[k], b[k])
    selected, backbone = b["head_labels"] != -100, b["labels"] != -100
    assert bool((selected | ~backbone).all())  # every backbone label is a head label too
    assert torch.equal(b["head_labels"][backbone], b["labels"][backbone])
    extra = selected & ~backbone
    mask_id = tokenizer.mask_token_id
    assert bool((b["head_input_ids"][extra] == mask_id).all())
    assert torch.equal(b["head_input_ids"][~extra], b["input_ids"][~extra])
    special = torch.isin(b["input_ids"], torch.tensor(tokenizer.all_special_ids)) & ~backbone
    share = selected.sum() / (~special & (b["attention_mask"] == 1)).sum()
    assert 0.45 < float(share) < 0.55, float(share)
    with pytest.raises(ValueError, match="head_mlm_probability"):
        MLMCollator(tokenizer, head_mlm_probability=0.1)


def test_collator_masking_statistics_and_whole_words(tokenizer, blocks):
    collator = MLMCollator(tokenizer)
    torch.manual_seed(1)
    n_real = n_selected = n_mask = n_random = 0
    for start in range(0, len(blocks), 64):
        chunk = blocks[start:start + 64]
        batch = collator([{"input_ids": ids} for ids in chunk])
        for row, ids in enumerate(chunk):
            labels = batch["labels"][row, : len(ids)]
            inputs = batch["input_ids"][row, : len(ids)]
            words = _word_ids(tokenizer, ids)
            n_real += sum(w >= 0 for w in words)
            selected = (labels != -100).tolist()
            for w in set(words) - {-1}:  # a word is selected whole or not at all
                assert len({s for s, wi in zip(selected, words) if wi == w}) == 1
            chosen = labels != -100
            n_selected += int(chosen.sum())
            n_mask += int((inputs[chosen] == tokenizer.mask_token_id).sum())
            n_random += int(((inputs[chosen] != tokenizer.mask_token_id) & (inputs[chosen] != labels[chosen])).sum())
    assert n_selected > 4000
    assert 0.14 < n_selected / n_real < 0.16
    assert abs(n_mask / n_selected - 0.8) < 0.02
    # random replacements that happen to draw the original token count as "unchanged" (~1/95 of them)
    assert abs(n_random / n_selected - 0.1) < 0.015
    assert abs(1 - (n_mask + n_random) / n_selected - 0.1) < 0.015


def test_collator_without_whole_words_takes_exact_budget(tokenizer, blocks):
    collator = MLMCollator(tokenizer, whole_word=False)
    torch.manual_seed(2)
    batch = collator([{"input_ids": ids} for ids in blocks[:32]])
    special = torch.tensor(tokenizer.all_special_ids)
    for row, ids in enumerate(blocks[:32]):
        n_real = int((~torch.isin(torch.tensor(ids), special)).sum())
        assert int((batch["labels"][row] != -100).sum()) == max(1, round(0.15 * n_real))


def test_collator_is_deterministic_under_torch_manual_seed(tokenizer, blocks):
    collator = MLMCollator(tokenizer)
    examples = [{"input_ids": ids} for ids in blocks[:32]]
    torch.manual_seed(123)
    a = collator(examples)
    torch.manual_seed(123)
    b = collator(examples)
    c = collator(examples)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["labels"], c["labels"])


def test_collator_short_sequences_get_one_label_and_all_special_batch_raises(tokenizer):
    collator = MLMCollator(tokenizer)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    word = tokenizer("ka", add_special_tokens=False)["input_ids"]
    torch.manual_seed(0)
    for _ in range(20):
        batch = collator([[cls_id, *word, sep_id], [cls_id, *word, *word, sep_id], torch.tensor([cls_id, sep_id])])
        assert (batch["labels"][:2] != -100).sum(1).tolist() == [len(word), len(word)]
        assert (batch["labels"][2] == -100).all()
    with pytest.raises(ValueError, match="no maskable token"):
        collator([[cls_id, sep_id]])
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        collator([[cls_id, 10_000, sep_id]])
    with pytest.raises(TypeError, match="PreTrainedTokenizerFast"):
        MLMCollator(tokenizer.backend_tokenizer)


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


def test_eval_batches_are_fixed_and_leave_the_global_rng_alone(tokenizer):
    blocks = pack_blocks(Dataset.from_dict({"text": _pseudo_text(3, 40)}), tokenizer, max_len=32)
    collator = MLMCollator(tokenizer)
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
