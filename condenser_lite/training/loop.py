"""One small training loop for every stage: MLM and Condenser pre-training, coCondenser, fine-tuning.

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop and its determinism design);
chapter 3 uses it with the gradient cache's ``step_fn``, chapter 4 for fine-tuning, chapter 6
reads its ``log.jsonl``.

Determinism: one seed per step
------------------------------
A run that is stopped and resumed should end with the very same weights as a run that was
never stopped. Saving and restoring every random-number generator is fragile: DataLoader
workers keep their own generators, each CUDA device has one, collators may draw from Python's
``random``. So this loop does not carry random state from step to step at all. Before optimizer
step ``k`` it reseeds ``random``, NumPy and torch (CPU and every CUDA device) from
``(seed, k)`` with :func:`set_step_seed`, and only then builds the batch and runs the model::

    for k in steps:
        set_step_seed(seed, k)            # everything random below depends only on (seed, k)
        batch = collate_fn(examples)      # MLM masking draws from the global torch RNG
        loss = model(**batch).loss        # so does dropout
        ...backward, clip, optimizer.step, scheduler.step

Step ``k`` is then a pure function of (weights, optimizer state, seed, k), and the data order
of epoch ``e`` is a permutation drawn from a ``torch.Generator`` seeded by ``(seed, e)``. A
checkpoint needs only the weights, the optimizer and scheduler states and the step counter;
resuming from it replays the uninterrupted run exactly (bit for bit on the same hardware and
thread count; ``tests/training/test_loop.py`` checks it). On a CPU the thread count is chosen
while the run goes (``threads.ThreadPolicy``: two threads only while they pay); its trials fall
on fixed updates, so on an idle machine a resumed run takes the same counts on the same
updates. Batches are built inside the loop, not by DataLoader worker processes, whose generators would escape the reseeding. Collators must draw
their randomness from the global RNGs (never from a private, unseeded generator).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from torch import nn
from tqdm import tqdm
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from ..utils.cache import output_lock, settings_diff
from ..utils.checks import check_types
from ..utils.devices import PRECISIONS, resolve_precision
from ..utils.errors import CheckpointError, ConfigError
from .checkpoint import CHECKPOINT, load_part, read_state, recover_checkpoint, restore_rng, save_checkpoint
from .threads import ThreadPolicy
from .update import evaluate, gradients, refuse_divergence

logger = logging.getLogger(__name__)
# "linear": warm-up then linear decay to 0 (BERT; with warmup_ratio=0.5 the triangular
# "one-cycle" of Cramming); "constant": warm-up then a constant rate.
SCHEDULES = ("linear", "constant")
# TrainConfig fields that change the computation: resuming needs the checkpoint to agree on all.
# output_dir, log_every, save_every, eval_every, resume, progress and compile (same maths,
# another kernel schedule) only change bookkeeping or speed.
RUN_FIELDS = ("max_steps", "epochs", "batch_size", "grad_accum", "lr", "weight_decay",
              "warmup_ratio", "max_grad_norm", "mixed_precision", "seed", "schedule")
_RESERVED = ("step", "epoch", "lr", "elapsed", "cpu", "threads")  # log keys that metrics may not overwrite


@dataclass
class TrainConfig:
    """Settings of one training run (chapter 2, `notebooks/02_condenser.ipynb`).

    ``batch_size`` is the number of examples per optimizer update, over all processes; it is
    split into ``grad_accum`` micro-batches (and, when distributed, first into one equal slice
    per process). ``max_steps`` counts optimizer updates; when None, ``epochs`` (may be
    fractional) times the steps per epoch decides. ``mixed_precision="auto"`` means bf16 where
    the hardware runs it natively and faster (a GPU or TPU that supports it; a CPU with bf16
    units, confirmed by a probe: ``devices.resolve_precision``), else full precision; ``"bf16"``
    on a CPU runs the forward pass under ``torch.autocast("cpu", torch.bfloat16)`` (accelerate's
    native AMP), which pays off only on CPUs with bf16 units (AMX / avx512_bf16) and is about 25x
    slower elsewhere (measured in ``notebooks/09_study.md``).
    ``schedule`` is ``"linear"`` (warm-up, then linear decay to 0) or ``"constant"``.
    ``compile=True`` runs the model through ``torch.compile`` (same maths). ``eval_every``:
    call ``train``'s ``eval_fn`` every that many steps (and after the last one).
    """

    output_dir: str
    max_steps: int | None = None
    epochs: float = 1.0
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float | None = 1.0
    mixed_precision: str = "no"
    seed: int = 42
    schedule: str = "linear"
    compile: bool = False
    log_every: int = 1
    save_every: int | None = None
    eval_every: int | None = None
    resume: bool = True
    progress: bool | None = None

    def __post_init__(self) -> None:
        def bad(name: str, rule: str) -> ConfigError:
            return ConfigError(f"TrainConfig.{name}={getattr(self, name)!r} is invalid: {rule}")

        check_types(self)

        if self.batch_size < 1:
            raise bad("batch_size", "it must be >= 1")
        if self.grad_accum < 1:
            raise bad("grad_accum", "it must be >= 1")
        if self.batch_size % self.grad_accum:
            raise bad("grad_accum", f"batch_size={self.batch_size} must be divisible by it")
        if self.max_steps is not None and self.max_steps < 1:
            raise bad("max_steps", "use None (epochs decide) or a count >= 1")
        if not self.epochs > 0:
            raise bad("epochs", "it must be > 0")
        if not self.lr > 0:
            raise bad("lr", "it must be > 0 (0 leaves the weights as they are)")
        if self.weight_decay < 0:
            raise bad("weight_decay", "it must be >= 0")
        if not 0 <= self.warmup_ratio < 1:
            raise bad("warmup_ratio", "it must be in [0, 1)")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise bad("max_grad_norm", "use None (no clipping) or a value > 0")
        if self.mixed_precision not in PRECISIONS:
            raise bad("mixed_precision", f"choose one of {PRECISIONS}")
        if self.seed < 0:
            raise bad("seed", "it must be >= 0")
        if self.log_every < 1:
            raise bad("log_every", "it must be >= 1")
        if self.save_every is not None and self.save_every < 1:
            raise bad("save_every", "use None (save only at the end) or a count >= 1")
        if self.eval_every is not None and self.eval_every < 1:
            raise bad("eval_every", "use None (no evaluation) or a count >= 1")
        if self.schedule not in SCHEDULES:
            raise bad("schedule", f"choose one of {SCHEDULES}")


@dataclass
class TrainResult:
    """What :func:`train` returns. ``step``: optimizer updates done in the whole run;
    ``epoch``: 0-based epoch of the last update's batch; ``history``: the log records of the
    whole run (also in ``log_path``); ``wall_time``: seconds over all resumed segments;
    ``resumed_from``: the checkpoint step this call started from (None for a fresh run)."""

    step: int
    epoch: int
    history: list[dict]
    log_path: Path
    wall_time: float
    resumed_from: int | None


def _derive_seed(*parts: int) -> int:
    # SeedSequence hashes the tuple, so nearby (seed, step) pairs give unrelated streams and
    # (seed=1, step=2) cannot collide with (seed=2, step=1) as seed+step would.
    entropy = [int(p) & 0xFFFF_FFFF_FFFF_FFFF for p in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])  # < 2**32, fits NumPy


def set_step_seed(seed: int, step: int, rank: int = 0) -> None:
    """Seed ``random``, NumPy and torch (CPU, all CUDA devices, XLA) from ``(seed, step)``.

    Called by :func:`train` before building and running each optimizer step, which makes the
    step's masking and dropout a function of (seed, step) only (chapter 2,
    `notebooks/02_condenser.ipynb`). ``rank`` (the process index) gives each process of a
    distributed run its own stream; it is 0 in a single process.
    """
    set_seed(_derive_seed(seed, 0, step, rank))


def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(_derive_seed(seed, 1, epoch))
    return torch.randperm(n, generator=g)


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


class _EpochData:
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
            set_seed(_derive_seed(self.seed, 2, epoch))
            seq = self.fn(epoch)
            if not (hasattr(seq, "__getitem__") and hasattr(seq, "__len__")):
                raise TypeError(f"data({epoch}) must return a sized sequence, got {type(seq).__name__}")
            self.epoch, self.cache = epoch, seq
        return self.cache


def _batches_per_epoch(seq: Sequence, batch_size: int, epoch: int) -> int:
    n = len(seq)
    if n < batch_size:
        raise ConfigError(f"epoch {epoch} has {n} examples, fewer than batch_size={batch_size}: "
                          "lower batch_size or give more data")
    return n // batch_size


def read_log(path: str | Path, upto: int | None = None) -> list[dict]:
    """A training run's per-step log as a list of dicts, its rows up to update ``upto`` (a resume
    keeps what its checkpoint saw); ``path`` is the log file, a run's folder or a stage's folder
    (``<stage>/train/log.jsonl``). A missing file is an empty log. Chapters 2 and 6 plot it."""
    path = Path(path)
    if path.is_dir():
        path = path / "train" / "log.jsonl" if (path / "train").exists() else path / "log.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows if upto is None else [r for r in rows if r["step"] <= upto]


def train(model: nn.Module, data: Sequence | Callable[[int], Sequence], cfg: TrainConfig, *,
          collate_fn: Callable[[list], dict], step_fn: Callable[..., dict] | None = None,
          accelerator: Accelerator | None = None,
          eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
          on_eval: Callable[[int, Mapping[str, float]], Mapping[str, Any] | None] | None = None,
          depends_on: Mapping[str, Any] | None = None) -> TrainResult:
    """Train ``model`` on ``data`` with AdamW and linear warmup/decay; resumable, deterministic.

    Explained in chapter 2, `notebooks/02_condenser.ipynb`; the module docstring gives the
    determinism design.

    * ``data``: a sized sequence of examples (list, ``datasets.Dataset``) or a callable
      ``epoch -> sequence`` (called once per epoch with the global RNGs seeded from
      (seed, epoch), so fresh random spans per epoch are still reproducible). Each epoch is
      visited in a permutation seeded by (seed, epoch); **the last incomplete batch of an
      epoch is dropped**.
    * Each optimizer step ``k`` (1-based): ``set_step_seed(cfg.seed, k)``, then for each of
      ``grad_accum`` micro-batches ``collate_fn(list_of_examples)`` -> dict of tensors, moved
      to the device, and either ``model(**batch)`` + ``accelerator.backward(loss / grad_accum)``
      or ``step_fn(model, batch, accelerator) -> {"loss": ..., ...}``, which does its own
      forward and backward (the gradient cache); with ``grad_accum > 1`` its gradients are
      averaged over the micro-batches. Then gradient clipping, optimizer and scheduler step.
    * Logged metrics (``output_dir/log.jsonl``, one JSON line per logged step, and
      ``TrainResult.history``): step, epoch, lr (the rate this step used), loss and every other
      scalar field of the model output (or of ``step_fn``'s dict), grad_norm when clipping,
      elapsed (wall) seconds and ``cpu``, the process CPU seconds spent in training steps
      (evaluation excluded; with one thread, robust to other load on the machine); averaged
      over micro-batches, processes and the steps since the last line. ``threads``: the new
      count, on the first line after the thread policy changed it (also shown in the progress
      output).
    * Threads: a run on the CPU in one process, whose caller set more than one thread, moves
      between that count and half of it as the machine's load makes them pay
      (``threads.ThreadPolicy``; ``CONDENSER_LITE_THREAD_POLICY=off`` keeps the caller's); the
      caller's count is set again when ``train`` returns.
    * ``eval_fn(model) -> {name: float}``, with ``cfg.eval_every``: called every that many steps
      and after the last one, on the unwrapped model in eval mode, without gradients and in full
      precision (the mixed-precision wrapper of ``forward`` is bypassed); its values join that
      step's log line as ``eval_<name>`` (a step with an evaluation always writes a line). The
      study page (``notebooks/09_study.md``) logs held-out MLM loss and the Condenser gauges this way.
      ``on_eval(step, values)``, on the main process after each evaluation, gets the step and
      those ``eval_*`` values; what it returns joins the same line (``pretrain``'s health verdict).
    * ``output_dir/checkpoint/`` is written every ``save_every`` steps, at the end and on
      Ctrl-C (KeyboardInterrupt, re-raised afterwards). With ``resume=True`` a checkpoint
      there is continued exactly; it must agree with ``cfg``'s computing fields and with
      ``depends_on`` (JSON-able: what else the result depends on, e.g. the starting weights'
      and the data's identity), else ``CheckpointError`` names the differing fields; so does a
      damaged or incomplete checkpoint (it is never deleted unasked). ``resume=False`` deletes
      it and the log and starts fresh.
    * ``output_dir`` is locked for the call (``cache.output_lock``): a second process training
      into the same folder waits, then resumes or reuses what the first left.
    * A NaN/infinite loss raises ``DivergedError`` before the update is applied (``update.refuse_divergence``).
    * Distributed: pass ``accelerator=``; ``batch_size`` is global and each process takes an
      equal contiguous slice of every step's examples (DDP; FSDP/DeepSpeed not supported).

    The trained model is left in place (save it yourself: ``checkpoint.save_model`` is
    ``model.save_pretrained`` without transformers' progress bar); the final
    step and wall time also go to ``output_dir/train_state.json``.
    """
    if (eval_fn is None) != (cfg.eval_every is None):
        raise ValueError("pass eval_fn= together with TrainConfig.eval_every (or neither): "
                         f"got eval_fn={'set' if eval_fn else None}, eval_every={cfg.eval_every}")
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    acc = accelerator if accelerator is not None else make_accelerator(cfg.mixed_precision)
    if accelerator is not None and cfg.mixed_precision not in ("auto", acc.mixed_precision):
        raise ValueError(f"TrainConfig.mixed_precision={cfg.mixed_precision!r} but the accelerator "
                         f"passed in uses {acc.mixed_precision!r}: make them agree (or use 'auto')")
    if acc.gradient_accumulation_steps != 1:
        raise ValueError("the accelerator has gradient_accumulation_steps != 1, which would scale "
                         "the loss a second time: set TrainConfig.grad_accum instead")
    if cfg.batch_size % (acc.num_processes * cfg.grad_accum):
        raise ConfigError(f"batch_size={cfg.batch_size} must be divisible by processes x grad_accum "
                          f"= {acc.num_processes} x {cfg.grad_accum}")
    # Only the main process writes the folder, so only it takes the lock (the others wait for
    # it at the first barrier).
    with output_lock(out_dir) if acc.is_main_process else contextlib.nullcontext():
        return _train(model, data, cfg, acc, collate_fn, step_fn, eval_fn, on_eval, depends_on)


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), so a saved copy compares equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass
class _Progress:
    """Where a run is: the counters a checkpoint stores, and the metric sums since the last log line."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    saved: int = 0  # the step of the last checkpoint
    pending: dict[str, float] = dataclasses.field(default_factory=dict)
    pending_n: int = 0

    @classmethod
    def of(cls, state: dict | None) -> _Progress:
        if not state:
            return cls()
        return cls(step=state["step"], epoch=state["epoch"], batch_in_epoch=state["batch_in_epoch"],
                   saved=state["step"], pending=dict(state["pending"]), pending_n=state["pending_n"])


@dataclass
class _Clock:
    """Wall and process-CPU seconds of a run across resumes; the CPU spent in evaluations is kept
    apart, so ``cpu`` counts training steps only."""

    wall_before: float = 0.0
    cpu_before: float = 0.0
    cpu_eval: float = 0.0
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    c0: float = dataclasses.field(default_factory=time.process_time)

    @classmethod
    def of(cls, state: dict | None) -> _Clock:
        return cls(wall_before=state["wall_time"], cpu_before=state.get("cpu_time", 0.0)) if state else cls()

    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.t0

    def cpu(self) -> float:
        return self.cpu_before + time.process_time() - self.c0 - self.cpu_eval


def _start_or_resume(out_dir: Path, cfg: TrainConfig, acc: Accelerator, run: dict, identity: Any,
                     total: int) -> tuple[dict | None, list[dict]]:
    """The checkpoint's state to resume (None: start fresh) and the log lines up to it; a
    checkpoint of another run is refused, and a fresh start removes a stale one."""
    ckpt, log_path = out_dir / CHECKPOINT, out_dir / "log.jsonl"
    if acc.is_main_process:
        recover_checkpoint(out_dir)
    acc.wait_for_everyone()
    state = None
    if cfg.resume and ckpt.exists():
        state = read_state(ckpt)
        diff = settings_diff(state["run"], run, "checkpoint") + settings_diff(state.get("depends_on", {}), identity,
                                                                           "checkpoint")
        if diff:
            raise CheckpointError(
                f"{ckpt} belongs to another run ({'; '.join(diff)}). Start fresh with resume=False (command "
                "line: --restart; it deletes that checkpoint and log) or use another output folder.")
        logger.info("%s %s at step %d of %d", "reusing the finished run in" if state["step"] >= total
                    else "resuming from the checkpoint in", out_dir, state["step"], total)
    history = read_log(log_path, state["step"] if state else 0)
    acc.wait_for_everyone()  # every process has read the log before it is rewritten
    if acc.is_main_process:
        if not state and ckpt.exists():
            shutil.rmtree(ckpt)  # resume=False: a stale checkpoint must not outlive the new log
        log_path.write_text("".join(json.dumps(r) + "\n" for r in history))
    acc.wait_for_everyone()
    return state, history


def _load_weights(model: nn.Module, ckpt: Path) -> None:
    try:
        model.load_state_dict(load_part(ckpt, "model.pt"))
    except RuntimeError as err:  # the weights do not fit this model
        raise CheckpointError(f"{ckpt}/model.pt does not fit this model ({str(err)[:300]}); "
                              "use another output folder, or start fresh (command line: --restart)") from err


def _optimizer(model: nn.Module, cfg: TrainConfig, total: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (no decay on biases and norms) and its warm-up schedule over ``total`` updates."""
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr)
    warmup = math.ceil(cfg.warmup_ratio * total)
    scheduler = (get_constant_schedule_with_warmup(optimizer, warmup) if cfg.schedule == "constant"
                 else get_linear_schedule_with_warmup(optimizer, warmup, total))
    return optimizer, scheduler


def _train(model: nn.Module, data: Any, cfg: TrainConfig, acc: Accelerator, collate_fn: Callable[[list], dict],
           step_fn: Callable[..., dict] | None, eval_fn: Callable[[nn.Module], Mapping[str, float]] | None,
           on_eval: Callable[[int, Mapping[str, float]], Mapping[str, Any] | None] | None,
           depends_on: Mapping[str, Any] | None) -> TrainResult:
    out_dir = Path(cfg.output_dir)
    world, rank = acc.num_processes, acc.process_index
    per_rank = cfg.batch_size // world
    micro = per_rank // cfg.grad_accum

    epoch_data = _EpochData(data, cfg.seed)
    first = epoch_data(0)
    per_epoch = _batches_per_epoch(first, cfg.batch_size, 0)  # errors if shorter than a batch
    total = cfg.max_steps if cfg.max_steps is not None else int(cfg.epochs * per_epoch)
    if total < 1:
        raise ConfigError(f"epochs={cfg.epochs} gives 0 optimizer steps "
                          f"({len(first)} examples, batch_size={cfg.batch_size}): raise epochs")
    run = {k: getattr(cfg, k) for k in RUN_FIELDS}
    run.update(mixed_precision=acc.mixed_precision, data_size=len(first), num_processes=world)
    identity = _jsonable(dict(depends_on or {}))
    ckpt, log_path = out_dir / CHECKPOINT, out_dir / "log.jsonl"
    state, history = _start_or_resume(out_dir, cfg, acc, run, identity, total)

    model.to(acc.device)
    if state:
        _load_weights(model, ckpt)
        if state["step"] >= total:  # already finished: nothing to do
            return _finish(out_dir, acc, state["step"], state["epoch"], history, log_path,
                           state["wall_time"], state["step"], total)

    was_training = model.training
    inner, had_forward = model, "forward" in model.__dict__
    model, optimizer, scheduler = _prepare(model, cfg, acc, total, ckpt if state else None)

    p, clock = _Progress.of(state), _Clock.of(state)
    consistent = True  # False only between optimizer.step() and the counters' update

    def save() -> None:
        save_checkpoint(out_dir, acc, model, optimizer, scheduler, {
            "step": p.step, "epoch": p.epoch, "batch_in_epoch": p.batch_in_epoch, "total_steps": total,
            "wall_time": clock.wall(), "cpu_time": clock.cpu(), "pending": p.pending, "pending_n": p.pending_n,
            "run": run, "depends_on": identity, "config": dataclasses.asdict(cfg)})

    show = cfg.progress if cfg.progress is not None else sys.stderr.isatty()
    bar = tqdm(total=total, initial=p.step, disable=not (show and acc.is_main_process),
               desc=out_dir.name, dynamic_ncols=True)
    policy = ThreadPolicy.for_run(acc.device.type, world)  # scheduling only: no key holds it
    changed = False  # the thread count changed since the last log line

    def threads_line(line: str | None) -> None:
        nonlocal changed
        if line:
            changed = True
            if show:
                tqdm.write(f"{out_dir.name}: {line}", file=sys.stderr)

    try:
        if policy is not None:
            threads_line(policy.start(p.step))
        while p.step < total:
            seq = epoch_data(p.epoch)
            n_batches = _batches_per_epoch(seq, cfg.batch_size, p.epoch)
            if p.batch_in_epoch >= n_batches:
                p.epoch, p.batch_in_epoch = p.epoch + 1, 0
                continue
            order = _epoch_order(len(seq), cfg.seed, p.epoch)
            while p.batch_in_epoch < n_batches and p.step < total:
                idx = order[p.batch_in_epoch * cfg.batch_size:(p.batch_in_epoch + 1) * cfg.batch_size]
                idx = idx[rank * per_rank:(rank + 1) * per_rank]
                if policy is not None:
                    policy.before(p.step + 1)
                set_step_seed(cfg.seed, p.step + 1, rank)
                examples = ([seq[int(i)] for i in idx[m * micro:(m + 1) * micro]] for m in range(cfg.grad_accum))
                sums = gradients(model, examples, cfg.grad_accum, acc, collate_fn, step_fn)
                refuse_divergence(sums["loss"], p.step + 1, p.epoch, p.saved, ckpt, out_dir)
                lr_now = scheduler.get_last_lr()[0]
                if cfg.max_grad_norm is not None:
                    sums["grad_norm"] = float(acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
                consistent = False
                optimizer.step()
                if not acc.optimizer_step_was_skipped:  # fp16 overflow skips the update
                    scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                p.step, p.batch_in_epoch = p.step + 1, p.batch_in_epoch + 1
                consistent = True
                if policy is not None:
                    threads_line(policy.after(p.step))
                if acc.distributed_type == DistributedType.XLA:
                    import torch_xla.core.xla_model as xm
                    xm.mark_step()  # no MpDeviceLoader here to cut the graph per step

                for k, v in sums.items():
                    p.pending[k] = p.pending.get(k, 0.0) + v
                p.pending_n += 1
                evaluated = eval_fn is not None and (p.step % cfg.eval_every == 0 or p.step == total)
                if p.step % cfg.log_every == 0 or p.step == total or evaluated:
                    rec = _record(p, lr_now, clock, (model, acc, eval_fn, on_eval) if evaluated else None)
                    if changed:  # the count the updates since the last line ended on
                        rec["threads"], changed = torch.get_num_threads(), False
                    history.append(rec)
                    if acc.is_main_process:
                        with log_path.open("a") as f:
                            f.write(json.dumps(rec) + "\n")
                    bar.set_postfix(loss=f"{rec['loss']:.4f}")
                bar.update(1)
                if cfg.save_every and p.step % cfg.save_every == 0 and p.step < total:
                    acc.wait_for_everyone()
                    save()
                    acc.wait_for_everyone()
                    p.saved = p.step
        acc.wait_for_everyone()
        if p.step > p.saved:
            save()
        acc.wait_for_everyone()
    except KeyboardInterrupt:
        # Save what the completed steps produced (not a half-applied update), then stop.
        # No barrier: the other processes may be gone already.
        if consistent and p.step > p.saved:
            save()
            print(f"\ninterrupted: checkpoint at step {p.step} in {ckpt}; run again to resume",
                  file=sys.stderr)
        raise
    finally:
        bar.close()
        if policy is not None:
            policy.restore()
        # Mixed precision patches inner.forward with autocast; give the caller the plain model.
        acc.unwrap_model(model, keep_fp32_wrapper=False)
        if not had_forward:
            inner.__dict__.pop("forward", None)
        inner.train(was_training)
    return _finish(out_dir, acc, p.step, p.epoch, history, log_path, clock.wall(),
                   state["step"] if state else None, total)


def _prepare(model: nn.Module, cfg: TrainConfig, acc: Accelerator, total: int,
             resume_from: Path | None) -> tuple[nn.Module, Any, Any]:
    """The model, optimizer and scheduler ready to train: prepared by ``acc`` (compiled where
    ``cfg.compile``), with the optimizer's, scheduler's and RNGs' state of the checkpoint
    ``resume_from`` where resuming, and the model in train mode."""
    optimizer, scheduler = _optimizer(model, cfg, total)
    model, optimizer = acc.prepare(model, optimizer)
    if cfg.compile:
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


def _record(p: _Progress, lr: float, clock: _Clock, held_out: tuple | None) -> dict:
    """One log record: the means of the updates since the last one (which it clears), the
    learning rate and the clocks; with ``held_out`` = ``(model, acc, eval_fn, on_eval)`` also the
    held-out evaluation and what ``on_eval`` adds to it (on the main process)."""
    means = {k: v / p.pending_n for k, v in p.pending.items() if k not in _RESERVED}
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


def _finish(out_dir: Path, acc: Accelerator, step: int, epoch: int, history: list[dict],
            log_path: Path, wall: float, resumed_from: int | None, total: int) -> TrainResult:
    if acc.is_main_process:
        (out_dir / "train_state.json").write_text(json.dumps(
            {"step": step, "epoch": epoch, "total_steps": total, "wall_time": round(wall, 3),
             "resumed_from": resumed_from}, indent=1) + "\n")
    return TrainResult(step=step, epoch=epoch, history=history, log_path=log_path,
                       wall_time=wall, resumed_from=resumed_from)
