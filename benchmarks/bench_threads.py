"""The training loop's thread policy against fixed thread counts, on a quiet and on a busy machine.

The ``--preset`` (default ``small``) preset's MLM stage, as ``pretrain`` trains it (the shape, batch,
corpus, masking and precision: ``bench_pretrain.preset_stage``), for ``--steps`` updates, three
times per load: on one thread, on two (the policy off: ``CONDENSER_LITE_THREAD_POLICY=off``) and
under the policy (``training/threads.py``, starting from all the cores); and that beside no other
work, beside one busy process and beside two (this script starts them: Python loops that keep a
core busy, at normal priority, as a notebook or a browser would; stopped after each load). Seconds
per update over updates 2..N on the wall clock, and each against the better fixed count of its
load: the policy should be within about 10% of it in every row. ``--pulse SECONDS`` adds a row
whose load changes mid-run: two processes busy for that long, then idle as long, over and over,
started afresh with each run so that all three see the same schedule. That row is where a switch
during the run could pay. Run it on an otherwise idle machine (the busy processes are the only
other load it means to have); the runs take about ``--steps`` x 10 updates of the stage, a few
minutes at the default.

    python benchmarks/bench_threads.py [--steps 300] [--preset small] [--loads 0,1,2] [--pulse 60]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a CPU benchmark
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_pretrain, beside this script

RUNS = ("1 thread", "2 threads", "policy")


def spin() -> None:
    """A busy core: a Python loop that never waits."""
    while True:
        pass


def pulse(period: float) -> None:
    """A core busy for ``period`` seconds, then idle as long, over and over: a load that comes
    and goes, as another job's bursts do."""
    while True:
        end = time.monotonic() + period
        while time.monotonic() < end:
            pass
        time.sleep(period)


def beside(target, args: tuple, n: int, fn):
    """``fn()`` while ``n`` processes run ``target(*args)``; they are stopped after it."""
    context = multiprocessing.get_context("spawn")
    busy = [context.Process(target=target, args=args, daemon=True) for _ in range(n)]
    for p in busy:
        p.start()
    try:
        return fn()
    finally:
        for p in busy:
            p.terminate()
            p.join()


class Changes(logging.Handler):
    """The policy's lines (``threads: 2 -> 1 after update ...``) during one run."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def one_run(preset: str, steps: int, run: str, cores: int) -> tuple[float, list[str]]:
    """Seconds per update of the preset's MLM stage on ``run``'s threads, and the policy's lines."""
    import torch
    from bench_pretrain import preset_stage

    from condenser_lite.training.threads import POLICY_ENV

    fixed = {"1 thread": 1, "2 threads": min(2, cores)}.get(run)
    os.environ[POLICY_ENV] = "off" if fixed else "auto"
    torch.set_num_threads(fixed or cores)
    changes = Changes()
    logger = logging.getLogger("condenser_lite.training.threads")
    logger.addHandler(changes)
    logger.setLevel(logging.INFO)
    try:
        seconds = preset_stage(preset, "mlm", steps, "wall")["seconds"]
    finally:
        logger.removeHandler(changes)
        os.environ.pop(POLICY_ENV, None)
    return seconds, changes.lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="updates per run; 2..N are timed (default 300: the "
                    "policy's first trials, at updates 20 and 120, are then a small part of the run)")
    ap.add_argument("--preset", default="small", help="the preset whose MLM stage is timed (default small)")
    ap.add_argument("--loads", default="0,1,2", help="busy processes beside the runs, comma-separated (default 0,1,2)")
    ap.add_argument("--pulse", type=float, default=0.0, help="also a row beside two processes busy for PULSE "
                    "seconds, then idle as long: a load that changes mid-run (default 0: no such row)")
    a = ap.parse_args()
    loads = [int(x) for x in a.loads.split(",") if x.strip()]
    if a.steps < 2 or not loads or min(loads) < 0 or a.pulse < 0:
        ap.error("--steps must be >= 2, --loads whole numbers >= 0 and --pulse seconds >= 0")
    import datasets
    import torch

    datasets.disable_progress_bars()
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    table: dict[str, dict[str, tuple[float, list[str]]]] = {}
    t0 = time.perf_counter()
    for n_busy in loads:
        table[f"{n_busy} busy process(es)"] = beside(
            spin, (), n_busy, lambda: {run: one_run(a.preset, a.steps, run, cores) for run in RUNS})
        print(f"[{time.perf_counter() - t0:6.0f} s] beside {n_busy} busy process(es): done", file=sys.stderr,
              flush=True)
    if a.pulse:  # the schedule starts afresh with each run, so the three runs meet the same load
        table[f"2 on/off every {a.pulse:g} s"] = {run: beside(pulse, (a.pulse,), 2,
                                                            lambda run=run: one_run(a.preset, a.steps, run, cores))
                                                 for run in RUNS}
        print(f"[{time.perf_counter() - t0:6.0f} s] beside a changing load: done", file=sys.stderr, flush=True)

    print(f"the {a.preset} preset's MLM stage, {a.steps} updates per run (2..{a.steps} timed, wall clock); {cores} "
          f"cores; torch {torch.__version__}; 1-minute load before the runs {load_before:.1f}")
    print(f"{'beside':>24s} {'1 thread':>9s} {'2 threads':>10s} {'policy':>9s} {'policy / better fixed':>22s}"
          "   the policy's changes")
    for load, row in table.items():
        s1, s2, sp = (row[run][0] for run in RUNS)
        best = min(s1, s2)
        lines = row["policy"][1]
        what = "; ".join(line.split(" (")[0].removeprefix("threads: ") for line in lines) or "none"
        print(f"{load:>24s} {s1:9.3f} {s2:10.3f} {sp:9.3f} {sp / best:21.2f}x   {what}")
    print("seconds per update; the policy should be within about 1.10x of the better fixed count in every row")


if __name__ == "__main__":
    main()
