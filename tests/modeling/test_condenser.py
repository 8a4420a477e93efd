"""BertMLM and Condenser (chapter 2): wiring of the head, losses, masks, saving and loading (the
checkpoint files themselves: test_loading.py)."""

import pytest
import torch
from toy_models import make_batch, make_condenser, make_variant, small_config
from transformers import BertForMaskedLM
from transformers.masking_utils import create_bidirectional_mask

from condenser_lite.modeling.condenser import PAPER_CONDENSER, BertMLM, Condenser
from condenser_lite.modeling.variant import CondenserVariant
from condenser_lite.modeling.mlm import masked_lm_loss
from condenser_lite.utils.errors import CheckpointError

# ---- configuration and construction ----------------------------------------------


def test_a_condenser_without_settings_is_the_papers():
    """Condenser's defaults are PAPER_CONDENSER, the paper's settings that the loaders fall back on."""
    backbone = BertForMaskedLM(small_config(num_hidden_layers=PAPER_CONDENSER["skip_from"] + 1))
    config = Condenser(backbone).condenser_config()
    assert {k: config[k] for k in PAPER_CONDENSER} == PAPER_CONDENSER


@pytest.mark.parametrize("kwargs,match", [
    (dict(skip_from=-1), "skip_from"), (dict(skip_from=4), "skip_from"), (dict(n_head_layers=0), "n_head_layers"),
])
def test_condenser_validates_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_condenser(**kwargs)


def test_head_is_initialised_like_bert():
    torch.manual_seed(0)
    m = Condenser.from_config(small_config(initializer_range=0.05, hidden_size=64, intermediate_size=256), skip_from=2)
    layer = m.head[0]
    assert len(m.head) == 2
    for ln in (layer.attention.output.LayerNorm, layer.output.LayerNorm):
        assert torch.equal(ln.weight, torch.ones_like(ln.weight)) and torch.equal(ln.bias, torch.zeros_like(ln.bias))
    w = layer.intermediate.dense.weight
    assert abs(w.std().item() - 0.05) < 0.005 and abs(w.mean().item()) < 0.005
    assert torch.equal(layer.intermediate.dense.bias, torch.zeros_like(layer.intermediate.dense.bias))


# ---- forward --------------------------------------------------------------------------


