"""The gauges (condenser_lite/modeling/gauges.py): held-out MLM loss, unigram entropy, the Condenser
gauges ([CLS]-swap gap, [CLS] cosine, the pre-registered [CLS] reliance) and the attention entropy."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import entropy
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from condenser_lite.modeling.condenser import BertMLM, Condenser
from condenser_lite.modeling.gauges import (
    cls_attention_entropy,
    cls_cosine,
    cls_reliance,
    cls_reliance_gauge,
    cls_swap_gap,
    heldout_mlm_loss,
    other_document_partners,
    unigram_entropy,
)
from condenser_lite.utils.errors import SchemaError

MASK, N_TOPICS, T = 4, 12, 14


def config() -> BertConfig:
    return BertConfig(vocab_size=5 + N_TOPICS, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=T, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def topic_batch(n: int, generator: torch.Generator) -> dict:
    """Each block is one "topic" token repeated; two positions are masked. Only what the block
    is about (its topic) tells a masked token, so a head that cannot see the tokens must read it
    from [CLS]."""
    topic = torch.randint(5, 5 + N_TOPICS, (n, 1), generator=generator)
    ids = torch.cat([torch.full((n, 1), 2), topic.expand(n, T - 2), torch.full((n, 1), 3)], dim=1)
    labels = torch.full_like(ids, -100)
    pos = 1 + torch.rand(n, T - 2, generator=generator).argsort(1)[:, :2]
    labels.scatter_(1, pos, ids.gather(1, pos))
    return {"input_ids": ids.scatter(1, pos, MASK), "attention_mask": torch.ones_like(ids), "labels": labels}


class BlindHead(Condenser):
    """A head that sees only [CLS]: the early token vectors are zeroed."""

    def head_forward(self, late_cls, early_tokens, attention_mask):
        return super().head_forward(late_cls, torch.zeros_like(early_tokens), attention_mask)


class NoClsHead(Condenser):
    """A head that ignores [CLS]: its [CLS] input is zeroed."""

    def head_forward(self, late_cls, early_tokens, attention_mask):
        return super().head_forward(torch.zeros_like(late_cls), early_tokens, attention_mask)


def trained(cls, steps: int = 80) -> Condenser:
    torch.manual_seed(0)
    model = cls.from_config(config(), skip_from=1, n_head_layers=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        model(**topic_batch(32, g)).loss.backward()
        opt.step()
        opt.zero_grad()
    return model


@pytest.fixture(scope="module")
def eval_batches():
    g = torch.Generator().manual_seed(2)
    return [topic_batch(16, g) for _ in range(4)]


def test_gap_is_clear_when_the_head_relies_on_cls(eval_batches):
    model = trained(BlindHead)
    out = cls_swap_gap(model, eval_batches)
    assert out["n_blocks"] == 64 and out["n_tokens"] == 128
    assert out["own_loss"] < 1.5 < math.log(N_TOPICS)  # it learnt the topic from [CLS] ...
    assert out["gap"] > 1.0 and out["gap"] > 5 * out["noise"]  # ... and a foreign [CLS] misleads it
    assert out["swapped_loss"] == pytest.approx(out["own_loss"] + out["gap"])
    assert model.training  # mode restored


def test_gap_is_zero_when_the_head_ignores_cls(eval_batches):
    out = cls_swap_gap(trained(NoClsHead, steps=10), eval_batches)
    assert out["gap"] == 0.0 and out["noise"] == 0.0
    assert not out["gap"] > 3 * out["noise"]  # the "head relies on [CLS]" claim fails, as it should


def test_gap_rejects_a_plain_bert_and_batches_too_small_to_swap(eval_batches):
    with pytest.raises(TypeError, match="needs a Condenser"):
        cls_swap_gap(BertMLM.from_config(config()), eval_batches)
    model = Condenser.from_config(config(), skip_from=1, n_head_layers=1)
    with pytest.raises(ValueError, match="batches of more than 16"):
        cls_swap_gap(model, eval_batches, shifts=(16,))


def test_heldout_loss_matches_the_training_losses_on_one_batch(eval_batches):
    torch.manual_seed(0)
    model = Condenser.from_config(config(), skip_from=1, n_head_layers=1).eval()
    batch = eval_batches[0]
    got = heldout_mlm_loss(model, [batch])
    with torch.no_grad():
        out = model(**batch)
    assert got["mlm_loss"] == pytest.approx(float(out.late_loss), rel=1e-5)
    assert got["head_loss"] == pytest.approx(float(out.head_loss), rel=1e-5)
    mlm = BertMLM(model.backbone)
    assert heldout_mlm_loss(mlm, [batch]) == {"mlm_loss": pytest.approx(float(out.late_loss), rel=1e-5)}
    # token-weighted over batches: equal to one concatenated batch
    both = {k: torch.cat([b[k] for b in eval_batches[:2]]) for k in batch}
    with torch.no_grad():
        want = float(mlm(**both).loss)
    assert heldout_mlm_loss(mlm, eval_batches[:2])["mlm_loss"] == pytest.approx(want, rel=1e-5)


def test_unigram_entropy_is_the_smoothed_unigram_cross_entropy():
    train = [[2, 5, 5, 6, 3], [2, 5, 3]]
    batch = {"labels": torch.tensor([[-100, 5, 6, -100], [7, -100, -100, -100]])}
    counts = torch.ones(8)
    counts[5] += 3
    counts[6] += 1
    p = counts / counts.sum()  # specials 2 and 3 not counted
    want = -float(p[5].log() + p[6].log() + p[7].log()) / 3
    assert unigram_entropy(train, [batch], vocab_size=8, ignore_ids=(0, 2, 3)) == pytest.approx(want)


def test_cls_cosine_is_the_off_diagonal_mean(eval_batches):
    torch.manual_seed(0)
    model = BertMLM.from_config(config())
    model.eval()
    with torch.no_grad():
        cls = torch.cat([model(b["input_ids"], b["attention_mask"]).cls for b in eval_batches])
    sim = F.cosine_similarity(cls[:, None], cls[None], dim=-1)
    n = len(cls)
    want = float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))
    assert cls_cosine(model, eval_batches) == pytest.approx(want, abs=1e-5)
    same = [{k: v[:1].expand(4, -1) for k, v in eval_batches[0].items()}]  # one block four times
    assert cls_cosine(model, same) == pytest.approx(1.0, abs=1e-6)


# ---- the attention entropy of [CLS] (chapter 5) -------------------------------------------------------

WORDS = "the cat sat on a mat dog ran fast slow big small red".split()


@pytest.fixture
def tokenizer():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def test_entropy_matches_brute_force(tokenizer):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=3,
                        num_attention_heads=2, intermediate_size=32)
    model = BertModel(config)
    texts = ["the cat sat on a mat", "dog ran", "big red dog ran fast on the mat"]
    got = cls_attention_entropy(model, tokenizer, texts, batch_size=2)
    assert got.shape == (3,)
    assert model.config._attn_implementation == "sdpa"  # restored

    # brute force: one text at a time (no padding), scipy entropy of each head's CLS row
    model.set_attn_implementation("eager")
    model.eval()  # no attention dropout, as in the function
    per_text = []
    for text in texts:
        enc = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        per_text.append([np.mean([entropy(a[0, h, 0].numpy()) for h in range(a.shape[1])]) for a in att])
    np.testing.assert_allclose(got, np.mean(per_text, axis=0), rtol=1e-4)
    # entropy is bounded by log(sequence length) and positive for a random model
    assert np.all(got > 0) and np.all(got <= np.log(10) + 1e-6)


def test_entropy_rejects_empty(tokenizer):
    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32))
    with pytest.raises(ValueError, match="at least one text"):
        cls_attention_entropy(model, tokenizer, [])


# ---- the [CLS]-reliance gauge --------------------------------------------------------------


def test_cls_reliance_is_the_share_of_the_deficit_its_own_cls_closes():
    # head without its [CLS] 5.0, with it 4.5, backbone 2.5: closes 0.5 of a 2.5 deficit
    assert cls_reliance(l_own=4.5, l_ablated=5.0, l_late=2.5) == 0.2
    assert cls_reliance(l_own=2.5, l_ablated=5.0, l_late=2.5) == 1.0  # all the late information
    assert cls_reliance(l_own=5.0, l_ablated=5.0, l_late=2.5) == 0.0  # ignores [CLS]
    assert cls_reliance(l_own=5.5, l_ablated=5.0, l_late=2.5) == -0.2  # its own [CLS] hurts
    # no deficit to close: undefined, and an undefined reliance does not count as relying
    assert cls_reliance(l_own=2.0, l_ablated=2.5, l_late=2.5) is None
    assert cls_reliance(l_own=2.0, l_ablated=2.4, l_late=2.5) is None


def mask_draw(batch: dict, seed: int) -> dict:
    """The same blocks masked afresh at two positions (another mask draw), with the batch's doc ids."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
    n = len(ids)
    pos = 1 + torch.rand(n, T - 2, generator=g).argsort(1)[:, :2]
    labels = torch.full_like(ids, -100).scatter(1, pos, ids.gather(1, pos))
    return {"input_ids": ids.scatter(1, pos, MASK), "attention_mask": batch["attention_mask"], "labels": labels,
            "doc_id": batch["doc_id"]}


