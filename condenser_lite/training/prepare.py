"""A training run's pieces made ready: the accelerate ``Accelerator``, AdamW's parameter groups,
and the model prepared (compiled where asked) with, when a run resumes, the checkpoint's weights,
optimizer, scheduler and RNG states put back.

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop: AdamW, warm-up and decay);
``loop.train`` calls these before its first update.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from ..utils.devices import resolve_precision
from ..utils.errors import CheckpointError
from .checkpoint import load_part, restore_rng

# "linear": warm-up then linear decay to 0 (BERT; with warmup_ratio=0.5 the triangular
# "one-cycle" of Cramming); "constant": warm-up then a constant rate.
SCHEDULES = ("linear", "constant")


def make_accelerator(mixed_precision: str) -> Accelerator:
    """The accelerate ``Accelerator`` for ``mixed_precision`` (``"auto"`` resolved by
    ``devices.resolve_precision``), rebuilt where a single process switches precision. Chapter 2."""
    from accelerate.state import AcceleratorState, is_initialized

    mp = resolve_precision(mixed_precision)
    if is_initialized() and AcceleratorState().mixed_precision != mp:
        state = AcceleratorState()
        if state.num_processes > 1:
            raise ValueError(
                f"accelerate is already set up with mixed_precision={state.mixed_precision!r} in "
                f"this distributed run; TrainConfig.mixed_precision={mixed_precision!r} cannot "
                "change it. Pass the same precision, or pass accelerator=.")
        # accelerate keeps one global state per process; a notebook that trains first in
        # full precision and then in bf16 needs it rebuilt (safe in a single process).
        AcceleratorState._reset_state()
    return Accelerator(mixed_precision=mp)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on weights, none on biases and norm-layer weights.

    Decaying a LayerNorm gain pulls it towards 0 (not 1) and decaying a bias has no
    regularising use; BERT and the Condenser code exclude both (chapter 2).
    """
    no_decay: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)) \
            or "Norm" in type(module).__name__  # also catches RMSNorm / custom LayerNorm classes
        for name, p in module.named_parameters(recurse=False):
            if is_norm or name == "bias" or name.endswith("_bias"):
                no_decay.add(id(p))
    decay, plain = [], []
    for p in model.parameters():  # deduplicates tied weights (MLM decoder = word embeddings)
        if p.requires_grad:
            (plain if id(p) in no_decay else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": plain, "weight_decay": 0.0}]


def load_weights(model: nn.Module, ckpt: Path) -> None:
    """The checkpoint ``ckpt``'s weights into ``model``; ``CheckpointError`` where they do not fit it."""
    try:
        model.load_state_dict(load_part(ckpt, "model.pt"))
    except RuntimeError as err:  # the weights do not fit this model
        raise CheckpointError(f"{ckpt}/model.pt does not fit this model ({str(err)[:300]}); "
                              "use another output folder, or start fresh (command line: --restart)") from err


def prepare(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, acc: Accelerator,
            compile_model: bool, resume_from: Path | None) -> tuple[nn.Module, Any, Any]:
    """The model, optimizer and scheduler ready to train: prepared by ``acc`` (compiled where
    ``compile_model``), with the optimizer's, scheduler's and RNGs' state of the checkpoint
    ``resume_from`` where resuming, and the model in train mode."""
    model, optimizer = acc.prepare(model, optimizer)
    if compile_model:
        # After prepare, so the autocast wrapper is traced too; accelerate's unwrap_model
        # sees through the compiled module when saving. fallback_random: dropout draws from
        # torch's RNG as in eager mode, so (seed, step) still fixes every mask.
        model = torch.compile(model, options={"fallback_random": True})
    # The scheduler stays unwrapped: accelerate would step it once per process, but ``total``
    # already counts global optimizer updates.
    if resume_from is not None:
        optimizer.load_state_dict(load_part(resume_from, "optimizer.pt"))
        scheduler.load_state_dict(load_part(resume_from, "scheduler.pt"))
        restore_rng(resume_from)
    optimizer.zero_grad(set_to_none=True)  # drop grads left by an interrupted step on this model
    model.train()
    return model, optimizer, scheduler
