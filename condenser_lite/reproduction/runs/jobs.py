"""A small cached job runner: independent jobs in one-thread worker processes, results on disk,
one writer per output folder.

Explained in chapter 4, `notebooks/04_finetune.ipynb` ("Cost"). The protocol is a graph of jobs
(pre-training stages, fine-tunings, STS-b runs, entropies): a ``Job`` is a top-level function and
its keyword arguments, any of which may be a ``Ref`` to another job's result (a dependency).
``run_jobs`` runs the graph here or in spawned workers; ``compute_once`` keeps each job's JSON
result in its folder, so a second run reads it back.

Why one-thread workers: on a small CPU two one-thread processes beat one two-thread process, and
they do not collapse when another program shares the cores (oversubscribed OpenMP threads wait on
each other at every operation: measured here, a step took 4.3 s with two threads beside another
busy process, 2.3 s with one thread). A worker's stages stay on its one thread; the training
loop's thread policy (``training/threads.py``) manages only a run whose caller allows more.

One writer per folder: every writer of a result folder (a cached job, a pre-training stage, a
training run) holds ``output_lock`` on it, so two processes given the same folder never write it
at once; the second waits, then finds the first one's result and reuses it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import datasets
import torch
import transformers

from ...utils.devices import load_average


@dataclass(frozen=True)
class Ref:
    """A job argument that is the result of job ``key`` (or its ``field``), filled in by the runner. Chapter 4."""

    key: tuple
    field: str | None = None

    def resolve(self, done: Mapping[tuple, Any]) -> Any:
        result = done[self.key]
        return result if self.field is None else result[self.field]


@dataclass
class Job:
    """``fn(**kwargs)`` once the jobs its ``Ref`` arguments name are done; ``fn`` must be top-level
    (workers import it by name); lower ``priority`` runs first among ready jobs. Chapter 4."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 0

    @property
    def deps(self) -> set[tuple]:
        return {v.key for v in self.kwargs.values() if isinstance(v, Ref)}

    def arguments(self, done: Mapping[tuple, Any]) -> dict[str, Any]:
        return {k: v.resolve(done) if isinstance(v, Ref) else v for k, v in self.kwargs.items()}


def _silence() -> None:
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence transformers' warnings and transformers' and datasets' progress bars; restore after. Chapter 4."""
    level = transformers.logging.get_verbosity()
    bars = datasets.is_progress_bar_enabled()
    tf_bars = transformers.utils.logging.is_progress_bar_enabled()
    _silence()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)
        if tf_bars:
            transformers.utils.logging.enable_progress_bar()
        if bars:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch threads (None: leave the setting alone). Chapter 4."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def default_workers() -> int:
    """Worker processes: 1 with a GPU (the jobs share it), else the cores, at most 2. Chapter 4."""
    if torch.cuda.is_available():
        return 1
    return max(1, min(2, os.cpu_count() or 1))


def first_stage_threads(workers: int) -> int | None:
    """Threads for the protocol's first pre-training stage, alone in its process: None (the caller's
    setting, under the loop's thread policy) with one worker or on a quiet machine; 1 when the
    1-minute load average is above 1, where two threads beside other work run slower than one. Chapter 4."""
    if workers <= 1:
        return None
    load = load_average()
    return 1 if load and load[0] > 1.0 else None


def threads_per_worker(workers: int) -> int:
    """Torch threads per worker process: the cores shared out, at least one. Chapter 4."""
    return max(1, (os.cpu_count() or 1) // workers)


def worker_threads(workers: int) -> int | None:
    """Threads a job of ``run_jobs(..., workers)`` runs on: ``threads_per_worker`` in spawned workers;
    None (the caller's count) with one worker, which runs the jobs in this process. Chapter 4."""
    return threads_per_worker(workers) if workers > 1 else None


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)
    _silence()  # for the worker's whole life
    warnings.filterwarnings("ignore")


def run_jobs(
    jobs: Mapping[tuple, Job],
    workers: int = 1,
    done: dict[tuple, Any] | None = None,
    on_done: Callable[[tuple, Any], None] | None = None,
) -> dict[tuple, Any]:
    """Run ``jobs`` in dependency order; returns ``{key: result}``, ``done`` (results known beforehand)
    included. One worker: in this process, by (priority, insertion). More: in spawned processes of
    ``threads_per_worker`` threads, never queueing more jobs than there are free workers, so a job
    that becomes ready later (a stage that unblocks others) still goes ahead of the low-priority
    queue. ``on_done(key, result)`` is called as each job finishes; a worker's exception is raised
    here. Chapter 4."""
    done = {} if done is None else done
    pending = dict(jobs)
    order = {k: i for i, k in enumerate(jobs)}

    def ready() -> list[tuple]:
        keys = [k for k, j in pending.items() if j.deps <= done.keys()]
        return sorted(keys, key=lambda k: (pending[k].priority, order[k]))

    def finish(key: tuple, result: Any) -> None:
        done[key] = result
        if on_done is not None:
            on_done(key, result)

    if workers <= 1:
        while pending:
            keys = ready()
            if not keys:
                raise RuntimeError(f"jobs with unmet dependencies: {list(pending)}")
            job = pending.pop(keys[0])
            finish(keys[0], job.fn(**job.arguments(done)))
        return done

    context = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                             initargs=(threads_per_worker(workers),)) as pool:
        running: dict[Any, tuple] = {}
        while pending or running:
            for key in ready()[: workers - len(running)]:
                job = pending.pop(key)
                running[pool.submit(job.fn, **job.arguments(done))] = key
            if not running:
                raise RuntimeError(f"jobs with unmet dependencies: {list(pending)}")
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                finish(running.pop(future), future.result())  # re-raises a worker's exception
    return done
