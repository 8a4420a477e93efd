"""The FLOPs estimate of compute accounting against torch's own FLOP counter, step by step."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from condenser_lite.modeling.condenser import BertMLM, Condenser
from condenser_lite.modeling.variant import CondenserVariant
from condenser_lite.training.pretraining_config import ModelConfig
from condenser_lite.modeling.gradcache import cocondenser_step
from condenser_lite.training.accounting import cumulative, stage_compute, stage_flops

SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, vocab_size=500, n_head_layers=2)


def batch(rows: int = 8, length: int = 24, pad_row: bool = True) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, SHAPE["vocab_size"], (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    if pad_row:
        mask[0, length - 5:] = 0  # padding is computed on all the same
    labels = torch.full_like(ids, -100)
    labels[:, 3:7] = ids[:, 3:7]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def counts(b: dict) -> dict:
    rows, length = b["input_ids"].shape
    return {"tokens": int(b["attention_mask"].sum()), "positions": rows * length, "pairs": rows * length**2,
            "masked": int((b["labels"] != -100).sum())}


def model(method: str, model_class=Condenser):
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=SHAPE["vocab_size"], hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                         intermediate_size=64, max_len=32).bert_config()
    if method == "mlm":
        return BertMLM.from_config(config)
    return model_class.from_config(config, skip_from=2, n_head_layers=2)


def measured(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("method", ["mlm", "condenser"])
def test_estimate_matches_torch_flop_counter(method):
    m, b = model(method), batch()
    got = measured(lambda: m(**b).loss.backward())
    assert stage_flops(method, SHAPE, counts(b)) == pytest.approx(got, rel=0.02)


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_cocondenser_step_with_and_without_the_gradient_cache(chunk_size):
    m, b = model("cocondenser"), batch(rows=8, pad_row=False)
    got = measured(lambda: cocondenser_step(m, b, chunk_size=chunk_size))
    passes = 1 if chunk_size else 0  # the cache's first pass: the backbone forward without gradients
    assert stage_flops("cocondenser", SHAPE, counts(b), grad_cache_passes=passes) == pytest.approx(got, rel=0.02)


def test_the_heads_own_masked_copy_is_counted():
    """The modified Condenser (E5): the head reads a more heavily masked copy of the block, so
    the early layers run on it too and the head's MLM loss covers its masked tokens."""
    m, b = model("condenser", CondenserVariant), batch()
    head_labels = torch.full_like(b["labels"], -100)
    head_labels[:, 2:14] = b["input_ids"][:, 2:14]  # 12 masked tokens a row against the late loss's 4
    copy = {**b, "head_input_ids": b["input_ids"].clone(), "head_labels": head_labels}
    got = measured(lambda: m(**copy).loss.backward())
    shape = {**SHAPE, "head_copy_layers": 2}  # skip_from
    assert stage_flops("condenser", shape, {**counts(b), "head_masked": int((head_labels != -100).sum())}) == (
        pytest.approx(got, rel=0.02))
    assert stage_flops("condenser", SHAPE, counts(b)) < 0.9 * got  # without the copy: undercounted


def test_a_condenser_step_costs_more_than_an_mlm_step():
    b = counts(batch())
    assert stage_flops("condenser", SHAPE, b) > 1.3 * stage_flops("mlm", SHAPE, b)


def test_stage_totals_and_cumulative():
    log = [{"step": 1, "tokens": 10, "positions": 12, "pairs": 48, "masked": 2, "cpu": 1.0},
           {"step": 3, "tokens": 11, "positions": 12, "pairs": 48, "masked": 3, "cpu": 2.5}]  # a line for steps 2-3
    out = stage_compute(log, "mlm", SHAPE, sequences_per_step=3, wall_seconds=4.0)
    assert (out["steps"], out["sequences"], out["tokens"], out["masked"], out["cpu_seconds"]) == (3, 9, 32, 8, 2.5)
    both = cumulative([out, out])
    assert both["tokens"] == 64 and both["flops"] == 2 * out["flops"]
    assert cumulative([out, None]) is None  # a published checkpoint: its cost is unknown
    with pytest.raises(ValueError, match="re-run the stage"):
        stage_compute([{"step": 1, "loss": 1.0}], "mlm", SHAPE, 3)
    # the head's own copy (E5): its masked tokens are totalled and counted in the FLOPs
    copy = [{**rec, "head_masked": 3 * rec["masked"]} for rec in log]
    shape = {**SHAPE, "head_copy_layers": 2}
    e5 = stage_compute(copy, "condenser", shape, sequences_per_step=3)
    assert e5["head_masked"] == 24 and e5["flops"] == stage_flops("condenser", shape, {**e5, "head_masked": 24})
    assert e5["flops"] > stage_compute(log, "condenser", SHAPE, sequences_per_step=3)["flops"]