@pytest.fixture(scope="module")
def draws():
    """Three mask draws of 48 topic blocks; a block's document is its topic, so a block of another
    document is about something else."""
    g = torch.Generator().manual_seed(2)
    first = []
    for _ in range(3):
        b = topic_batch(16, g)
        b["doc_id"] = torch.where(b["labels"][:, 1] != -100, b["labels"][:, 1], b["input_ids"][:, 1])
        first.append(b)
    return [first, *[[mask_draw(b, 10 * d + i) for i, b in enumerate(first)] for d in (1, 2)]]


def test_partners_come_from_other_documents():
    docs = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    seen = set()
    for seed in range(60):
        p = other_document_partners(docs, torch.Generator().manual_seed(seed))
        assert (docs[p] != docs).all()
        seen.update(zip(range(len(docs)), p.tolist()))
    assert len({j for i, j in seen if i == 0}) == 7  # every other-document block gets drawn
    with pytest.raises(SchemaError, match="another document"):
        other_document_partners(torch.tensor([5, 5, 5]))


def test_reliance_is_clearly_positive_for_a_head_that_reads_cls(draws):
    model = trained(BlindHead)  # sees only [CLS]: everything it knows of the block comes through it
    out = cls_reliance_gauge(model, draws)
    assert out["n_draws"] == 3 and out["n_blocks"] == 48 and out["n_tokens"] == 3 * 48 * 2
    assert out["ablated_loss"] > out["own_loss"] + 1.0  # another document's [CLS] misleads it
    assert out["reliance"] > 0.5 and out["reliance"] > 5 * out["noise"]
    assert out["reliance_zero"] > 0.5 and out["reliance_mean"] > 0.5
    assert out["reliance"] == pytest.approx((out["ablated_loss"] - out["own_loss"])
                                            / (out["ablated_loss"] - out["late_loss"]))
    assert out["mask_spread"] is not None and out["mask_spread"] >= 0
    assert model.training  # mode restored


