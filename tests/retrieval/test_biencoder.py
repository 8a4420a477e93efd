"""The DPR-style bi-encoder (condenser_lite/retrieval/biencoder.py): its collator, last-layer [CLS]
embeddings and saved folders, the loss formula, and the gradient cache of retrieval_step. A tiny
random model and hand-made examples; a few seconds in all."""

import random

import numpy as np
import pytest
import torch
from toy_data import EXAMPLES

from condenser_lite.retrieval.biencoder import BiEncoder, RetrievalCollator, retrieval_step
from condenser_lite.retrieval.search import encode
from condenser_lite.utils.errors import SchemaError


# --- collator ----------------------------------------------------------------------------


def test_collator_shapes_and_positive_first(tokenizer):
    col = RetrievalCollator(tokenizer, q_max_len=8, p_max_len=16, train_n_passages=4)
    random.seed(0)
    batch = col(EXAMPLES)
    assert batch["query_input_ids"].shape[0] == 2 and batch["query_input_ids"].shape[1] <= 8
    assert batch["passage_input_ids"].shape[0] == 8 and batch["passage_input_ids"].shape[1] <= 16
    assert batch["passage_attention_mask"].shape == batch["passage_input_ids"].shape
    # Re-draw the same groups with the same seed and check the layout: positive at i*n, then negatives.
    random.seed(0)
    groups = [col.group(ex) for ex in EXAMPLES]
    for i, (ex, group) in enumerate(zip(EXAMPLES, groups)):
        assert group[0] in ex["positive_passages"]
        negs = group[1:]
        assert len(negs) == 3 and len({p["docid"] for p in negs}) == 3  # without replacement
        assert all(p in ex["negative_passages"] for p in negs)
        # the tokenised row equals the "title [SEP] text" encoding of that passage
        expected = tokenizer(f"{group[0]['title']} [SEP] {group[0]['text']}", truncation=True, max_length=16)["input_ids"]
        row = batch["passage_input_ids"][i * 4]
        assert row[: len(expected)].tolist() == expected
        assert int(batch["passage_attention_mask"][i * 4].sum()) == len(expected)
    sep = tokenizer.sep_token_id
    assert (batch["passage_input_ids"][0] == sep).sum() == 2  # [CLS] title [SEP] text [SEP]


def test_collator_is_driven_by_python_random(tokenizer):
    col = RetrievalCollator(tokenizer, train_n_passages=3)
    random.seed(1)
    a = col(EXAMPLES)
    random.seed(1)
    b = col(EXAMPLES)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_collator_too_few_or_no_negatives(tokenizer):
    col = RetrievalCollator(tokenizer, train_n_passages=8)  # q2 has 4 negatives < 7
    with pytest.warns(UserWarning, match="with replacement"):
        batch = col(EXAMPLES)
    assert batch["passage_input_ids"].shape[0] == 16
    bare = dict(EXAMPLES[0], negative_passages=[])
    with pytest.raises(SchemaError, match="no negative passages"):
        col([bare])
    only_pos = RetrievalCollator(tokenizer, train_n_passages=1)([bare])
    assert only_pos["passage_input_ids"].shape[0] == 1


# --- bi-encoder and encode -----------------------------------------------------------------


