"""Several processes as one batch: who this process is, gathering and summing across processes,
and the hooks of a training step with or without ``accelerate``.

The gradient cache (``modeling/gradcache.py``) and the retriever's step
(``retrieval/biencoder.py``) gather every process's vectors so the contrastive loss sees the whole
global batch as in-batch negatives (coCondenser section 3.3; DPR's cross-device negatives). On one
process every function here is the identity, so the single-CPU path has no branch of its own.

Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


def world_info() -> tuple[int, int]:
    """``(world_size, rank)`` of the initialised ``torch.distributed`` group, else ``(1, 0)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """All-gather ``x`` ``[m, ...]`` from every process into ``[world * m, ...]`` (rank order),
    with this process's own slice replaced by ``x`` itself so gradients flow into it.

    ``dist.all_gather`` returns plain tensors; the other processes' slices are constants here
    (their gradients are computed by their own processes). Every process must pass the same shape.
    Returns ``x`` unchanged when not running distributed.

    >>> x = torch.ones(2, 3, requires_grad=True)
    >>> gather_with_grad(x) is x  # one process
    True
    """
    world, rank = world_info()
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[rank] = x
    return torch.cat(parts, dim=0)


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """``x`` summed over every process (a copy; ``x`` itself on one process)."""
    if world_info()[0] > 1:
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def check_same_size(n_rows: int, device: torch.device) -> None:
    """Refuse, in one line, a step where the processes hold different numbers of rows: an
    all-gather of unequal shapes would hang or fail deep inside ``torch.distributed``."""
    world, _ = world_info()
    if world == 1:
        return
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([n_rows], dtype=torch.long, device=device))
    sizes_list = [int(s) for s in sizes]
    if len(set(sizes_list)) != 1:
        raise ValueError(
            f"every process must hold the same number of spans to gather them, got {sizes_list}; "
            "drop the last incomplete batch (drop_last=True / accelerate's even_batches)"
        )


def step_hooks(model: torch.nn.Module, accelerator: Any = None) -> tuple[Callable, Callable, Callable]:
    """``(autocast, backward, no_sync)`` for a training step, with or without ``accelerate``.

    With an ``Accelerator``: its ``autocast()``, ``backward`` (loss scaling) and ``no_sync(model)``;
    without: no autocast, ``loss.backward()``, and DDP's ``model.no_sync()`` when the model has
    one.
    """
    if accelerator is not None:
        return accelerator.autocast, accelerator.backward, lambda: accelerator.no_sync(model)
    no_sync = model.no_sync if hasattr(model, "no_sync") else contextlib.nullcontext
    return contextlib.nullcontext, lambda loss: loss.backward(), no_sync