class DeafHead(Condenser):
    """A head that ignores [CLS] and the tokens alike: a large deficit against the backbone, none
    of it closed by [CLS]."""

    def head_forward(self, late_cls, early_tokens, attention_mask):
        return super().head_forward(torch.zeros_like(late_cls), torch.zeros_like(early_tokens), attention_mask)


def test_reliance_is_zero_for_a_head_that_ignores_cls(draws):
    out = cls_reliance_gauge(trained(DeafHead, steps=40), draws)
    assert out["ablated_loss"] > out["late_loss"] + 0.5  # a deficit exists, and its own [CLS] closes none of it
    assert out["reliance"] == 0.0 and out["reliance_zero"] == 0.0 and out["reliance_mean"] == 0.0
    assert out["noise"] == 0.0
    # a head that ignores [CLS] but reads the tokens: every ablation leaves its loss unchanged, and
    # the reliance is 0 or, where the head already matches the backbone, undefined (None)
    blind_to_cls = cls_reliance_gauge(trained(NoClsHead, steps=10), draws)
    assert blind_to_cls["own_loss"] == blind_to_cls["ablated_loss"] == blind_to_cls["zero_loss"] \
        == blind_to_cls["mean_loss"]
    assert blind_to_cls["reliance"] in (0.0, None)


