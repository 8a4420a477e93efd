"""What each epoch of a training run draws, as a function of the run's seed alone: the epoch's data
(a callable's, drawn with the global RNGs seeded by (seed, epoch)), its order and its number of
batches, and the seed derivation that the loop's per-step seeding (``loop.set_step_seed``) shares.

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop's determinism design, in
``loop.py``'s docstring): nothing random is carried from step to step or epoch to epoch, so a
resumed run draws what the uninterrupted one drew.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed

from ..utils.errors import ConfigError


def derive_seed(*parts: int) -> int:
    """One 32-bit seed from ``parts`` (the run's seed, a stream number, a step or epoch, ...)."""
    # SeedSequence hashes the tuple, so nearby (seed, step) pairs give unrelated streams and
    # (seed=1, step=2) cannot collide with (seed=2, step=1) as seed+step would.
    entropy = [int(p) & 0xFFFF_FFFF_FFFF_FFFF for p in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])  # < 2**32, fits NumPy


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order epoch ``epoch`` visits ``n`` examples in: a permutation seeded by (seed, epoch)."""
    g = torch.Generator().manual_seed(derive_seed(seed, 1, epoch))
    return torch.randperm(n, generator=g)


class EpochData:
    """``data`` as a function of the epoch; a callable is called once per epoch (cached)."""

    def __init__(self, data: Any, seed: int):
        if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
            self.fn = None
        elif callable(data):
            self.fn = data
        else:
            raise TypeError(f"data must be a sized sequence (list, datasets.Dataset) or a callable "
                            f"epoch -> sequence, got {type(data).__name__}")
        self.data, self.seed, self.epoch, self.cache = data, seed, None, None

    def __call__(self, epoch: int) -> Sequence:
        if self.fn is None:
            return self.data
        if epoch != self.epoch:
            # Seeded (identically on every process) so a callable that draws from the global
            # RNGs, e.g. coCondenser's fresh spans, gives the same data again on resume.
            set_seed(derive_seed(self.seed, 2, epoch))
            seq = self.fn(epoch)
            if not (hasattr(seq, "__getitem__") and hasattr(seq, "__len__")):
                raise TypeError(f"data({epoch}) must return a sized sequence, got {type(seq).__name__}")
            self.epoch, self.cache = epoch, seq
        return self.cache


def batches_per_epoch(seq: Sequence, batch_size: int, epoch: int) -> int:
    """The full batches in epoch ``epoch``'s ``seq`` (the last incomplete one is dropped)."""
    n = len(seq)
    if n < batch_size:
        raise ConfigError(f"epoch {epoch} has {n} examples, fewer than batch_size={batch_size}: "
                          "lower batch_size or give more data")
    return n // batch_size