def test_condenser_outputs_shapes_and_loss_combination():
    m = make_condenser(head_weight=2.0, late_weight=0.5).eval()
    batch = make_batch()
    out = m(**batch)
    assert out.cls.shape == (4, 32)
    assert out.loss.dim() == 0 and out.head_loss.dim() == 0 and out.late_loss.dim() == 0
    torch.testing.assert_close(out.loss, 2.0 * out.head_loss + 0.5 * out.late_loss)
    # cls is the last layer's CLS before any pooler
    hidden = m.backbone.bert(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    torch.testing.assert_close(out.cls, hidden[:, 0])
    no_labels = m(batch["input_ids"], batch["attention_mask"])
    assert no_labels.loss is None and no_labels.head_loss is None and no_labels.late_loss is None
    torch.testing.assert_close(no_labels.cls, out.cls)
    m.late_mlm = False
    only_head = m(**batch)
    assert only_head.late_loss is None
    torch.testing.assert_close(only_head.loss, 2.0 * only_head.head_loss)


@pytest.mark.parametrize("skip_from", [2, 0])  # 0: the head reads the embeddings (variant E4)
def test_head_input_is_late_cls_plus_early_tokens(skip_from):
    """Recompute the head loss by hand from the output of layer skip_from and the late CLS."""
    m = make_condenser(skip_from=skip_from).eval()
    batch = make_batch(lengths=[16, 11, 7, 16])
    out = m(**batch)
    bert = m.backbone.bert
    with torch.no_grad():
        h = bert.embeddings(batch["input_ids"])
        mask4d = create_bidirectional_mask(config=m.config, inputs_embeds=h, attention_mask=batch["attention_mask"])
        for layer in bert.encoder.layer[:skip_from]:
            h = layer(h, mask4d)
        early = h
        late = bert(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        head_hidden = m.head_forward(late[:, 0], early[:, 1:], batch["attention_mask"])
        expected = masked_lm_loss(m.backbone.cls, head_hidden, batch["labels"])
    torch.testing.assert_close(out.head_loss, expected)


def test_head_sees_late_cls_but_not_late_tokens():
    m = make_condenser().eval()
    batch = make_batch()
    head_out = []
    m.head[-1].register_forward_hook(lambda module, args, output: head_out.append(output))
    base = m(**batch)

    def perturb(positions):
        def hook(module, args, output):
            output = output.clone()
            # random, not constant: LayerNorm would erase a constant shift of a vector
            noise = torch.randn(output[:, positions].shape, generator=torch.Generator().manual_seed(0))
            output[:, positions] += noise
            return output
        return m.backbone.bert.encoder.layer[-1].register_forward_hook(hook)

    handle = perturb(slice(1, None))  # late token states: only the late MLM loss may change
    out = m(**batch)
    handle.remove()
    assert torch.equal(head_out[1], head_out[0]) and torch.equal(out.head_loss, base.head_loss)
    assert not torch.allclose(out.late_loss, base.late_loss)

    handle = perturb(slice(0, 1))  # late CLS: the head's output at every position must react
    m(**batch)
    handle.remove()
    assert ((head_out[2] - head_out[0]).abs().amax(dim=-1) > 1e-4).all()


def _grad_norm(module):
    return sum(p.grad.abs().sum().item() for p in module.parameters() if p.grad is not None)


@pytest.mark.parametrize("path", ["head", "late"])
def test_gradients_reach_early_layers_through_each_loss(path):
    m = make_condenser(head_weight=1.0 if path == "head" else 0.0, late_weight=1.0 if path == "late" else 0.0)
    m(**make_batch()).loss.backward()
    layers = m.backbone.bert.encoder.layer
    assert _grad_norm(layers[0]) > 0 and _grad_norm(layers[1]) > 0  # early layers (< skip_from)
    assert _grad_norm(layers[-1]) > 0  # late layers: through the late CLS when only the head loss is on
    assert (_grad_norm(m.head) > 0) == (path == "head")


def test_detach_early_stops_the_heads_gradient_at_the_early_token_states():
    """E3: with detach_early the token states the head reads carry no gradient back (the head's
    loss still reaches the early layers through the late [CLS], which they feed); the late loss
    still trains the early layers. Off, the head's token inputs carry gradient."""
    batch = make_batch()
    for detach in (False, True):
        m = make_variant(detach_early=detach)
        seen = []
        head_forward = m.head_forward
        m.head_forward = lambda cls, early, mask: seen.append(early.requires_grad) or head_forward(cls, early, mask)
        m(**batch).loss.backward()
        assert seen == [not detach]
        assert _grad_norm(m.backbone.bert.encoder.layer[0]) > 0 and _grad_norm(m.head) > 0
    only_head = make_variant(detach_early=True, late_weight=0.0)
    only_head(**batch).loss.backward()
    with_tokens = make_condenser(late_weight=0.0)
    with_tokens(**batch).loss.backward()
    first = [p.grad for p in only_head.backbone.bert.encoder.layer[0].parameters()]
    assert not all(torch.allclose(a, p.grad) for a, p in zip(first, with_tokens.backbone.bert.encoder.layer[0].parameters()))


def test_head_reads_its_own_copy_of_the_block_with_its_labels():
    """E5: the head's early states come from head_input_ids and its loss from head_labels; the
    backbone's late loss and [CLS] from input_ids alone. Equal inputs give the plain Condenser."""
    m = make_variant().eval()
    batch = make_batch()
    with torch.no_grad():
        plain = m(**batch)
        same = m(**batch, head_input_ids=batch["input_ids"], head_labels=batch["labels"])
        assert torch.allclose(plain.head_loss, same.head_loss, atol=1e-6) and torch.equal(plain.late_loss, same.late_loss)
        heavier = batch["input_ids"].clone()
        heavier[:, 1:8] = 4  # [MASK] over more of each block
        head_labels = torch.where(torch.arange(heavier.shape[1]) < 8, batch["input_ids"], batch["labels"])
        head_labels[:, 0] = -100
        out = m(**batch, head_input_ids=heavier, head_labels=head_labels)
        assert torch.equal(out.late_loss, plain.late_loss) and torch.equal(out.cls, plain.cls)
        early = m.early_states(heavier, batch["attention_mask"])
        hidden = m.head_forward(plain.cls, early[:, 1:], batch["attention_mask"])
        assert torch.allclose(out.head_loss, masked_lm_loss(m.backbone.cls, hidden, head_labels), atol=1e-6)
        # the early states computed alone are the backbone's own at layer skip_from
        full = m.backbone.bert(heavier, attention_mask=batch["attention_mask"], output_hidden_states=True)
        assert torch.allclose(early, full.hidden_states[m.skip_from], atol=1e-6)
    with pytest.raises(ValueError, match="together"):
        m(**batch, head_input_ids=heavier)


def test_variant_config_is_saved_only_where_it_is_on(tmp_path):
    plain = make_condenser()
    assert "detach_early" not in plain.condenser_config()  # the paper's Condenser saves what it always did
    m = make_variant(detach_early=True)
    m.save_pretrained(tmp_path)
    loaded = Condenser.from_pretrained(tmp_path)  # a saved variant loads back as one
    assert isinstance(loaded, CondenserVariant) and loaded.detach_early is True
    assert type(Condenser.from_pretrained(tmp_path, detach_early=False)) is CondenserVariant
    plain.save_pretrained(tmp_path / "plain")
    assert type(Condenser.from_pretrained(tmp_path / "plain")) is Condenser
    with pytest.raises(TypeError, match="unknown Condenser argument"):
        Condenser.from_pretrained(tmp_path, detach_later=True)


def test_a_variant_with_every_switch_off_is_the_papers_condenser():
    """The variants live apart from the paper's forward; off, they change nothing: the same
    initial weights (same seed) and the same losses to the bit. The paper's Condenser takes no
    variant's switch or input."""
    batch = make_batch()
    plain, variant = make_condenser().eval(), make_variant().eval()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), variant.state_dict().values()))
    with torch.no_grad():
        a, b = plain(**batch), variant(**batch)
    assert torch.equal(a.loss, b.loss) and torch.equal(a.head_loss, b.head_loss) and torch.equal(a.cls, b.cls)
    assert plain.condenser_config() == variant.condenser_config()
    with pytest.raises(TypeError):
        plain(**batch, head_input_ids=batch["input_ids"], head_labels=batch["labels"])
    with pytest.raises(TypeError):
        make_condenser(detach_early=True)


