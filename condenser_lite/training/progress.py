"""A training run's bookkeeping: where it is (the counters a checkpoint stores), its clocks across
resumes, the log records it writes, and what ``loop.train`` returns (``TrainResult``).

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop and its ``log.jsonl``); chapter 6
plots the log, chapter 4's accounting reads its CPU seconds.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from accelerate import Accelerator
from torch import nn

from .update import evaluate

RESERVED = ("step", "epoch", "lr", "elapsed", "cpu", "threads")  # log keys that metrics may not overwrite


@dataclass
class TrainResult:
    """What ``loop.train`` returns. ``step``: optimizer updates done in the whole run;
    ``epoch``: 0-based epoch of the last update's batch; ``history``: the log records of the
    whole run (also in ``log_path``); ``wall_time``: seconds over all resumed segments;
    ``resumed_from``: the checkpoint step this call started from (None for a fresh run)."""

    step: int
    epoch: int
    history: list[dict]
    log_path: Path
    wall_time: float
    resumed_from: int | None


@dataclass
class Progress:
    """Where a run is: the counters a checkpoint stores, and the metric sums since the last log line."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    saved: int = 0  # the step of the last checkpoint
    pending: dict[str, float] = dataclasses.field(default_factory=dict)
    pending_n: int = 0

    @classmethod
    def of(cls, state: dict | None) -> Progress:
        if not state:
            return cls()
        return cls(step=state["step"], epoch=state["epoch"], batch_in_epoch=state["batch_in_epoch"],
                   saved=state["step"], pending=dict(state["pending"]), pending_n=state["pending_n"])

    def add(self, sums: Mapping[str, float]) -> None:
        """One more update's metrics towards the next log line's means."""
        for k, v in sums.items():
            self.pending[k] = self.pending.get(k, 0.0) + v
        self.pending_n += 1


@dataclass
class Clock:
    """Wall and process-CPU seconds of a run across resumes; the CPU spent in evaluations is kept
    apart, so ``cpu`` counts training steps only."""

    wall_before: float = 0.0
    cpu_before: float = 0.0
    cpu_eval: float = 0.0
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    c0: float = dataclasses.field(default_factory=time.process_time)

    @classmethod
    def of(cls, state: dict | None) -> Clock:
        return cls(wall_before=state["wall_time"], cpu_before=state.get("cpu_time", 0.0)) if state else cls()

    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.t0

    def cpu(self) -> float:
        return self.cpu_before + time.process_time() - self.c0 - self.cpu_eval


def record(p: Progress, lr: float, clock: Clock,
           held_out: tuple[nn.Module, Accelerator, Callable, Callable | None] | None) -> dict:
    """One log record: the means of the updates since the last one (which it clears), the
    learning rate and the clocks; with ``held_out`` = ``(model, acc, eval_fn, on_eval)`` also the
    held-out evaluation and what ``on_eval`` adds to it (on the main process)."""
    means = {k: v / p.pending_n for k, v in p.pending.items() if k not in RESERVED}
    rec = {"step": p.step, "epoch": p.epoch, "lr": lr, "loss": means.pop("loss"), **means,
           "elapsed": round(clock.wall(), 3), "cpu": round(clock.cpu(), 3)}
    if held_out is not None:
        model, acc, eval_fn, on_eval = held_out
        c = time.process_time()
        rec.update(evaluate(model, acc, eval_fn))
        clock.cpu_eval += time.process_time() - c  # kept off the run's CPU seconds
        if on_eval is not None and acc.is_main_process:
            rec.update(on_eval(p.step, {k: v for k, v in rec.items() if k.startswith("eval_")}) or {})
    p.pending, p.pending_n = {}, 0
    return rec


def finish(out_dir: Path, acc: Accelerator, step: int, epoch: int, history: list[dict],
           log_path: Path, wall: float, resumed_from: int | None, total: int) -> TrainResult:
    """The run's ``TrainResult``, its final counters also written to ``out_dir/train_state.json``."""
    if acc.is_main_process:
        (out_dir / "train_state.json").write_text(json.dumps(
            {"step": step, "epoch": epoch, "total_steps": total, "wall_time": round(wall, 3),
             "resumed_from": resumed_from}, indent=1) + "\n")
    return TrainResult(step=step, epoch=epoch, history=history, log_path=log_path,
                       wall_time=wall, resumed_from=resumed_from)
