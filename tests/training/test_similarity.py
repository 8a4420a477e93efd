"""similarity.py: STS bi-encoder with cosine regression; loss goes down on a toy, Spearman is right."""


import datasets
import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from tiny_checkpoint import make_checkpoint
from transformers import AutoTokenizer

from condenser_lite.training.loop import TrainConfig
from condenser_lite.training.similarity import PairCollator, SentenceEncoder, evaluate_sts, finetune_sts, sample_pairs

SENTENCES = [
    "a cat sat on the mat", "dogs chase cats in the park", "the protein binds dna",
    "cells divide by mitosis", "lava flows from the volcano", "snow turns into glacier ice",
    "jazz music with a violin", "python code and a compiler",
]




@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("sts_ckpt"), SENTENCES * 3, vocab_size=200, dropout=0.0,
                           max_positions=64)


def toy_pairs() -> datasets.Dataset:
    rows = []
    for i, s in enumerate(SENTENCES):
        rows.append({"sentence1": s, "sentence2": s, "score": 1.0})
        rows.append({"sentence1": s, "sentence2": SENTENCES[(i + 3) % len(SENTENCES)], "score": 0.0})
        rows.append({"sentence1": s, "sentence2": SENTENCES[(i + 1) % len(SENTENCES)], "score": 0.5})
    return datasets.Dataset.from_list(rows)


def test_collator_and_forward(ckpt):
    tok = AutoTokenizer.from_pretrained(ckpt)
    batch = PairCollator(tok, max_len=8)(list(toy_pairs().select(range(4))))
    assert batch["input_ids_a"].shape[0] == 4 and batch["input_ids_a"].shape[1] <= 8
    assert batch["score"].tolist() == [1.0, 0.0, 0.5, 1.0]
    model = SentenceEncoder.from_pretrained(ckpt).eval()
    with torch.no_grad():
        out = model(**batch)
        a = model.encoder(input_ids=batch["input_ids_a"], attention_mask=batch["attention_mask_a"]).last_hidden_state[:, 0]
        b = model.encoder(input_ids=batch["input_ids_b"], attention_mask=batch["attention_mask_b"]).last_hidden_state[:, 0]
    cos = torch.nn.functional.cosine_similarity(a, b)
    assert float(out.loss) == pytest.approx(float(((cos - batch["score"]) ** 2).mean()), rel=1e-5)


@pytest.mark.protocol  # fine-tunes the STS-b bi-encoder
def test_sts_loss_decreases_on_a_toy(ckpt, tmp_path):
    """Dropout is off in this model, so the loss can only fall by telling sentences apart."""
    pairs = toy_pairs()
    tok = AutoTokenizer.from_pretrained(ckpt)
    batch = PairCollator(tok, max_len=16)(list(pairs))

    def full_loss(model):
        with torch.no_grad():
            return float(model.eval()(**batch).loss)

    before = full_loss(SentenceEncoder.from_pretrained(ckpt))
    cfg = TrainConfig(max_steps=30, batch_size=8, lr=3e-3, warmup_ratio=0.0)
    model = finetune_sts(ckpt, pairs, None, cfg, tmp_path / "sts", max_len=16, progress=False)
    losses = [r["loss"] for r in model.train_result.history]
    assert len(losses) == 30
    assert full_loss(model) < 0.6 * before
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert (tmp_path / "sts" / "config.json").exists() and (tmp_path / "sts" / "tokenizer.json").exists()
    saved = SentenceEncoder.from_pretrained(tmp_path / "sts")
    assert full_loss(saved) == pytest.approx(full_loss(model), rel=1e-5)


def test_evaluate_sts_is_spearman_of_cosines(ckpt, monkeypatch):
    """The scoring maths on controlled embeddings (a random model's cosines all sit near 0.999,
    where float noise reorders ranks), then a smoke run with the real model."""
    import condenser_lite.training.similarity as S

    # distinct sentences: identical pairs all tie at cos = 1 up to rounding, which reorders ranks
    pairs = toy_pairs().filter(lambda r: r["sentence1"] != r["sentence2"])
    rng = np.random.default_rng(0)
    table = {s: rng.standard_normal(5).astype(np.float32) for s in SENTENCES}
    monkeypatch.setattr(S, "encode", lambda model, texts, tok, **kw: np.stack([table[t] for t in texts]))
    a = np.stack([table[s] for s in pairs["sentence1"]]).astype(np.float64)
    b = np.stack([table[s] for s in pairs["sentence2"]]).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    expected = spearmanr(cos, list(pairs["score"])).statistic
    assert S.evaluate_sts(object(), pairs, tokenizer="t") == pytest.approx(expected, abs=1e-6)
    assert S.evaluate_sts(object(), list(pairs), tokenizer="t") == pytest.approx(expected, abs=1e-6)  # list of dicts
    # ranks, not values: gold scores that grow with the cosine, however unevenly, correlate perfectly
    # (Pearson's r would not be 1 here); scores that fall with it, perfectly the other way
    rows = [{**r, "score": float(c) ** 3 + 5 * float(c > 0)} for r, c in zip(pairs, cos)]
    assert S.evaluate_sts(object(), rows, tokenizer="t") == pytest.approx(1.0, abs=1e-12)
    assert S.evaluate_sts(object(), [{**r, "score": -r["score"]} for r in rows], tokenizer="t") == \
        pytest.approx(-1.0, abs=1e-12)
    monkeypatch.undo()

    tok = AutoTokenizer.from_pretrained(ckpt)
    rho = evaluate_sts(SentenceEncoder.from_pretrained(ckpt), pairs, tok, max_len=16)
    assert evaluate_sts(str(ckpt), pairs, max_len=16) == rho  # a checkpoint dir with its tokenizer: the same model
    with pytest.raises(ValueError, match="score"):
        evaluate_sts(SentenceEncoder.from_pretrained(ckpt), pairs.remove_columns("score"), tok)


def test_sample_pairs():
    ds = toy_pairs()
    assert sample_pairs(ds, "full") is ds and sample_pairs(ds, None) is ds
    a = sample_pairs(ds, 5, seed=1)
    assert len(a) == 5 and list(a) == list(sample_pairs(ds, 5, seed=1))
    assert list(sample_pairs(ds, 10, seed=1))[:5] == list(a)
    with pytest.raises(ValueError, match="only 24"):
        sample_pairs(ds, 25)