def test_masked_only_loss_equals_full_logits_loss():
    torch.manual_seed(0)
    mlm = BertMLM.from_config(small_config()).eval()
    batch = make_batch(lengths=[16, 9, 13])
    reference = mlm.backbone(**batch).loss  # logits at every position, -100 ignored
    torch.testing.assert_close(mlm(**batch).loss, reference)
    c = Condenser(mlm.backbone, skip_from=2).eval()
    torch.testing.assert_close(c(**batch).late_loss, reference)
    with pytest.raises(ValueError, match="no masked position"):
        mlm(batch["input_ids"], batch["attention_mask"], torch.full_like(batch["labels"], -100))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_padding_does_not_change_losses(attn):
    m = make_condenser().eval()
    m.backbone.set_attn_implementation(attn)
    assert m.head[0].attention.self.config._attn_implementation == attn  # the head follows the backbone
    short = make_batch(seed=3, batch_size=1, length=9)
    alone = m(**short)
    long = make_batch(seed=4, batch_size=1, length=16)
    padded = {k: torch.cat([torch.nn.functional.pad(short[k], (0, 7), value=0 if k != "labels" else -100), long[k]])
              for k in short}
    together = m(**padded)
    other = m(**long)
    n_short, n_long = (short["labels"] != -100).sum(), (long["labels"] != -100).sum()
    for name in ("head_loss", "late_loss"):
        mean = (getattr(alone, name) * n_short + getattr(other, name) * n_long) / (n_short + n_long)
        torch.testing.assert_close(getattr(together, name), mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(together.cls[0], alone.cls[0], rtol=1e-5, atol=1e-5)


def test_eager_and_sdpa_agree():
    m = make_condenser().eval()
    batch = make_batch(lengths=[16, 10, 5])
    sdpa = m(**batch)
    m.backbone.set_attn_implementation("eager")
    eager = m(**batch)
    torch.testing.assert_close(eager.loss, sdpa.loss, rtol=1e-5, atol=1e-5)


# ---- saving and loading ----------------------------------------------------------------


def test_condenser_round_trip(tmp_path):
    m = make_condenser(skip_from=3, n_head_layers=1, late_weight=0.5).eval()
    m.save_pretrained(tmp_path)
    loaded = Condenser.from_pretrained(tmp_path).eval()
    assert loaded.condenser_config() == m.condenser_config()
    batch = make_batch()
    with torch.no_grad():
        a, b = m(**batch), loaded(**batch)
    assert torch.equal(a.loss, b.loss) and torch.equal(a.head_loss, b.head_loss)
    override = Condenser.from_pretrained(tmp_path, late_mlm=False)
    assert override.late_mlm is False and override.skip_from == 3


def test_missing_head_raises_unless_random(tmp_path):
    torch.manual_seed(0)
    BertMLM.from_config(small_config()).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="head='random'"):
        Condenser.from_pretrained(tmp_path)
    fresh = Condenser.from_pretrained(tmp_path, head="random", skip_from=1, n_head_layers=3)
    assert (fresh.skip_from, len(fresh.head)) == (1, 3)
    with pytest.raises(ValueError, match="head="):
        Condenser.from_pretrained(tmp_path, head="yes")


