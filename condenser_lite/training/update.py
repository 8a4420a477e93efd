"""One optimizer update's gradients and metrics, and the held-out evaluation between updates: the
parts of the training loop (``loop.train``) that run the model.

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop); chapter 3 passes the gradient
cache's ``step_fn`` through ``gradients``. The loop around them (seeds, data order, checkpoints,
the log, the threads) is ``loop.py``'s, with ``epochs.py``, ``prepare.py`` and ``progress.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from torch import nn

from ..utils.errors import DivergedError


def scalar_fields(out: Any) -> dict[str, float]:
    """Every scalar float/tensor field of a model output (loss, head_loss, late_loss, ...): what
    the loop logs of each update. Chapter 2."""
    if isinstance(out, Mapping):
        items = list(out.items())
    elif dataclasses.is_dataclass(out):
        items = [(f.name, getattr(out, f.name)) for f in dataclasses.fields(out)]
    else:
        items = list(vars(out).items())
    found = {}
    for k, v in items:
        if torch.is_tensor(v) and v.ndim == 0 and v.dtype != torch.bool:
            found[k] = float(v.detach())
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            found[k] = float(v)
    return found


def model_loss(out: Any) -> torch.Tensor:
    """The scalar ``loss`` of a model output; a ``ValueError`` that says what to pass where it has
    none. Chapter 2."""
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    if loss is None or not torch.is_tensor(loss) or loss.ndim != 0:
        raise ValueError("model(**batch) must return an object with a scalar tensor .loss "
                         "(put labels in the batch), or pass step_fn= to compute it yourself")
    return loss


def gradients(model: nn.Module, examples: Iterable[list], grad_accum: int, acc: Accelerator,
              collate_fn: Callable[[list], dict], step_fn: Callable[..., dict] | None) -> dict[str, float]:
    """One update's gradients over its ``grad_accum`` micro-batches (``examples``: one list each,
    read as they are used); returns the metrics averaged over them and over processes. Chapter 2."""
    sums: dict[str, float] = {}
    for m, micro_batch in enumerate(examples):
        batch = send_to_device(collate_fn(micro_batch), acc.device)
        # DDP: all-reduce gradients only once, on the last micro-batch
        sync = m == grad_accum - 1
        with contextlib.nullcontext() if sync else acc.no_sync(model):
            if step_fn is None:
                out = model(**batch)
                acc.backward(model_loss(out) / grad_accum)
                metrics = scalar_fields(out)
            else:
                metrics = {k: float(v) for k, v in step_fn(model, batch, acc).items()}
                if "loss" not in metrics:
                    raise ValueError("step_fn must return a dict with a 'loss' entry")
        for k, v in metrics.items():
            sums[k] = sums.get(k, 0.0) + v / grad_accum
    if acc.num_processes > 1:  # average over processes, in a fixed key order on every process
        keys = sorted(sums)
        vals = acc.reduce(torch.tensor([sums[k] for k in keys], device=acc.device), "mean")
        sums = dict(zip(keys, vals.tolist()))
    if step_fn is not None and grad_accum > 1:
        for p in model.parameters():  # step_fn summed micro-batch gradients
            if p.grad is not None:
                p.grad.div_(grad_accum)
    return sums


def refuse_divergence(loss: float, step: int, epoch: int, saved: int, ckpt: Path, out_dir: Path) -> None:
    """``DivergedError`` before the update ``step`` (1-based) with a non-finite ``loss`` is
    applied; ``saved``: the step of the last checkpoint (0: none). Chapter 2."""
    if math.isfinite(loss):
        return
    # The checkpoint's loss was finite, but its weights may already be diverging:
    # it is not called "good", and resuming it would meet the same step again.
    where = (f"the last checkpoint, {ckpt} (step {saved}), was saved before the loss became "
             "non-finite, though the weights may have been diverging already (see loss and "
             "grad_norm in log.jsonl)") if saved else "no checkpoint was saved"
    raise DivergedError(
        f"loss is {loss} at step {step} (epoch {epoch}); stopped before applying "
        f"that update; {where}. Lower lr (or check the data) and start again from step 0: "
        f"resume=False (command line: --restart), or delete {out_dir}.")


def evaluate(model: nn.Module, acc: Accelerator,
             eval_fn: Callable[[nn.Module], Mapping[str, float]]) -> dict[str, float]:
    """``eval_fn`` on the unwrapped model in eval mode, without gradients and in full precision, so
    held-out numbers compare across runs of any precision; its values as ``eval_<name>``.
    Chapter 2."""
    plain = acc.unwrap_model(model)
    # bypass the autocast wrapper accelerate put on forward (kept in _original_forward) for the call
    patched = plain.__dict__.get("forward")
    if "_original_forward" in plain.__dict__:
        plain.forward = plain._original_forward
    plain.eval()
    try:
        with torch.no_grad(), torch.autocast(acc.device.type, enabled=False):
            values = {f"eval_{k}": float(v) for k, v in eval_fn(plain).items()}
    finally:
        plain.train()
        if patched is not None:
            plain.forward = patched
    return values
