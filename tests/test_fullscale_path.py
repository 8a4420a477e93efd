"""The full-scale retrieval code path, end to end, on a hand-made Tevatron mirror.

`tests/fixtures/tevatron_tiny` is a mirror root laid out like the Hub's `Tevatron/msmarco-passage`
(train, dev, corpus; 12 passages). With a tiny random BERT and two optimizer steps per round this
runs exactly the calls the full MS MARCO / NQ runs make (load, two-round fine-tuning with mining,
encode, exact search, evaluate, TREC run), so `full=True` can fail only for want of hardware.
"""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from tiny_checkpoint import make_checkpoint
from condenser_lite.finetune import finetune_retriever, train_config, two_round
from condenser_lite.presets import RETRIEVAL_RECIPES
from condenser_lite.search import evaluate_retriever, read_trec_run, write_trec_run
from condenser_lite.tevatron import load_tevatron, load_tevatron_corpus, tevatron_eval_set, validate_training_schema
from condenser_lite.metrics import evaluate_run, topk_answer_accuracy

FIXTURE = Path(__file__).parent / "fixtures" / "tevatron_tiny"
NAME = "Tevatron/msmarco-passage"




@pytest.fixture(scope="module")
def data():
    train = load_tevatron(NAME, "train", data_dir=FIXTURE)
    dev = load_tevatron(NAME, "dev", data_dir=FIXTURE)
    corpus = load_tevatron_corpus(NAME, data_dir=FIXTURE)
    return train, dev, corpus


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, data):
    train, dev, corpus = data
    texts = list(corpus["title"]) + list(corpus["text"]) + list(train["query"]) + list(dev["query"])
    return make_checkpoint(tmp_path_factory.mktemp("tiny_ckpt"), texts, vocab_size=400)


def test_fixture_is_tevatron_schema(data):
    train, dev, corpus = data
    validate_training_schema(train)
    assert len(train) == 6 and len(dev) == 3 and len(corpus) == 12


def test_two_round_msmarco_path(data, ckpt, tmp_path):
    train, dev, corpus = data
    # Paper settings except the budget: 2 steps per round, 2 queries x 4 passages (the fixture has 3 negatives).
    recipe = dataclasses.replace(RETRIEVAL_RECIPES["msmarco"], batch_size=2, train_n_passages=4)
    tok = AutoTokenizer.from_pretrained(ckpt)
    model, train2 = two_round(ckpt, train, corpus, tok, recipe, tmp_path, seed=0, max_steps=2, progress=False)
    # both rounds trained and saved plain HF dirs; round 2 started from the pre-trained checkpoint
    for out in (tmp_path / "round1", tmp_path / "round2"):
        assert (out / "config.json").exists()
        assert (out / "tokenizer.json").exists()
        assert len((out / "log.jsonl").read_text().splitlines()) == 2
    assert model.train_result.step == 2 and np.isfinite(model.train_result.history[-1]["loss"])

    # mined negatives: BM25 negatives kept, labelled positives never among the negatives
    for old, new in zip(train, train2):
        pos = {p["docid"] for p in new["positive_passages"]}
        negs = [p["docid"] for p in new["negative_passages"]]
        assert not pos & set(negs)
        assert negs[: len(old["negative_passages"])] == [p["docid"] for p in old["negative_passages"]]
        assert len(negs) == len(set(negs)) == 11  # 12 passages - 1 positive: depth 200 covers the corpus

    # evaluate the round-2 model on dev through the full-scale evaluation path
    eval_set = tevatron_eval_set(dev, corpus)
    res = evaluate_retriever(tmp_path / "round2", eval_set, split="dev", metrics=("MRR@10", "R@1000"), k=1000)
    assert set(res["metrics"]) == {"MRR@10", "R@1000"}
    assert res["metrics"]["R@1000"] == pytest.approx(1.0)  # k covers the whole corpus
    assert 0 < res["metrics"]["MRR@10"] <= 1
    assert set(res["run"]) == {"d1", "d2", "d3"} and all(len(v) == 12 for v in res["run"].values())
    embs, ids = res["corpus_embeddings"]
    assert embs.shape == (12, 32) and ids == list(corpus["docid"])
    # the same numbers from the model object and from a TREC run file written and read back
    again = evaluate_retriever(model, eval_set, split="dev", tokenizer=tok, metrics=("MRR@10",), corpus_embeddings=(embs, ids))
    assert again["metrics"]["MRR@10"] == pytest.approx(res["metrics"]["MRR@10"], abs=1e-6)
    write_trec_run(res["run"], tmp_path / "dev.trec", tag="round2")
    rerun = read_trec_run(tmp_path / "dev.trec")
    assert evaluate_run(eval_set.qrels["dev"], rerun, ("MRR@10",))["MRR@10"] == pytest.approx(res["metrics"]["MRR@10"])


def test_untied_gradient_cache_nq_path(data, ckpt, tmp_path):
    """NQ settings: untied encoders, 2 passages per query, gradient cache, top-k answer accuracy."""
    train, dev, corpus = data
    preset = RETRIEVAL_RECIPES["nq"]
    tok = AutoTokenizer.from_pretrained(ckpt)
    cfg = train_config(dataclasses.replace(preset, batch_size=4), tmp_path / "nq", 1, len(train), max_steps=2,
                       progress=False)
    model = finetune_retriever(
        ckpt, train, tok, cfg, q_max_len=preset.q_max_len, p_max_len=128,
        train_n_passages=preset.train_n_passages, untied=preset.untied, grad_cache_chunk=3,
    )
    assert model.untied and (Path(cfg.output_dir) / "query" / "config.json").exists()
    assert "accuracy" in model.train_result.history[-1]
    res = evaluate_retriever(cfg.output_dir, tevatron_eval_set(dev, corpus), split="dev", k=20)
    passages = dict(zip(corpus["docid"], corpus["text"]))
    answers = {"d1": ["chemical energy"], "d2": ["tectonic plates"], "d3": ["snow"]}
    acc = topk_answer_accuracy(res["run"], passages, answers, ks=(5, 20))
    assert acc["Top-20"] == pytest.approx(1.0)  # 12 passages: the answer is always within the top 20
    assert 0 <= acc["Top-5"] <= 1
