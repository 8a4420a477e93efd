"""What a protocol run records about how it ran: the precision each part computed in, its wall and
CPU seconds per part and in all, the worker processes and threads, and how many parts it found
cached; the results file's ``wall_time``, ``execution`` and ``provenance``.

Explained in chapter 4, ``notebooks/04_finetune.ipynb`` (what a run cost and where), and read by
chapter 8's notes on the evidence.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...utils.cache import cache_dir
from ...utils.devices import cpu_precision, load_average, resolve_precision
from .jobs import threads_per_worker
from ..configuration.settings_tree import Preset
from ..evidence.results import cpu_seconds, now, provenance


def precisions(preset: Preset) -> dict[str, str]:
    """What each component of ``preset`` computes in on this machine (``"auto"`` resolved by
    ``devices.resolve_precision``): recorded in the results' provenance and part of their key.
    Chapter 4."""
    return {part: resolve_precision(preset.get(f"{part}.mixed_precision"))
            for part in ("stages.bert", "stages.condenser", "stages.cocondenser", "finetune", "sts")}


def precision_record(preset: Preset, stages: Mapping[tuple, Mapping]) -> dict:
    """What the run computed in: each component's precision on this machine, each pre-training
    stage's as recorded when it was trained (a stage reused from the cache may come from another
    run), and on a CPU the probe behind ``"auto"`` (``devices.cpu_precision``). Stages trained in
    different precisions are compared all the same, with a warning that says so. Chapter 4."""
    by_stage = {f"{arm}/{seed}": stage.get("precision") for (arm, seed), stage in stages.items()
                if stage.get("steps") is not None}
    used = sorted({p for p in by_stage.values() if p})
    if len(used) > 1:
        warnings.warn(f"the pre-training stages of this run were computed in different precisions ({by_stage}): "
                      "comparisons between them mix precision; re-run them on one machine (or set "
                      "stages.<stage>.mixed_precision) for a like-for-like comparison", UserWarning,
                      stacklevel=4)  # the line that called run_protocol
    cpu = None if torch.cuda.is_available() else cpu_precision().to_dict()
    return {"components": precisions(preset), "stages": by_stage, "mixed": len(used) > 1, "cpu_probe": cpu}


def cached_parts() -> set[Path]:
    """The finished parts in the cache (a pre-training stage's record, a fine-tuning's or STS-b
    run's result): what a call finds here it reuses instead of computing."""
    root = cache_dir()
    return {*root.glob("checkpoints/*/pretrain_config.json"), *root.glob("finetune/*/result.json"),
            *root.glob("sts/*/result.json")}


class RunClock:
    """A protocol run's clocks from its start: wall and CPU seconds per part (``lap``), the load
    average and the cached parts it started with."""

    def __init__(self) -> None:
        self.t0, self.started = time.perf_counter(), now()
        self.wall: dict[str, Any] = {}
        self.cpu: dict[str, float] = {}
        self.load_start = load_average()
        self.cached_before = cached_parts()
        self.start = self.mark = (self.t0, cpu_seconds())

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def lap(self, part: str) -> None:
        """The wall and CPU seconds since the last lap, as ``part``'s."""
        mark = (time.perf_counter(), cpu_seconds())
        self.wall[part], self.cpu[part] = round(mark[0] - self.mark[0], 2), round(mark[1] - self.mark[1], 2)
        self.mark = mark


def record_run(results: dict, preset: Preset, command: str | None, clock: RunClock, stages: Mapping[tuple, Mapping],
               done: Mapping[tuple, Any], workers: int, threads: int | None) -> None:
    """The run's ``wall_time`` (per part, the jobs' own seconds, the stages'), its ``execution``
    (workers, threads, load) and its ``provenance`` (with ``precision_record``), into ``results``."""
    wall, cpu, t0, start = clock.wall, clock.cpu, clock.t0, clock.start
    ps0 = preset.pretraining_seeds[0]
    finetunes = [r for k, r in done.items() if k[0] == "finetune"]
    sts_runs = [r for k, r in done.items() if k[0] == "sts"]
    wall["finetune_jobs_seconds"] = round(sum(r["wall_time"]["total"] for r in finetunes), 2)
    wall["sts_jobs_seconds"] = round(sum(r["wall_time"] for r in sts_runs), 2)
    # CPU seconds of the jobs (one-thread workers): the work itself, whatever else ran on the machine
    wall["finetune_cpu_seconds"] = round(sum(r["wall_time"].get("cpu", 0.0) for r in finetunes), 2)
    wall["sts_cpu_seconds"] = round(sum(r.get("cpu_time", 0.0) for r in sts_runs), 2)
    wall["pretrain_stage_seconds"] = {a: stages[(a, ps)]["wall_time"] for a, ps in stages if ps == ps0}
    wall["total"] = round(time.perf_counter() - t0, 2)
    results["wall_time"] = wall
    results["execution"] = {"workers": workers, "first_stage_threads": threads or None,
                            "threads_per_worker": threads_per_worker(workers) if workers > 1 else None,
                            "load_average_start": clock.load_start, "load_average_end": load_average()}
    n_parts = sum(s["steps"] is not None for s in stages.values()) + len(finetunes) + len(sts_runs)  # cached parts
    computed = len(cached_parts() - clock.cached_before)
    results["provenance"] = provenance(
        preset, command, started=clock.started, wall_seconds=wall["total"],
        cpu_seconds=round(cpu_seconds() - start[1], 2),
        parts={p: {"wall_seconds": wall[p], "cpu_seconds": cpu[p]} for p in cpu},
        parts_reused=max(0, n_parts - computed), load_start=clock.load_start,
        work_cpu_seconds=round(sum(s["compute"]["cpu_seconds"] for s in stages.values() if s.get("compute"))
                               + wall["finetune_cpu_seconds"] + wall["sts_cpu_seconds"], 2))
    results["provenance"]["precision"] = precision_record(preset, stages)
