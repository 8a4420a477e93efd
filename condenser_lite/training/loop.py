"""One small training loop for every stage: MLM and Condenser pre-training, coCondenser, fine-tuning.

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop and its determinism design);
chapter 3 uses it with the gradient cache's ``step_fn``, chapter 4 for fine-tuning, chapter 6
reads its ``log.jsonl``. Beside it: ``epochs.py`` (what each epoch draws), ``prepare.py`` (the
accelerator, AdamW's parameter groups, the model made ready), ``progress.py`` (counters, clocks,
log records), ``update.py`` (one update's gradients), ``checkpoint.py`` and ``threads.py``.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from torch import nn
from tqdm import tqdm
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from ..utils.cache import output_lock, settings_diff
from ..utils.checks import check_positive, check_types
from ..utils.devices import PRECISIONS
from ..utils.errors import CheckpointError, ConfigError
from ..utils.roles import setting
from .checkpoint import CHECKPOINT, read_state, recover_checkpoint, save_checkpoint
from .epochs import EpochData, batches_per_epoch, derive_seed, epoch_order
from .prepare import SCHEDULES, load_weights, make_accelerator, param_groups, prepare
from .progress import Clock, Progress, TrainResult, finish, record
from .threads import ThreadPolicy
from .update import gradients, refuse_divergence

logger = logging.getLogger(__name__)
@dataclass(frozen=True)
class TrainConfig:
    """How a training run trains (chapter 2, `notebooks/02_condenser.ipynb`); where it writes,
    whether it resumes and whether it shows progress are ``train``'s arguments. A pre-training
    stage's recipe (``StageRecipe``), the retriever's (``FinetuneConfig``) and STS-b's
    (``STSConfig``) are ``TrainConfig``s with their own fields added, so ``train`` reads their
    ``lr`` itself.

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
    call ``train``'s ``eval_fn`` every that many steps and after the last one (``None``: after the
    last one only).
    """

    # each field's role (utils.roles): health ranks the suspects of a stage that leaves its band
    # (the learning rate and the batch move a loss curve most); resume=False: bookkeeping or speed
    # (compile: the same maths on another kernel schedule), so a resumed run may change it
    max_steps: int | None = setting(None, health=8)
    epochs: float = setting(1.0, health=9)
    batch_size: int = setting(32, health=2)
    grad_accum: int = setting(1, health=3)
    lr: float = setting(1e-3, health=1)
    weight_decay: float = setting(0.01, health=5)
    warmup_ratio: float = setting(0.1, health=4)
    max_grad_norm: float | None = setting(1.0, health=6)
    mixed_precision: str = setting("no", health=7)
    seed: int = setting(42, health="neutral")
    schedule: str = setting("linear", health=10, key="if_changed")
    compile: bool = setting(False, key="no", resume=False, health="neutral")
    # log_every changes the log the chapters plot (a line averages the updates since the last)
    log_every: int = setting(1, key="if_changed", resume=False, health="neutral")
    save_every: int | None = setting(None, key="no", resume=False, health="neutral")
    eval_every: int | None = setting(None, resume=False, health="neutral")

    def __post_init__(self) -> None:
        def bad(name: str, rule: str) -> ConfigError:
            return ConfigError(f"{type(self).__name__}.{name}={getattr(self, name)!r} is invalid: {rule}")

        check_types(self)
        check_positive(self, "lr", "batch_size", "grad_accum", "epochs", "max_steps")  # max_steps None: epochs decide
        if self.batch_size % self.grad_accum:
            raise bad("grad_accum", f"batch_size={self.batch_size} must be divisible by it")
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
            raise bad("eval_every", "use None (after the last step only) or a count >= 1")
        if self.schedule not in SCHEDULES:
            raise bad("schedule", f"choose one of {SCHEDULES}")


# the fields a resumed run must agree on with its checkpoint: those that change the computation
RUN_FIELDS = tuple(f.name for f in fields(TrainConfig) if f.metadata.get("resume", True))


def set_step_seed(seed: int, step: int, rank: int = 0) -> None:
    """Seed ``random``, NumPy and torch (CPU, all CUDA devices, XLA) from ``(seed, step)``.

    Called by :func:`train` before building and running each optimizer step, which makes the
    step's masking and dropout a function of (seed, step) only (chapter 2,
    `notebooks/02_condenser.ipynb`). ``rank`` (the process index) gives each process of a
    distributed run its own stream; it is 0 in a single process.
    """
    set_seed(derive_seed(seed, 0, step, rank))


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
          output_dir: str | Path, collate_fn: Callable[[list], dict], step_fn: Callable[..., dict] | None = None,
          accelerator: Accelerator | None = None,
          eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
          on_eval: Callable[[int, Mapping[str, float]], Mapping[str, Any] | None] | None = None,
          depends_on: Mapping[str, Any] | None = None, resume: bool = True,
          progress: bool | None = None) -> TrainResult:
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
    * ``eval_fn(model) -> {name: float}``: called every ``cfg.eval_every`` steps and after the
      last one (``eval_every=None``: after the last one only; without ``eval_fn``, nothing), on the unwrapped model in eval mode, without gradients and in full
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
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    acc = accelerator if accelerator is not None else make_accelerator(cfg.mixed_precision)
    if accelerator is not None and cfg.mixed_precision not in ("auto", acc.mixed_precision):
        raise ValueError(f"{type(cfg).__name__}.mixed_precision={cfg.mixed_precision!r} but the accelerator "
                         f"passed in uses {acc.mixed_precision!r}: make them agree (or use 'auto')")
    if acc.gradient_accumulation_steps != 1:
        raise ValueError("the accelerator has gradient_accumulation_steps != 1, which would scale "
                         f"the loss a second time: set {type(cfg).__name__}.grad_accum instead")
    if cfg.batch_size % (acc.num_processes * cfg.grad_accum):
        raise ConfigError(f"batch_size={cfg.batch_size} must be divisible by processes x grad_accum "
                          f"= {acc.num_processes} x {cfg.grad_accum}")
    # Only the main process writes the folder, so only it takes the lock (the others wait for
    # it at the first barrier).
    with output_lock(out_dir) if acc.is_main_process else contextlib.nullcontext():
        return _train(model, data, cfg, acc, (collate_fn, step_fn, eval_fn, on_eval), depends_on,
                      (out_dir, resume, progress))


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), so a saved copy compares equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _start_or_resume(out_dir: Path, resume: bool, acc: Accelerator, run: dict, identity: Any,
                     total: int) -> tuple[dict | None, list[dict]]:
    """The checkpoint's state to resume (None: start fresh) and the log lines up to it; a
    checkpoint of another run is refused, and a fresh start removes a stale one."""
    ckpt, log_path = out_dir / CHECKPOINT, out_dir / "log.jsonl"
    if acc.is_main_process:
        recover_checkpoint(out_dir)
    acc.wait_for_everyone()
    state = None
    if resume and ckpt.exists():
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


def _train(model: nn.Module, data: Any, cfg: TrainConfig, acc: Accelerator, fns: tuple,
           depends_on: Mapping[str, Any] | None, where: tuple[Path, bool, bool | None]) -> TrainResult:
    """``train`` in the locked output folder: set up, resume, the updates epoch by epoch, finish.
    ``fns``: collate_fn, step_fn, eval_fn, on_eval; ``where``: the folder, resume, progress."""
    out_dir, resume, progress = where
    epoch_data = EpochData(data, cfg.seed)
    total, run = _plan(cfg, acc, epoch_data(0))
    identity = _jsonable(dict(depends_on or {}))
    ckpt, log_path = out_dir / CHECKPOINT, out_dir / "log.jsonl"
    state, history = _start_or_resume(out_dir, resume, acc, run, identity, total)

    model.to(acc.device)
    if state:
        load_weights(model, ckpt)
        if state["step"] >= total:  # already finished: nothing to do
            return finish(out_dir, acc, state["step"], state["epoch"], history, log_path,
                          state["wall_time"], state["step"], total)

    was_training = model.training
    inner, had_forward = model, "forward" in model.__dict__
    # AdamW (no decay on biases and norms) and its warm-up schedule over the run's updates
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr)
    warmup = math.ceil(cfg.warmup_ratio * total)
    scheduler = (get_constant_schedule_with_warmup(optimizer, warmup) if cfg.schedule == "constant"
                 else get_linear_schedule_with_warmup(optimizer, warmup, total))
    model, optimizer, scheduler = prepare(model, optimizer, scheduler, acc, cfg.compile, ckpt if state else None)
    r = _Run(cfg, acc, model, optimizer, scheduler, epoch_data, fns, total,
             {"run": run, "depends_on": identity}, history, Progress.of(state), Clock.of(state), (out_dir, progress))
    try:
        r.run()
    except KeyboardInterrupt:
        r.interrupted()
        raise
    finally:
        r.bar.close()
        if r.policy is not None:
            r.policy.restore()
        # Mixed precision patches inner.forward with autocast; give the caller the plain model.
        acc.unwrap_model(model, keep_fp32_wrapper=False)
        if not had_forward:
            inner.__dict__.pop("forward", None)
        inner.train(was_training)
    return finish(out_dir, acc, r.p.step, r.p.epoch, history, log_path, r.clock.wall(),
                  state["step"] if state else None, total)


def _plan(cfg: TrainConfig, acc: Accelerator, first: Sequence) -> tuple[int, dict]:
    """The run's number of optimizer updates, from epoch 0's data ``first``, and its computing
    settings: what a checkpoint must agree on to be resumed."""
    per_epoch = batches_per_epoch(first, cfg.batch_size, 0)  # errors if shorter than a batch
    total = cfg.max_steps if cfg.max_steps is not None else int(cfg.epochs * per_epoch)
    if total < 1:
        raise ConfigError(f"epochs={cfg.epochs} gives 0 optimizer steps "
                          f"({len(first)} examples, batch_size={cfg.batch_size}): raise epochs")
    run = {k: getattr(cfg, k) for k in RUN_FIELDS}
    run.update(mixed_precision=acc.mixed_precision, data_size=len(first), num_processes=acc.num_processes)
    return total, run


class _Run:
    """One call's updates, from the progress ``p`` it starts at to ``total``: each epoch's batches,
    each update (seeded by its step), its log line, the checkpoints, and the thread policy.
    ``identity``: the ``run`` settings and ``depends_on`` that each checkpoint records."""

    def __init__(self, cfg: TrainConfig, acc: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any, epoch_data: EpochData, fns: tuple, total: int, identity: dict,
                 history: list[dict], p: Progress, clock: Clock, shown: tuple[Path, bool | None]):
        self.cfg, self.acc, self.model, self.optimizer, self.scheduler = cfg, acc, model, optimizer, scheduler
        self.epoch_data, self.total, self.identity, self.history, self.p, self.clock = \
            epoch_data, total, identity, history, p, clock
        self.collate_fn, self.step_fn, self.eval_fn, self.on_eval = fns
        self.out_dir, progress = shown
        self.ckpt, self.log_path = self.out_dir / CHECKPOINT, self.out_dir / "log.jsonl"
        self.per_rank = cfg.batch_size // acc.num_processes
        self.micro = self.per_rank // cfg.grad_accum
        self.consistent = True  # False only between optimizer.step() and the counters' update
        self.show = progress if progress is not None else sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=p.step, disable=not (self.show and acc.is_main_process),
                        desc=self.out_dir.name, dynamic_ncols=True)
        self.policy = ThreadPolicy.for_run(acc.device.type, acc.num_processes)  # scheduling only: no key holds it
        self.changed = False  # the thread count changed since the last log line

    def run(self) -> None:
        """Every epoch's updates up to ``total``, then the final checkpoint."""
        p, acc = self.p, self.acc
        if self.policy is not None:
            self.threads_line(self.policy.start(p.step))
        while p.step < self.total:
            seq = self.epoch_data(p.epoch)
            n_batches = batches_per_epoch(seq, self.cfg.batch_size, p.epoch)
            if p.batch_in_epoch >= n_batches:
                p.epoch, p.batch_in_epoch = p.epoch + 1, 0
                continue
            self.epoch(seq, n_batches)
        acc.wait_for_everyone()
        if p.step > p.saved:
            self.save()
        acc.wait_for_everyone()

    def epoch(self, seq: Sequence, n_batches: int) -> None:
        """The updates of the current epoch from ``p.batch_in_epoch`` on, in the epoch's order."""
        p, cfg = self.p, self.cfg
        order = epoch_order(len(seq), cfg.seed, p.epoch)
        rank = self.acc.process_index
        while p.batch_in_epoch < n_batches and p.step < self.total:
            idx = order[p.batch_in_epoch * cfg.batch_size:(p.batch_in_epoch + 1) * cfg.batch_size]
            idx = idx[rank * self.per_rank:(rank + 1) * self.per_rank]
            sums, lr_now = self.update(seq, idx)
            self.log(sums, lr_now)
            if cfg.save_every and p.step % cfg.save_every == 0 and p.step < self.total:
                self.acc.wait_for_everyone()
                self.save()
                self.acc.wait_for_everyone()
                p.saved = p.step

    def update(self, seq: Sequence, idx: torch.Tensor) -> tuple[dict[str, float], float]:
        """One optimizer update on this process's examples ``idx`` of ``seq``: its metric sums and
        the learning rate it used."""
        p, cfg, acc, micro = self.p, self.cfg, self.acc, self.micro
        if self.policy is not None:
            self.policy.before(p.step + 1)
        set_step_seed(cfg.seed, p.step + 1, acc.process_index)
        examples = ([seq[int(i)] for i in idx[m * micro:(m + 1) * micro]] for m in range(cfg.grad_accum))
        sums = gradients(self.model, examples, cfg.grad_accum, acc, self.collate_fn, self.step_fn)
        refuse_divergence(sums["loss"], p.step + 1, p.epoch, p.saved, self.ckpt, self.out_dir)
        lr_now = self.scheduler.get_last_lr()[0]
        if cfg.max_grad_norm is not None:
            sums["grad_norm"] = float(acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm))
        self.consistent = False
        self.optimizer.step()
        if not acc.optimizer_step_was_skipped:  # fp16 overflow skips the update
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        p.step, p.batch_in_epoch = p.step + 1, p.batch_in_epoch + 1
        self.consistent = True
        if self.policy is not None:
            self.threads_line(self.policy.after(p.step))
        if acc.distributed_type == DistributedType.XLA:
            import torch_xla.core.xla_model as xm
            xm.mark_step()  # no MpDeviceLoader here to cut the graph per step
        return sums, lr_now

    def log(self, sums: dict[str, float], lr_now: float) -> None:
        """The update's metrics towards the next log line, and the line where one is due (with the
        held-out evaluation where one is due); the progress bar moves on."""
        p, cfg = self.p, self.cfg
        p.add(sums)
        evaluated = self.eval_fn is not None and (p.step == self.total or bool(cfg.eval_every)
                                                  and p.step % cfg.eval_every == 0)
        if p.step % cfg.log_every == 0 or p.step == self.total or evaluated:
            held_out = (self.model, self.acc, self.eval_fn, self.on_eval) if evaluated else None
            rec = record(p, lr_now, self.clock, held_out)
            if self.changed:  # the count the updates since the last line ended on
                rec["threads"], self.changed = torch.get_num_threads(), False
            self.history.append(rec)
            if self.acc.is_main_process:
                with self.log_path.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
            self.bar.set_postfix(loss=f"{rec['loss']:.4f}")
        self.bar.update(1)

    def threads_line(self, line: str | None) -> None:
        """Note a change of the thread count (for the next log line, and in the progress output)."""
        if line:
            self.changed = True
            if self.show:
                tqdm.write(f"{self.out_dir.name}: {line}", file=sys.stderr)

    def save(self) -> None:
        p = self.p
        save_checkpoint(self.out_dir, self.acc, self.model, self.optimizer, self.scheduler, {
            "step": p.step, "epoch": p.epoch, "batch_in_epoch": p.batch_in_epoch, "total_steps": self.total,
            "wall_time": self.clock.wall(), "cpu_time": self.clock.cpu(), "pending": p.pending,
            "pending_n": p.pending_n, **self.identity, "config": dataclasses.asdict(self.cfg)})

    def interrupted(self) -> None:
        """On Ctrl-C: save what the completed steps produced (not a half-applied update), and say
        in one line from which step the next run resumes. No barrier: the other processes may be
        gone already."""
        p = self.p
        if self.consistent and p.step > p.saved:
            self.save()
            print(f"\ninterrupted: checkpoint at step {p.step} in {self.ckpt}; run again to resume", file=sys.stderr)
            return
        start = f"from step {p.saved} (its checkpoint in {self.ckpt})" if p.saved else "from step 0"
        first, last = p.saved + 1, p.step + (0 if self.consistent else 1)  # the updates no checkpoint holds
        lost = "nothing is lost" if last < first else \
            f"update{f' {first}' if first == last else f's {first}-{last}'} will be trained again"
        print(f"\ninterrupted{'' if self.consistent else ' in the middle of an update'}: the next run resumes "
              f"{start}; {lost}", file=sys.stderr)