def test_biencoder_uses_last_layer_cls_and_round_trips(ckpt, tokenizer, tmp_path):
    model = BiEncoder.from_pretrained(ckpt).eval()
    assert not model.untied and model.encoder("query") is model.encoder("passage")
    texts = ["what erupts lava", "cells divide into two cells by mitosis", "jazz"]
    embs = encode(model, texts, tokenizer, max_len=16, batch_size=2)
    enc = tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        ref = model.query_encoder(**enc).last_hidden_state[:, 0].numpy()
    assert embs.dtype == np.float32 and embs.shape == (3, 32)
    np.testing.assert_allclose(embs, ref, atol=1e-5)  # length sorting restores the input order
    model.save_pretrained(tmp_path / "tied")
    again = BiEncoder.from_pretrained(tmp_path / "tied")
    np.testing.assert_allclose(encode(again, texts, tokenizer, max_len=16), embs, atol=1e-6)

    untied = BiEncoder.from_pretrained(ckpt, untied=True)
    assert untied.untied and untied.encoder("query") is not untied.encoder("passage")
    with torch.no_grad():
        for p in untied.encoder("passage").parameters():
            p.add_(0.01)
    untied.save_pretrained(tmp_path / "untied")
    assert (tmp_path / "untied" / "query" / "config.json").exists()
    loaded = BiEncoder.from_pretrained(tmp_path / "untied")
    assert loaded.untied
    pairs = (["volcano"], ["magma erupts"])
    q = encode(loaded, pairs[1], tokenizer, max_len=16, side="query")
    p = encode(loaded, pairs, tokenizer, max_len=16)
    assert not np.allclose(q, encode(loaded, pairs[1], tokenizer, max_len=16, side="passage"))
    np.testing.assert_allclose(p, encode(untied, pairs, tokenizer, max_len=16), atol=1e-6)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        encode(model, texts, tokenizer, max_len=512)


def test_forward_loss_matches_the_formula(ckpt, tokenizer):
    model = BiEncoder.from_pretrained(ckpt, train_n_passages=3).eval()
    random.seed(0)
    batch = RetrievalCollator(tokenizer, train_n_passages=3)(EXAMPLES)
    with torch.no_grad():
        out = model(**batch)
        q = model.encode_query(batch["query_input_ids"], batch["query_attention_mask"])
        p = model.encode_passage(batch["passage_input_ids"], batch["passage_attention_mask"])
    scores = q @ p.T
    expected = -(scores[0, 0] - scores[0].logsumexp(0) + scores[1, 3] - scores[1].logsumexp(0)) / 2
    assert float(out.loss) == pytest.approx(float(expected), rel=1e-5)
    # accuracy: the share of queries whose own positive (passage i * n) outscores every passage of the batch
    hits = [int(scores[i].argmax()) == 3 * i for i in range(2)]
    assert float(out.accuracy) == sum(hits) / 2 and out.q_reps.shape == (2, 32) and out.p_reps.shape == (6, 32)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.0, 0.2], [0.0, 1.0], [0.5, 0.0], [0.2, 0.2]])
    assert float(model.compute_loss(q, p)[1]) == 1.0
    p[1] = torch.tensor([0.0, 2.0])  # a negative of query 0 now outscores query 1's positive: in-batch, it counts
    assert float(model.compute_loss(q, p)[1]) == 0.5
    bad = RetrievalCollator(tokenizer, train_n_passages=2)(EXAMPLES)
    with pytest.raises(ValueError, match="train_n_passages"):
        model(**bad)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("untied", [False, True])
def test_gradient_cache_matches_full_batch(ckpt, tokenizer, untied):
    model = BiEncoder.from_pretrained(ckpt, untied=untied, train_n_passages=3).eval()  # no dropout: exact
    random.seed(0)
    batch = RetrievalCollator(tokenizer, train_n_passages=3)(EXAMPLES)
    full = retrieval_step(model, batch)
    g_full = _grads(model)
    model.zero_grad()
    cached = retrieval_step(model, batch, chunk_size=2)
    g_cached = _grads(model)
    assert cached["loss"] == pytest.approx(full["loss"], rel=1e-6)
    assert g_full.keys() == g_cached.keys() and len(g_full) > 10
    for name in g_full:
        torch.testing.assert_close(g_cached[name], g_full[name], atol=1e-5, rtol=1e-3)


def test_gradient_cache_replays_dropout(ckpt, tokenizer):
    """With dropout on, the cached gradient is exact only if pass 2 replays pass 1's RNG."""
    model = BiEncoder.from_pretrained(ckpt, train_n_passages=3).train()
    random.seed(0)
    batch = RetrievalCollator(tokenizer, train_n_passages=3)(EXAMPLES)

    def cached(replay):
        model.zero_grad()
        torch.manual_seed(0)
        retrieval_step(model, batch, chunk_size=2, replay_rng=replay)
        return _grads(model)

    a, b, c = cached(True), cached(True), cached(False)
    name = next(iter(a))
    torch.testing.assert_close(a[name], b[name])
    assert not torch.allclose(a[name], c[name])
