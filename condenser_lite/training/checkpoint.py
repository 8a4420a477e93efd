"""The training loop's resumable checkpoint: written atomically, recovered after a kill, read
back with every file checked.

``<output_dir>/checkpoint/`` holds the weights, the optimizer and scheduler states, the RNG
states and ``state.json`` (the step, the epoch and the settings the run depends on). It is
filled in a temporary folder and swapped in by renames, so a kill at any moment leaves one
complete checkpoint; ``state.json`` is written last, so a folder without it is incomplete.
A damaged or incomplete checkpoint is a ``CheckpointError`` that says how to restart.
``save_model`` writes a finished model's folder without transformers' progress bar.
Explained in chapter 2, `notebooks/02_condenser.ipynb` (exact resume), with ``loop.train``.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import random
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from accelerate import Accelerator
from torch import nn

from ..retrieval.pooling import CLS, write_pooling
from ..utils.errors import CheckpointError
from ..utils.loading import mark_saved

CHECKPOINT = "checkpoint"
STATE_FILE = "state.json"  # written last: a checkpoint folder without it is incomplete
RNG_FILE = "rng.pt"  # optional: exact resume reseeds every step
CHECKPOINT_FILES = ("model.pt", "optimizer.pt", "scheduler.pt", STATE_FILE)


def recover_checkpoint(out_dir: Path) -> None:
    """Finish or undo a checkpoint swap that a kill interrupted (see save_checkpoint)."""
    final, old, tmp = (out_dir / CHECKPOINT, out_dir / f"{CHECKPOINT}.old", out_dir / f"{CHECKPOINT}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)  # an unfinished write; the last good checkpoint is elsewhere
    if old.exists():
        if (final / STATE_FILE).exists():
            shutil.rmtree(old)
        else:
            if final.exists():
                shutil.rmtree(final)
            old.rename(final)


def save_checkpoint(out_dir: Path, accelerator: Accelerator, model: nn.Module, optimizer,
                     scheduler, state: dict) -> None:
    """Write ``checkpoint/`` atomically: fill a temp folder, then swap it in by renames.

    A kill at any moment leaves either the previous complete checkpoint or the new one
    (``recover_checkpoint`` completes a half-done swap on the next start).
    """
    if not accelerator.is_main_process:
        return
    final, old, tmp = (out_dir / CHECKPOINT, out_dir / f"{CHECKPOINT}.old", out_dir / f"{CHECKPOINT}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(accelerator.unwrap_model(model).state_dict(), tmp / "model.pt")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    # Not needed for exact resume (every step reseeds); kept so code after train() that draws
    # random numbers also continues as it would have.
    torch.save(rng_state(), tmp / RNG_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1))
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


@contextlib.contextmanager
def no_transformers_bars() -> Iterator[None]:
    """transformers' progress bars (and huggingface_hub's, which it switches with them) off for the
    block, as they were afterwards. ``save_pretrained`` draws a "Writing model shards" bar even for
    the one shard of a small model: after the loop's own bar it only adds noise."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    bars, hub_bars = hf_logging.is_progress_bar_enabled(), not are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()  # turns huggingface_hub's on too
        if hub_bars:
            enable_progress_bars()
        elif bars:
            disable_progress_bars()


def save_model(model: nn.Module, folder: str | Path) -> None:
    """``model.save_pretrained(folder)`` without transformers' progress bar (``no_transformers_bars``):
    how a finished stage or retriever saves its model. The folder is also a sentence-transformers
    folder pooled as the model is (a retriever's pooling; ``[CLS]`` for a pre-trained stage, whose
    head reads that vector), and is marked as this library's (``loading.mark_saved``). Chapter 2."""
    with no_transformers_bars():
        model.save_pretrained(folder)
    write_pooling(folder, getattr(model, "pooling", CLS))
    mark_saved(folder)


def rng_state() -> dict:
    """Python's, NumPy's and torch's global RNG states as tensors, lists and numbers only, so that
    ``torch.load(weights_only=True)`` reads them back: a checkpoint never needs a full pickle, which
    could run any code hidden in a folder someone else wrote."""
    version, keys, gauss = random.getstate()
    name, np_keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, torch.tensor(keys, dtype=torch.int64), gauss],
            "numpy": [name, torch.from_numpy(np_keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def restore_rng(ckpt: Path) -> None:
    """Set the global RNGs to the states ``rng_state`` saved in ``ckpt``'s ``rng.pt``, if it has
    one (exact resume does not need it); a file holding anything else is refused (``load_part``)."""
    if not (ckpt / RNG_FILE).exists():
        return
    rng = load_part(ckpt, RNG_FILE)
    version, keys, gauss = rng["python"]
    random.setstate((version, tuple(keys.tolist()), gauss))
    name, np_keys, *rest = rng["numpy"]
    np.random.set_state((name, np_keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])


def _restart(ckpt: Path) -> str:
    return f"delete {ckpt} to start from step 0 (command line: --restart)"


def read_state(ckpt: Path) -> dict:
    """A checkpoint's ``state.json``, after checking that every file of the checkpoint is there."""
    restart = _restart(ckpt)
    missing = [name for name in CHECKPOINT_FILES if not (ckpt / name).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {ckpt} is incomplete: {', '.join(missing)} missing (it was not written "
                              f"by a finished save). Restore the files, or {restart}")
    try:
        return json.loads((ckpt / STATE_FILE).read_text())
    except (ValueError, OSError) as err:
        raise CheckpointError(f"checkpoint {ckpt}: {STATE_FILE} cannot be read ({err}); {restart}") from err


def load_part(ckpt: Path, name: str) -> Any:
    """``torch.load`` of one checkpoint file with ``weights_only=True`` (tensors and plain data,
    never code), a damaged file or one holding other objects reported as a ``CheckpointError``."""
    restart = _restart(ckpt)
    try:
        return torch.load(ckpt / name, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        try:  # names what the file asks to import, without importing or running it
            foreign = torch.serialization.get_unsafe_globals_in_checkpoint(ckpt / name)
        except Exception:  # a file too damaged to list: reported below as damaged
            foreign = []
        if foreign:
            raise CheckpointError(f"checkpoint {ckpt}: {name} holds Python objects other than tensors "
                                  f"({', '.join(sorted(foreign)[:3])}), which this library never saves: it is not "
                                  f"loaded, since unpickling it could run code. Use a checkpoint you trust, or {restart}"
                                  ) from None
        raise _damaged(ckpt, name, err, restart) from err
    except Exception as err:  # torch raises several types for a cut-short or garbled file
        raise _damaged(ckpt, name, err, restart) from err


def _damaged(ckpt: Path, name: str, err: Exception, restart: str) -> CheckpointError:
    reason = str(err).strip().split(". ")[0][:200]
    return CheckpointError(f"checkpoint {ckpt}: {name} cannot be read ({type(err).__name__}: {reason}); the file "
                           f"is damaged (a copy cut short?). Restore it, or {restart}")
