"""Whole-word MLM masking (condenser_lite/modeling/masking.py, chapter 2): MLMCollator on blocks
packed from made-up text."""

import pytest
import torch
from datasets import Dataset
from toy_data import SPECIALS, pseudo_text

from condenser_lite.data.packing import pack_blocks
from condenser_lite.modeling.masking import MLMCollator


@pytest.fixture(scope="module")
def blocks(pseudo_tokenizer):
    ds = Dataset.from_dict({"text": pseudo_text(3, 300, (2, 10))})
    return pack_blocks(ds, pseudo_tokenizer, max_len=64, short_seq_prob=0.3)["input_ids"]


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


def test_collator_pads_and_never_masks_specials(pseudo_tokenizer, blocks):
    collator = MLMCollator(pseudo_tokenizer, pad_to_multiple_of=8)
    examples = [{"input_ids": ids} for ids in blocks[:16]]
    torch.manual_seed(0)
    batch = collator(examples)
    lengths = [len(e["input_ids"]) for e in examples]
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] >= max(lengths)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["attention_mask"].sum(1).tolist() == lengths
    special = torch.tensor(pseudo_tokenizer.all_special_ids)
    for row, ids in enumerate(blocks[:16]):
        original = torch.tensor(ids)
        n = len(ids)
        labels, inputs = batch["labels"][row], batch["input_ids"][row]
        assert (labels[n:] == -100).all() and (inputs[n:] == pseudo_tokenizer.pad_token_id).all()
        is_special = torch.isin(original, special)
        assert (labels[:n][is_special] == -100).all() and (inputs[:n][is_special] == original[is_special]).all()
        chosen = labels[:n] != -100
        assert chosen.any()  # at least one masked token per sequence
        assert (labels[:n][chosen] == original[chosen]).all()
        assert (inputs[:n][~chosen] == original[~chosen]).all()  # nothing else is touched
        assert not torch.isin(inputs[:n][chosen], special[special != pseudo_tokenizer.mask_token_id]).any()


def test_collator_head_copy_masks_more_and_keeps_the_backbones_masks(pseudo_tokenizer, blocks):
    """E5: with head_mlm_probability the backbone's batch is exactly the one drawn without it (same
    seed), and the head's copy selects about that share of whole words, every backbone label
    among them, each extra one shown as [MASK]."""
    plain, variant = MLMCollator(pseudo_tokenizer), MLMCollator(pseudo_tokenizer, head_mlm_probability=0.5)
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
    mask_id = pseudo_tokenizer.mask_token_id
    assert bool((b["head_input_ids"][extra] == mask_id).all())
    assert torch.equal(b["head_input_ids"][~extra], b["input_ids"][~extra])
    special = torch.isin(b["input_ids"], torch.tensor(pseudo_tokenizer.all_special_ids)) & ~backbone
    share = selected.sum() / (~special & (b["attention_mask"] == 1)).sum()
    assert 0.45 < float(share) < 0.55, float(share)
    with pytest.raises(ValueError, match="head_mlm_probability"):
        MLMCollator(pseudo_tokenizer, head_mlm_probability=0.1)


def test_collator_masking_statistics_and_whole_words(pseudo_tokenizer, blocks):
    collator = MLMCollator(pseudo_tokenizer)
    torch.manual_seed(1)
    n_real = n_selected = n_mask = n_random = 0
    for start in range(0, len(blocks), 64):
        chunk = blocks[start:start + 64]
        batch = collator([{"input_ids": ids} for ids in chunk])
        for row, ids in enumerate(chunk):
            labels = batch["labels"][row, : len(ids)]
            inputs = batch["input_ids"][row, : len(ids)]
            words = _word_ids(pseudo_tokenizer, ids)
            n_real += sum(w >= 0 for w in words)
            selected = (labels != -100).tolist()
            for w in set(words) - {-1}:  # a word is selected whole or not at all
                assert len({s for s, wi in zip(selected, words) if wi == w}) == 1
            chosen = labels != -100
            n_selected += int(chosen.sum())
            n_mask += int((inputs[chosen] == pseudo_tokenizer.mask_token_id).sum())
            n_random += int(((inputs[chosen] != pseudo_tokenizer.mask_token_id) & (inputs[chosen] != labels[chosen])).sum())
    assert n_selected > 4000
    assert 0.14 < n_selected / n_real < 0.16
    assert abs(n_mask / n_selected - 0.8) < 0.02
    # random replacements that happen to draw the original token count as "unchanged" (~1/95 of them)
    assert abs(n_random / n_selected - 0.1) < 0.015
    assert abs(1 - (n_mask + n_random) / n_selected - 0.1) < 0.015


def test_collator_without_whole_words_takes_exact_budget(pseudo_tokenizer, blocks):
    collator = MLMCollator(pseudo_tokenizer, whole_word=False)
    torch.manual_seed(2)
    batch = collator([{"input_ids": ids} for ids in blocks[:32]])
    special = torch.tensor(pseudo_tokenizer.all_special_ids)
    for row, ids in enumerate(blocks[:32]):
        n_real = int((~torch.isin(torch.tensor(ids), special)).sum())
        assert int((batch["labels"][row] != -100).sum()) == max(1, round(0.15 * n_real))


def test_collator_is_deterministic_under_torch_manual_seed(pseudo_tokenizer, blocks):
    collator = MLMCollator(pseudo_tokenizer)
    examples = [{"input_ids": ids} for ids in blocks[:32]]
    torch.manual_seed(123)
    a = collator(examples)
    torch.manual_seed(123)
    b = collator(examples)
    c = collator(examples)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["labels"], c["labels"])


def test_collator_short_sequences_get_one_label_and_all_special_batch_raises(pseudo_tokenizer):
    collator = MLMCollator(pseudo_tokenizer)
    cls_id, sep_id = pseudo_tokenizer.cls_token_id, pseudo_tokenizer.sep_token_id
    word = pseudo_tokenizer("ka", add_special_tokens=False)["input_ids"]
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
        MLMCollator(pseudo_tokenizer.backend_tokenizer)
