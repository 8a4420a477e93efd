"""Which accelerator runs the work, and the few calls that differ on a TPU, kept in one place.

Explained in chapter 3, `notebooks/03_cocondenser.ipynb` (the gradient cache replays the TPU's
random state too) and chapter 4 (encoding). A Colab TPU is an XLA device (``torch_xla``); three
things differ there and nowhere else:

* the device to load a checkpoint onto (``default_device``: CUDA, else XLA, else stay on the CPU);
* the random state dropout draws from lives on the device: the gradient cache records and replays
  it (``gradcache.RandContext`` through ``xla.get_rng_state`` / ``xla.set_rng_state``);
* XLA compiles a graph per tensor shape, so encoding pads every batch to one width
  (``search.encode``).

``is_xla`` is the one device check; every ``torch_xla`` call goes through the ``xla`` object,
which imports ``torch_xla`` on first use. Tests replace ``xla`` with a stand-in to check the
branching on a CPU; nothing here has run on a TPU (README, "What runs where").
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch


def is_xla(device: Any) -> bool:
    """Whether ``device`` (a ``torch.device``, a string such as ``"xla:0"``, or None) is an XLA
    device (TPU): the one check behind which the library's XLA calls sit. Chapter 3."""
    if device is None:
        return False
    return torch.device(device).type == "xla"


class TorchXLA:
    """The ``torch_xla`` calls the library makes, imported when first used (chapter 3)."""

    def available(self) -> bool:
        """Whether ``torch_xla`` is installed (a TPU runtime)."""
        return importlib.util.find_spec("torch_xla") is not None

    def device(self) -> torch.device:
        import torch_xla.core.xla_model as xm

        return xm.xla_device()

    def get_rng_state(self, device: Any) -> int:
        """The seed XLA's next random op (dropout) draws from on ``device``."""
        import torch_xla.core.xla_model as xm

        return xm.get_rng_state(device=torch.device(device))

    def set_rng_state(self, state: int, device: Any) -> None:
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(state, device=torch.device(device))


xla = TorchXLA()


def default_device() -> torch.device | str | None:
    """Where a checkpoint loaded by name goes: ``"cuda"`` if there is a GPU, else the XLA device
    if ``torch_xla`` is installed (a TPU), else None (the CPU, where it loads). Chapter 4."""
    if torch.cuda.is_available():
        return "cuda"
    if xla.available():
        return xla.device()
    return None
