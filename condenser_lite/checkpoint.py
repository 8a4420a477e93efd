"""The training loop's resumable checkpoint: written atomically, recovered after a kill, read
back with every file checked.

``<output_dir>/checkpoint/`` holds the weights, the optimizer and scheduler states, the RNG
states and ``state.json`` (the step, the epoch and the settings the run depends on). It is
filled in a temporary folder and swapped in by renames, so a kill at any moment leaves one
complete checkpoint; ``state.json`` is written last, so a folder without it is incomplete.
A damaged or incomplete checkpoint is a ``CheckpointError`` that says how to restart.
Explained in chapter 2, `notebooks/02_condenser.ipynb` (exact resume), with ``training.train``.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from torch import nn

from .errors import CheckpointError

CHECKPOINT = "checkpoint"
STATE_FILE = "state.json"  # written last: a checkpoint folder without it is incomplete
CHECKPOINT_FILES = ("model.pt", "optimizer.pt", "scheduler.pt", STATE_FILE)  # rng.pt is optional


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
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
           "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    torch.save(rng, tmp / "rng.pt")
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1))
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


def restore_rng(path: Path) -> None:
    if not path.exists():
        return
    rng = torch.load(path, weights_only=False)  # our own file: Python/NumPy states are not tensors
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])


def read_state(ckpt: Path) -> dict:
    """A checkpoint's ``state.json``, after checking that every file of the checkpoint is there."""
    restart = f"delete {ckpt} to start from step 0 (command line: --restart)"
    missing = [name for name in CHECKPOINT_FILES if not (ckpt / name).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {ckpt} is incomplete: {', '.join(missing)} missing (it was not written "
                              f"by a finished save). Restore the files, or {restart}")
    try:
        return json.loads((ckpt / STATE_FILE).read_text())
    except (ValueError, OSError) as err:
        raise CheckpointError(f"checkpoint {ckpt}: {STATE_FILE} cannot be read ({err}); {restart}") from err


def load_part(ckpt: Path, name: str) -> Any:
    """``torch.load`` of one checkpoint file, a damaged file reported as a ``CheckpointError``."""
    try:
        return torch.load(ckpt / name, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a cut-short or garbled file
        reason = str(err).strip().split(". ")[0][:200]
        raise CheckpointError(f"checkpoint {ckpt}: {name} cannot be read ({type(err).__name__}: {reason}); the file "
                              f"is damaged (a copy cut short?). Restore it, or delete {ckpt} to start from "
                              "step 0 (command line: --restart)") from err