def test_reliance_gauge_reuses_the_models_losses(draws):
    """Its own-[CLS] and late losses on one draw are the held-out head and MLM losses; a reversed
    formula (own and ablated swapped) would read negative for the [CLS]-reading head."""
    model = trained(BlindHead, steps=20)
    one = cls_reliance_gauge(model, draws[:1])
    plain = heldout_mlm_loss(model, draws[0])
    assert one["own_loss"] == pytest.approx(plain["head_loss"], rel=1e-5)
    assert one["late_loss"] == pytest.approx(plain["mlm_loss"], rel=1e-5)
    assert one["mask_spread"] is None and one["n_draws"] == 1
    assert cls_swap_gap(model, draws[0])["own_loss"] == pytest.approx(one["own_loss"], rel=1e-6)
    with pytest.raises(SchemaError, match="doc_id"):
        cls_reliance_gauge(model, [[{k: v for k, v in b.items() if k != "doc_id"} for b in draws[0]]])
    with pytest.raises(TypeError, match="needs a Condenser"):
        cls_reliance_gauge(BertMLM(model.backbone), draws)


def test_a_batch_of_one_document_takes_its_partners_from_the_other_batches(draws):
    """A long held-out article can fill a whole batch: its blocks find their other-document
    partners in the other batches (this stopped the stage with a SchemaError before)."""
    one_doc = [[{**b, "doc_id": torch.full_like(b["doc_id"], i)} for i, b in enumerate(draw)] for draw in draws]
    out = cls_reliance_gauge(trained(BlindHead), one_doc)
    assert out["n_blocks"] == 48 and out["reliance"] > 0.5
    pool = torch.tensor([0, 0, 1, 1])
    p = other_document_partners(torch.tensor([0, 0]), torch.Generator().manual_seed(0), pool)
    assert (pool[p] == 1).all()
    with pytest.raises(SchemaError, match="another document"):
        cls_reliance_gauge(trained(BlindHead), [[{**b, "doc_id": torch.zeros_like(b["doc_id"])} for b in draws[0]]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the held-out batches stay on the CPU")
def test_gauges_of_a_model_on_a_gpu_match_the_cpus(draws):
    """Held-out batches live on the CPU; a model trained on a GPU is gauged where it sits, and
    every gauge a stage logs agrees with the same model's on the CPU."""
    from condenser_lite.training.pretraining_data import stage_gauges

    model = trained(Condenser)
    on_cpu = stage_gauges(model, draws[0], draws[1:])
    on_gpu = stage_gauges(model.to("cuda"), draws[0], draws[1:])
    assert on_gpu.keys() == on_cpu.keys()
    for k in on_cpu:
        assert on_gpu[k] == pytest.approx(on_cpu[k], rel=1e-3, abs=1e-4), k
    assert all(t.device.type == "cpu" for b in draws[0] for t in b.values())
