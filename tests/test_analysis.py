import numpy as np
import pytest
import torch
from scipy.stats import entropy
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from condenser_lite.modeling.gauges import cls_attention_entropy

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


# ---- the [CLS]-reliance gauge (issue 17) --------------------------------------------------------------

from test_gauges import MASK, BlindHead, NoClsHead, T, topic_batch, trained  # noqa: E402

from condenser_lite.modeling.condenser import BertMLM, Condenser  # noqa: E402
from condenser_lite.modeling.gauges import cls_reliance_gauge, cls_swap_gap, heldout_mlm_loss, other_document_partners
from condenser_lite.utils.errors import SchemaError  # noqa: E402


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
