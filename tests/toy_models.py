"""Small random models and the batches they train on, shared by tests in several files.

* a 4-layer, 32-wide Condenser and batches of random ids with about 30% of positions labelled
  (``modeling/test_condenser.py``, ``modeling/test_loading.py``);
* a 2-layer BERT with its dropout on, random token rows and a masking collator that draws from the
  global torch RNG as the real collators do (``training/test_loop.py``, ``utils/test_devices.py``);
* a linear regressor on 16 random rows, and a training run that crashes in a chosen step and leaves
  its last checkpoint (``training/test_checkpoint.py``, ``training/test_loop_inputs.py``).
"""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from condenser_lite.modeling.condenser import Condenser
from condenser_lite.modeling.variant import CondenserVariant
from condenser_lite.training.loop import TrainConfig, train

# ---- a small Condenser ----------------------------------------------------------------------

VOCAB = 100


def small_config(**overrides) -> BertConfig:
    kwargs = dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64,
    )
    kwargs.update(overrides)
    return BertConfig(**kwargs)


def make_condenser(seed=0, model_class=Condenser, **kwargs) -> Condenser:
    torch.manual_seed(seed)
    kwargs.setdefault("skip_from", 2)
    kwargs.setdefault("n_head_layers", 2)
    return model_class.from_config(small_config(), **kwargs)


def make_variant(seed=0, **kwargs) -> CondenserVariant:
    """The mechanism page's variants and chapter 8's control: ``make_condenser``'s model, switches on."""
    return make_condenser(seed, CondenserVariant, **kwargs)


def make_batch(seed=0, batch_size=4, length=16, lengths=None):
    """Random ids (5.. = ordinary tokens), [CLS]=2 first, ~30% labelled, >= 1 label per row, right padding."""
    g = torch.Generator().manual_seed(seed)
    lengths = lengths or [length] * batch_size
    T = max(lengths)
    input_ids = torch.randint(5, VOCAB, (len(lengths), T), generator=g)
    input_ids[:, 0] = 2
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, n in enumerate(lengths):
        attention_mask[i, :n] = 1
        input_ids[i, n:] = 0
        chosen = torch.rand(n, generator=g) < 0.3
        chosen[0] = False
        chosen[1 + int(torch.randint(n - 1, (1,), generator=g))] = True
        labels[i, :n][chosen] = input_ids[i, :n][chosen]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# ---- a tiny BERT for the training loop --------------------------------------------------------

MASK_ID, LOOP_VOCAB, SEQ = 3, 64, 12


def tiny_bert() -> BertForMaskedLM:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=LOOP_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=SEQ)  # dropout 0.1 stays on
    return BertForMaskedLM(cfg)


def token_data(n: int = 16) -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    return torch.randint(5, LOOP_VOCAB, (n, SEQ), generator=g).tolist()


def masking_collate(examples: list[list[int]]) -> dict:
    """Random MLM masking drawn from the global torch RNG, as the real collators do."""
    ids = torch.tensor(examples)
    chosen = torch.rand(ids.shape) < 0.3
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    randomise = chosen & (torch.rand(ids.shape) < 0.2)
    ids = torch.where(chosen, torch.full_like(ids, MASK_ID), ids)
    ids = torch.where(randomise, torch.randint(5, LOOP_VOCAB, ids.shape), ids)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


# ---- a linear regressor, and a run that crashes -------------------------------------------------

def regression(n=16):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, generator=g), torch.randn(1, generator=g)) for _ in range(n)]


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x), y)}


def regression_collate(examples):
    return {"x": torch.stack([e[0] for e in examples]), "y": torch.stack([e[1] for e in examples])}


def crash_in_step(step: int, cfg: TrainConfig, output_dir) -> None:
    """Train with ``cfg`` into ``output_dir`` until step ``step`` crashes (a checkpoint of the last
    ``save_every`` stays)."""
    calls = {"n": 0}

    def crashing(examples):
        calls["n"] += 1
        if calls["n"] == step:
            raise RuntimeError(f"simulated crash in step {step}")
        return regression_collate(examples)

    with pytest.raises(RuntimeError, match="simulated"):
        train(Regressor(), regression(), cfg, output_dir=output_dir, collate_fn=crashing, progress=False)

