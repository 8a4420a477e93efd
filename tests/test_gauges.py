"""Held-out MLM loss, unigram entropy and the Condenser gauges ([CLS]-swap gap, [CLS] cosine)."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig

from condenser_lite.modeling.condenser import BertMLM, Condenser
from condenser_lite.modeling.gauges import cls_cosine, cls_swap_gap, heldout_mlm_loss, unigram_entropy

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