def test_from_bert_continues_a_plain_mlm_model(tmp_path):
    torch.manual_seed(0)
    mlm = BertMLM.from_config(small_config()).eval()
    mlm.save_pretrained(tmp_path)
    batch = make_batch()
    for source in (mlm, mlm.backbone, str(tmp_path)):
        c = Condenser.from_bert(source, skip_from=2).eval()
        torch.testing.assert_close(c(**batch).late_loss, mlm(**batch).loss)
    assert BertMLM.from_pretrained(tmp_path).config.num_hidden_layers == 4


def test_the_no_bottleneck_control_reads_a_learned_constant_not_the_late_cls(tmp_path):
    """head_cls="constant": the head's output does not react to the late CLS (the perturbation that
    moves every position of the paper's head, test_head_sees_late_cls_but_not_late_tokens), the
    constant learns from the head's loss, and it survives a save and load."""
    m = make_variant(head_cls="constant").eval()
    batch = make_batch()
    head_out = []
    m.head[-1].register_forward_hook(lambda module, args, output: head_out.append(output))
    base = m(**batch)

    def hook(module, args, output):
        output = output.clone()
        output[:, :1] += torch.randn(output[:, :1].shape, generator=torch.Generator().manual_seed(0))
        return output

    handle = m.backbone.bert.encoder.layer[-1].register_forward_hook(hook)
    out = m(**batch)
    handle.remove()
    assert torch.equal(head_out[1], head_out[0]) and torch.equal(out.head_loss, base.head_loss)
    m.train()
    m(**batch).head_loss.backward()
    assert m.head_cls_constant.grad is not None and m.head_cls_constant.grad.abs().sum() > 0
    assert m.condenser_config()["head_cls"] == "constant" and "head_cls" not in make_condenser().condenser_config()
    m.eval().save_pretrained(tmp_path)
    loaded = Condenser.from_pretrained(tmp_path).eval()
    assert loaded.head_cls == "constant" and torch.equal(loaded.head_cls_constant, m.head_cls_constant)
    with torch.no_grad():
        assert torch.equal(loaded(**batch).head_loss, m(**batch).head_loss)
    with pytest.raises(ValueError, match="head_cls"):
        make_variant(head_cls="mean")


def test_the_reliance_gauge_reads_zero_for_the_no_bottleneck_control():
    """What the control is for: its head cannot read [CLS], so swapping in another document's
    [CLS] changes nothing and the reliance gauge reads exactly 0."""
    from toy_models import make_batch as mb

    from condenser_lite.modeling.gauges import cls_reliance_gauge

    m = make_variant(head_cls="constant").eval()
    batches = [{**mb(seed=s), "doc_id": torch.arange(4) + 4 * s} for s in range(2)]
    g = cls_reliance_gauge(m, [batches])
    assert g["own_loss"] == pytest.approx(g["ablated_loss"], abs=1e-6) and g["reliance"] in (0.0, None)
    assert g["own_loss"] == pytest.approx(g["zero_loss"], abs=1e-6)
