"""How long a run will take on *this* machine, measured before it starts.

The same preset takes 45 minutes on a CPU with native bf16 and several hours on one without
(``devices.resolve_precision``), and longer still when the machine is busy. So before long work
``experiments`` and ``pretrain`` time a few updates of each kind of part, with the real code
path and the threads it will run with, and project: a pre-training stage costs its setup
(reading and packing its corpus) + updates x seconds per update + held-out evaluations; a
retrieval fine-tuning its setup + updates x seconds per update + encoding and searching the
corpus; an STS-b run likewise. The probes write into a scratch folder that is deleted
afterwards; the tokenizer, the task and its BM25 negatives, which the run needs anyway, are
cached as usual. ``--dry-run`` prints the estimate and stops. Explained in chapter 4
(``notebooks/04_finetune.ipynb``, "The protocol") and on the study page.

The threads: each probe runs on the count its part will run with (``jobs.first_stage_threads``
for the protocol's first stage, ``jobs.worker_threads`` for the jobs), and through the same
training loop, whose thread policy (``training/threads.py``) picks at the start of the probe
what it picks at the start of the run; the estimate shows the count each probe ended on. A busy
machine makes any estimate fragile: the times hold only while the load stays, so the estimate
says so in one line (``load_warning``).

For a machine you do not have (the ``colab`` preset's T4), ``estimate_by_flops`` computes the
FLOPs of the protocol's parts, from the same job graph, at an assumed sustained rate instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...training.accounting import forward_flops
from ...training.finetune import round_config
from ...training.loop import read_log
from ...training.pretraining import pretrain
from ...training.pretraining_config import StageConfig, stage_name
from ...training.stage_cache import is_done, stage_folder
from ...utils.cache import CACHE_ENV, cache_dir
from ...utils.devices import load_average, resolve_precision
from ...utils.errors import ConfigError
from .arms import arm_config, finetune_arm, needed_arms, sts_arm
from .jobs import default_workers, first_stage_threads, num_threads, quiet, worker_threads
from ..configuration.presets import get_preset
from ..configuration.settings_tree import Preset
from ..configuration.registry import PARENT
from .tasks import load_task, sts_data

PROBE_UPDATES = 12  # updates per probe; the first half warms up (kernel selection, caches), the rest is timed
# 1-minute load average above which other work shares the cores enough to move the estimate:
# on 2 cores, another program using a core half the time already slows a two-thread update
FRAGILE_LOAD = 0.5


@dataclass
class Part:
    """One kind of part: how many of it the run holds, what one costs (seconds), and how that was
    measured."""

    name: str
    count: int
    seconds_each: float
    how: str
    serial: bool = False  # runs before the job graph, alone (the first pre-training stage)

    @property
    def seconds(self) -> float:
        return self.count * self.seconds_each


@dataclass
class Estimate:
    """The projected wall time of a run: its ``parts``, the ``workers`` they are shared by, the
    precision and threads they were timed with, and the time the probes took."""

    preset: str
    parts: list[Part]
    workers: int
    precision: str
    probe_seconds: float
    notes: list[str] = field(default_factory=list)
    basis: str | None = None  # how a computed (not measured) estimate was made

    @property
    def total_seconds(self) -> float:
        serial = sum(p.seconds for p in self.parts if p.serial)
        rest = [p for p in self.parts if not p.serial]
        # the job graph keeps every worker busy, except that a chain of stages cannot be split
        longest = max((p.seconds_each for p in rest), default=0.0)
        return serial + max(sum(p.seconds for p in rest) / self.workers, longest)


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def format_estimate(est: Estimate) -> str:
    """The estimate as a table, one line per kind of part, and the total. Chapter 4."""
    precision = "fp32" if est.precision == "no" else est.precision
    if est.basis:
        lines = [f"estimate for the {est.preset!r} preset, {est.basis}:"]
    else:
        lines = [f"estimate for the {est.preset!r} preset on this machine ({est.workers} worker(s), pre-training "
                 f"in {precision}; measured in {est.probe_seconds:.0f} s):"]
    for p in est.parts:
        lines.append(f"  {p.name:<42} {p.count:>3} x {p.seconds_each:>7.1f} s = {_minutes(p.seconds):>9}"
                     f"   ({p.how})")
    lines.append(f"  total, wall time: about {_minutes(est.total_seconds)}"
                 f"{'' if est.workers == 1 else f' (jobs after the first stage shared by {est.workers} processes)'}")
    lines += [f"  note: {n}" for n in est.notes]
    return "\n".join(lines)


@contextlib.contextmanager
def _scratch_cache(folder: Path) -> Iterator[None]:
    """Cached parts (fine-tunings, STS-b runs) of the probes go to ``folder``, not the real cache."""
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def _updates(cfg: StageConfig) -> int:
    if cfg.max_steps is None:  # the paper preset counts epochs of a corpus only the run packs
        raise ConfigError(f"the {cfg.method} stage runs {cfg.epochs} epochs, not a number of updates: the estimate "
                         f"needs one; pass --set stages.{stage_name(cfg.method, cfg.init)}.max_steps=N to time it")
    return cfg.max_steps


def _per_update(folder: Path) -> float:
    """Seconds per update from a training log's wall clock, over its second half (the first
    updates are slower: oneDNN picks kernels per shape, caches fill)."""
    log = read_log(folder)
    if len(log) < 2:  # a tiny data set (the micro preset): the one update, warm-up included
        return log[-1]["elapsed"] / max(1, log[-1]["step"])
    start = log[(len(log) - 1) // 2]
    return (log[-1]["elapsed"] - start["elapsed"]) / (log[-1]["step"] - start["step"])


def time_stage(cfg: StageConfig, scratch: Path, data_dir: str | None = None,
               updates: int = PROBE_UPDATES) -> dict:
    """Run ``updates`` updates of the stage ``cfg`` into ``scratch``; returns the seconds per update,
    of its setup (corpus, packing, model) and of one held-out evaluation, the threads its last
    update ran on (the loop's policy may have lowered them) and the probe's checkpoint (a stand-in
    ``init`` for the stages that continue it). Chapter 4."""
    probe = cfg.replace(max_steps=updates, save_every=None, eval_every=None if cfg.eval_every is None else updates)
    t0 = time.perf_counter()
    folder = pretrain(probe, output_dir=scratch, data_dir=data_dir, progress=False)
    wall = time.perf_counter() - t0
    train_wall = json.loads((Path(folder) / "pretrain_config.json").read_text())["wall_time"]
    log = read_log(folder)
    changes = [r["threads"] for r in log if "threads" in r]
    return {"per_update": _per_update(Path(folder)), "setup": max(0.0, wall - train_wall),
            "evaluation": max(0.0, train_wall - log[-1]["elapsed"]),  # after the last update
            "threads": changes[-1] if changes else torch.get_num_threads(), "checkpoint": str(folder)}


def _per_update_how(timing: Mapping[str, Any], updates: int) -> str:
    return (f"{timing['per_update']:.3f} s/update x {updates}, {timing['threads']} "
            f"thread{'s' * (timing['threads'] > 1)}")


def stage_seconds(cfg: StageConfig, timing: Mapping[str, Any]) -> float:
    """A whole stage's projected seconds from ``time_stage``'s probe: setup, its updates, its
    held-out evaluations. Chapter 4."""
    steps = _updates(cfg)
    evals = 1 if cfg.eval_every is None else math.ceil(steps / cfg.eval_every)
    return timing["setup"] + steps * timing["per_update"] + evals * timing["evaluation"]


def estimate_stage(cfg: StageConfig, data_dir: str | None = None, threads: int | None = None) -> Estimate:
    """The projected time of one pre-training stage (``pretrain --dry-run``). Chapter 2."""
    t0, warning = time.perf_counter(), load_warning()  # before the probe adds its own load
    with tempfile.TemporaryDirectory(prefix="condenser-lite-estimate-") as tmp, num_threads(threads), quiet():
        timing = time_stage(cfg, Path(tmp) / "stage", data_dir)
    part = Part(f"{cfg.method} stage", 1, stage_seconds(cfg, timing), _per_update_how(timing, _updates(cfg)),
                serial=True)
    return Estimate(f"{cfg.method} stage", [part], 1, resolve_precision(cfg.mixed_precision),
                    time.perf_counter() - t0, [warning] if warning else [])


def estimate_protocol(preset: Preset | str | None = "tiny", data_dir: str | None = None,
                      workers: int | None = None) -> Estimate:
    """The projected wall time of ``run_protocol(preset)`` on this machine (``experiments
    --dry-run``): each kind of part timed for a few updates on the threads it will run with,
    counted from the job graph, shared out over the workers. Pre-training stages already in the
    cache are not counted (``cached_stages``); cached fine-tunings and STS-b runs are. Chapter 4."""
    from .protocol import arm_pretrain_seeds, job_graph  # the protocol's own count of its parts

    preset = get_preset(preset)
    workers = default_workers() if workers is None else int(workers)
    job_threads = worker_threads(workers)
    first_threads = first_stage_threads(workers)  # what the run will take at this load
    t0, warning = time.perf_counter(), load_warning()  # before the probes add their own load
    pretrained = dict(preset.pretrained or {})
    plan = needed_arms(preset.arms, pretrained)
    notes: list[str] = []
    parts: list[Part] = []
    with tempfile.TemporaryDirectory(prefix="condenser-lite-estimate-") as tmp, quiet():
        scratch = Path(tmp)
        t_setup = time.perf_counter()
        task = load_task(preset, data_dir)
        sts_train, _ = sts_data(preset, data_dir)
        setup = time.perf_counter() - t_setup
        parts.append(Part("setup: task, BM25 negatives, STS-b", 1, setup, "measured; faster once cached",
                          serial=True))
        timings: dict[str, dict] = {}
        probes: dict[str, str] = {}
        cached = cached_stages(preset, plan, data_dir)
        if cached:
            notes.append(f"{len(cached)} pre-training stage(s) in the cache: not counted")
        for arm in plan:
            if arm in pretrained:
                probes[arm] = pretrained[arm]
                continue
            parent = PARENT[arm]
            cfg = arm_config(arm, preset, probes.get(parent) if parent else None)
            first = arm == plan[0]
            with num_threads(first_threads if first else job_threads):
                timings[arm] = time_stage(cfg, scratch / arm, data_dir)
                if first:
                    notes.append(f"the first stage timed on {timings[arm]['threads']} thread(s), as the run "
                                 "takes them at this load")
            probes[arm] = timings[arm]["checkpoint"]
            real = arm_config(arm, preset, None) if first else cfg
            seconds = stage_seconds(real, timings[arm])
            todo = [ps for ps in arm_pretrain_seeds(preset, arm) if (arm, ps) not in cached]
            if first:
                ps0 = preset.pretraining_seeds[0]
                parts.append(Part(f"pre-train {arm} (first stage)", int(ps0 in todo), seconds,
                                  _per_update_how(timings[arm], _updates(real)), serial=True))
                todo = [ps for ps in todo if ps != ps0]
            if todo:
                parts.append(Part(f"pre-train {arm}", len(todo), seconds, _per_update_how(timings[arm], _updates(cfg))))
        jobs = job_graph(preset, plan, len(task.train), len(sts_train), [], data_dir)
        with num_threads(job_threads), _scratch_cache(scratch / "cache"):
            parts += _finetune_parts(preset, jobs, task, probes, plan)
            parts += _sts_parts(preset, jobs, probes, data_dir, plan)
        n_entropy = sum(k[0] == "entropy" for k in jobs)
        if n_entropy:
            notes.append(f"{n_entropy} attention-entropy measurements not timed (seconds each)")
    precision = resolve_precision(preset.stages.bert.mixed_precision)
    return Estimate(preset.name, parts, workers, precision, time.perf_counter() - t0,
                    notes + ([warning] if warning else []))


def cached_stages(preset: Preset, plan: list[str], data_dir: str | None = None) -> dict[tuple[str, int], Path]:
    """The protocol's pre-training stages already in the cache, ``{(arm, pre-training seed):
    folder}``, found along each seed's chain: a continuation is named by its parent's weights,
    so it is looked up only where its parent is cached. Chapter 4."""
    from .protocol import arm_pretrain_seeds

    pretrained = dict(preset.pretrained or {})
    found: dict[tuple[str, int], Path] = {}
    for arm in plan:
        if arm in pretrained:
            continue
        for ps in arm_pretrain_seeds(preset, arm):
            parent = PARENT[arm]
            init = None
            if parent is not None:
                init = pretrained.get(parent) or found.get((parent, ps))
                if init is None:
                    continue
            folder = stage_folder(arm_config(arm, preset, str(init) if init else None).replace(seed=ps), data_dir)
            if is_done(folder):
                found[(arm, ps)] = folder
    return found


def load_warning() -> str | None:
    """One line when the machine is busy enough (1-minute load average above ``FRAGILE_LOAD``) to
    make a measured estimate fragile: other work slows the probes and the run alike, but only
    while it lasts. None on a quiet machine or where the system reports no load. Chapter 4."""
    load = load_average()
    if not load or load[0] <= FRAGILE_LOAD:
        return None
    return (f"the machine is busy (1-minute load average {load[0]:.1f} on {os.cpu_count()} cores): these times hold "
            "only while that load stays; for a firm estimate close other programs, or wait for them, and run the "
            "dry run again")


def _finetune_parts(preset: Preset, jobs: Mapping[tuple, Any], task, probes: Mapping[str, str],
                    plan: list[str]) -> list[Part]:
    recipe = preset.finetune
    runs = [k for k in jobs if k[0] == "finetune"]
    if not runs:
        return []
    n_probe = recipe.batch_size * PROBE_UPDATES
    if len(task.train) < n_probe:
        n_probe = len(task.train) // recipe.batch_size * recipe.batch_size
    probe = preset.replace(**{"finetune.min_steps": 0, "finetune.epochs_round1": 1.0, "finetune.max_steps": None})
    arm = plan[-1]  # its probe checkpoint stands in for every fine-tuning (same shape for all)
    t0 = time.perf_counter()
    result = finetune_arm(arm, probes[arm], task, probe, size=n_probe, seed=0, keep_model=False)
    wall = time.perf_counter() - t0
    per_update = _per_update(Path(result["dir"]))
    search = result["wall_time"]["total"] - result["wall_time"]["train"]  # encode + search the corpus
    fixed = max(0.0, wall - result["steps"] * per_update - search)
    out = []
    for round_number in (1, 2):
        for label, count in Counter(k[3] for k in runs if k[2] == round_number).items():
            steps = round_config(recipe, round_number, int(label)).max_steps
            each = fixed + steps * per_update + search * (2 if round_number == 2 else 1)  # round 2 also mines
            out.append(Part(f"fine-tune, round {round_number}, {label} queries", count, each,
                            f"{per_update:.3f} s/update x {steps} + {search:.0f} s search"))
    return out


def _sts_steps(sts, n: int, total: int) -> int:
    """Updates of an STS-b run on ``n`` of the ``total`` training pairs (``arms.sts_arm``'s
    epochs: ``epochs_full`` on all of them, ``epochs_low_data`` on fewer)."""
    epochs = sts.epochs_full if n >= total else sts.epochs_low_data
    return max(1, int(epochs * n / sts.batch_size))


def _sts_parts(preset: Preset, jobs: Mapping[tuple, Any], probes: Mapping[str, str], data_dir: str | None,
               plan: list[str]) -> list[Part]:
    runs = [k for k in jobs if k[0] == "sts"]
    if not runs:
        return []
    sts = preset.sts
    data = sts_data(preset, data_dir)
    n_probe = min(len(data[0]), sts.batch_size * PROBE_UPDATES)
    probe = preset.replace(**{"sts.epochs_low_data": 1.0})
    arm = plan[-1]  # as for the fine-tunings
    t0 = time.perf_counter()
    result = sts_arm(arm, probes[arm], probe, size=n_probe, seed=0, data=data)
    wall = time.perf_counter() - t0
    folder = next(cache_dir("sts").glob(f"{arm}-n{n_probe}-*"))  # the probe's (scratch cache)
    per_update = _per_update(folder)
    fixed = max(0.0, wall - result["steps"] * per_update)
    total = len(data[0])
    out = []
    for label, count in Counter(k[2] for k in runs).items():
        steps = _sts_steps(sts, int(label), total)
        out.append(Part(f"STS-b, {label} pairs", count, fixed + steps * per_update,
                        f"{per_update:.3f} s/update x {steps}"))
    return out


# A T4 (Colab's free GPU) computes 65 TFLOP/s in fp16 at its tensor cores' peak (NVIDIA's data
# sheet); BERT-base training in PyTorch reaches a fraction of that. 12 TFLOP/s (18% of the peak)
# is an assumption, not a measurement: ``experiments --dry-run`` on the T4 times the real parts.
T4_TFLOPS = 12.0


def estimate_by_flops(preset: Preset | str, data_dir: str | None = None, tflops: float = T4_TFLOPS) -> Estimate:
    """The wall time of ``run_protocol(preset)`` on one accelerator computing ``tflops`` TFLOP/s,
    for a preset whose arms are all published checkpoints (the ``colab`` preset): every
    fine-tuning round (3x the forward FLOPs of its steps: forward + backward), every corpus
    encoding (round 2 encodes twice: mining with round 1's retriever, then its own search), every
    STS-b run and the attention entropy, counted from the protocol's job graph with every
    sequence padded to its limit (an upper bound). Work on the CPU (BM25, downloads) and
    pre-training stages are not counted: a preset that pre-trains is refused. Chapter 4."""
    from .protocol import job_graph

    if not isinstance(tflops, (int, float)) or not math.isfinite(tflops) or tflops <= 0:
        raise ConfigError(f"tflops={tflops!r}: give the accelerator's sustained rate in TFLOP/s, a positive "
                          f"number (a T4 in fp16: about {T4_TFLOPS:g})")
    preset = get_preset(preset)
    own = [arm for arm in preset.arms if arm not in (preset.pretrained or {})]
    if own:
        raise ConfigError(f"estimate_by_flops counts fine-tuning only, but the {preset.name!r} preset pre-trains "
                          f"{own}: time it on the machine with `experiments --preset {preset.name} --dry-run`")
    shape = {k: getattr(preset.model, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers")}
    task = load_task(preset, data_dir)
    sts_train, sts_test = sts_data(preset, data_dir)
    plan = needed_arms(preset.arms, dict(preset.pretrained or {}))
    jobs = job_graph(preset, plan, len(task.train), len(sts_train), [], data_dir)
    rate = tflops * 1e12
    ft, sts = preset.finetune, preset.sts
    encode = (forward_flops(shape, task.info["corpus"], ft.p_max_len)
              + forward_flops(shape, task.info["eval_queries"], ft.q_max_len)) / rate
    step = 3 * (forward_flops(shape, ft.batch_size, ft.q_max_len)
                + forward_flops(shape, ft.batch_size * ft.train_n_passages, ft.p_max_len)) / rate
    # how many jobs of each kind: (finetune, round, size), (sts, size), (entropy,); a published
    # arm's "pretrain" job only names its Hub id
    kinds = Counter(key[:1] + key[2:4] if key[0] == "finetune" else key[:1] + key[2:3] if key[0] == "sts"
                    else key[:1] for key in jobs if key[0] != "pretrain")
    parts = []
    for kind, n in kinds.items():
        if kind[0] == "finetune":
            round_number, label = kind[1], kind[2]
            steps = round_config(ft, round_number, int(label)).max_steps
            encodings = 2 if round_number == 2 else 1
            parts.append(Part(f"fine-tune, round {round_number}, {label} queries", n,
                              steps * step + encodings * encode,
                              f"{steps} updates x {step:.2f} s + {encodings} x {encode:.0f} s encoding"))
        elif kind[0] == "sts":
            size = int(kind[1])
            steps = _sts_steps(sts, size, len(sts_train))
            seconds = (3 * steps * forward_flops(shape, 2 * sts.batch_size, sts.max_len)
                       + forward_flops(shape, 2 * len(sts_test), sts.max_len)) / rate
            parts.append(Part(f"STS-b, {size} pairs", n, seconds, f"{steps} updates + encoding the test pairs"))
        else:
            seconds = forward_flops(shape, preset.entropy_texts, preset.entropy_max_len) / rate
            parts.append(Part("attention entropy", n, seconds, f"{preset.entropy_texts} texts, forward only"))
    notes = [f"computed, not measured: {tflops:g} TFLOP/s assumed; BM25 and downloads (CPU) not counted; "
             f"`experiments --preset {preset.name} --dry-run` on the GPU measures"]
    return Estimate(preset.name, parts, 1, "fp16 or bf16", 0.0, notes,
                    basis=f"computed from the FLOPs of its parts at {tflops:g} TFLOP/s")
