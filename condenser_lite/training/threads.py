"""How many threads a training run computes on, chosen while it runs: all of them only while they pay.

Explained in chapter 2, `notebooks/02_condenser.ipynb` (the loop). Every stage trains through
``loop.train``, which asks this policy before and after each update.

Why: torch runs an operation on all its threads and every thread waits for the slowest at the
end of it. On an idle 2-core CPU two threads make the ``small`` MLM update faster than one
(0.130 s against 0.190 s on a 2-core Xeon); once another program keeps one core busy, the second
thread waits for that core at every operation and the update takes 0.398 s, where one thread takes
0.157 s. A reader's laptop is rarely idle, and it may become busy in the middle of a long stage.

The policy (``ThreadPolicy``) switches between the count the caller set (``torch.get_num_threads()``
as the run starts: the *high* count) and half of it (one thread on two cores):

* before the first update a probe times a small matrix multiply on both counts (``probe_threads``,
  medians, so a lucky moment on a busy core does not count) and the run starts on the faster;
* at fixed updates (the 20th, then 100, 200, 400, 800 and every 1,600 updates later:
  ``check_steps``), and early when the current count's updates take half as long again as when
  last judged (``SLOWDOWN``), it times a few updates on the other count and switches only when
  those are clearly faster (below ``MARGIN`` of the current count's median: hysteresis). A trial
  stops as soon as it cannot win; and on the low count the probe runs first, and where even it
  finds the high count slower there is no trial (its first update beside a busy core can cost as
  much as 30 updates on one thread);
* each change is a line in the progress output and the log (``threads``, on the next line of
  ``log.jsonl``).

Only a run on the CPU in one process, whose caller allows more than one thread, is managed: the
protocol's one-thread workers, the chapters (``book.setup(threads=1)``) and the unit tests stay on
one thread, and ``CONDENSER_LITE_THREAD_POLICY=off`` keeps any run on its caller's count. The
policy is scheduling only: it is in no cache key or checkpoint identity.

Reproducibility: a thread count changes how an operation is split, not what it computes, except
in the last digits of float sums. A parallel reduction (a matrix multiply's inner products, a
gradient summed over the batch) adds one partial sum per thread and then those; floating-point
addition is not associative, so the ``small`` MLM stage's weights differ by up to 5e-4 (bf16)
after six updates on one thread against six on two. On an idle machine the probe starts every run
on the high count, and the trials fall on fixed updates and lose by far more than the margin, so
two runs take the same counts on the same updates and end identical, and so does a run resumed
from a checkpoint (the trials are at updates 20, 120, 320, ..., 1,520 + 1,600k, a few updates
each: never at a round ``save_every``). A switch under load depends on the time measured, and
then two runs differ in the last digits as runs on two machines do. Where bit-identical repeats
matter on a busy machine, set ``CONDENSER_LITE_THREAD_POLICY=off``.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch

logger = logging.getLogger(__name__)

POLICY_ENV = "CONDENSER_LITE_THREAD_POLICY"  # "off": keep the caller's thread count throughout
FIRST_CHECK = 20  # update of the first trial on real updates (the probe chose the start)
GAPS = (100, 200, 400, 800, 1600)  # updates between trials, the last repeated
WINDOW = 3  # timed updates on each count that a judgement compares (their medians)
MARGIN = 0.85  # switch only when the other count's median is below this share of the current's
SLOWDOWN = 1.5  # the current count's median this much above its last judged one: a trial now
MIN_GAP = 20  # updates between trials started by a slowdown
# a trial's first update this many times the current count's median has lost already: a change of
# count makes the next update at most about 1.4x slower (measured), two threads beside a busy
# core up to 7x
HOPELESS = 3.0
PROBE_SHAPE = (2048, 128, 512)  # the small model's feed-forward, as devices.PROBE_SHAPE


def check_steps() -> Iterator[int]:
    """The updates after which a trial starts: ``FIRST_CHECK``, then ``GAPS`` apart, the last gap
    repeated. A function of the update alone, so a resumed run meets the same ones."""
    step = FIRST_CHECK
    yield step
    gaps = iter(GAPS)
    gap = GAPS[-1]
    while True:
        gap = next(gaps, gap)
        step += gap
        yield step


def counts_used(history: Sequence[Mapping], start: int) -> dict:
    """The thread counts a run computed on, for its record: the caller's count it ``start``-ed
    from, and each change as ``[update, count]`` from the log lines that carry ``threads`` (the
    update of the line after the change). A resumed run's history holds every segment's lines.

    >>> counts_used([{"step": 20}, {"step": 40, "threads": 1}], start=2)
    {'start': 2, 'changes': [[40, 1]]}
    """
    return {"start": start, "changes": [[row["step"], row["threads"]] for row in history if "threads" in row]}


def probe_threads(high: int, low: int, repeats: int = 9) -> dict[int, float]:
    """Median milliseconds of a small matrix multiply (``PROBE_SHAPE``) on ``high`` and ``low``
    threads, the two counts timed in turn (about 0.1 s idle). A median, not a minimum: on a busy
    core the thread sometimes finds the core free, and a best time would hide how often it does
    not. Chapter 2."""
    m, k, n = PROBE_SHAPE
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    before = torch.get_num_threads()
    times: dict[int, list[float]] = {high: [], low: []}
    try:
        for count in times:  # warm-up: the thread pool and the kernels of each count
            torch.set_num_threads(count)
            a @ b
        for _ in range(repeats):
            for count, seen in times.items():
                torch.set_num_threads(count)
                t0 = time.perf_counter()
                a @ b
                seen.append((time.perf_counter() - t0) * 1e3)
    finally:
        torch.set_num_threads(before)
    return {count: statistics.median(seen) for count, seen in times.items()}


class ThreadPolicy:
    """The thread count of one training run, between ``high`` (the caller's count) and ``low``
    (half of it); see the module docstring. The loop calls ``start()`` once, then around each
    update ``before(step)`` and ``after(step)`` (``step``: the update's 1-based number); ``after``
    returns a line to show when the count changed. ``clock`` and ``probe`` are replaceable for
    tests (``probe``: ``probe_threads`` when None). Chapter 2."""

    def __init__(self, high: int, clock: Callable[[], float] = time.perf_counter,
                 probe: Callable[[int, int], dict[int, float]] | None = None):
        self.high, self.low = high, max(1, high // 2)
        self.count = high
        self.clock, self.probe = clock, probe
        self.timed: list[float] = []  # seconds of the current count's recent updates
        self.judged: float | None = None  # the current count's median when last judged
        self.trial: list[float] | None = None  # seconds of the other count's updates in a trial
        self.base = 0.0  # the current count's median the trial must beat
        self.skip = 0  # updates not to time: the first ones after a start or a change
        self.last_trial = 0
        self.checks = check_steps()
        self.next_check = next(self.checks)
        self.t0 = 0.0

    @classmethod
    def for_run(cls, device_type: str, processes: int) -> ThreadPolicy | None:
        """The policy for a run on ``device_type`` in ``processes`` processes, or None where the
        thread count is left alone: a GPU or TPU run, a distributed one, a caller on one thread,
        ``$CONDENSER_LITE_THREAD_POLICY=off``. Chapter 2."""
        if os.environ.get(POLICY_ENV, "").strip().lower() in ("off", "0", "no", "false"):
            return None
        high = torch.get_num_threads()
        if device_type != "cpu" or processes > 1 or high < 2:
            return None
        return cls(high)

    def start(self, step: int) -> str | None:
        """Before the run's first update (``step`` updates done, from a resume): the probe picks
        the count to start on; the line to show where it is not the caller's."""
        while self.next_check <= step:
            self.next_check = next(self.checks)
        times = (self.probe or probe_threads)(self.high, self.low)
        self.skip = 2
        if times[self.low] < MARGIN * times[self.high]:
            return self._change(step, self.low, f"a {'x'.join(map(str, PROBE_SHAPE))} matrix multiply took "
                                f"{times[self.low]:.1f} ms on {self.low} against {times[self.high]:.1f} ms on "
                                f"{self.high}: another program is using the cores")
        return None

    def before(self, step: int) -> None:
        """Before update ``step``: start its clock."""
        self.t0 = self.clock()

    def after(self, step: int) -> str | None:
        """After update ``step``: time it, end or start a trial; the line to show when the count
        changed."""
        seconds = self.clock() - self.t0
        if self.trial is not None:
            if not self.skip:
                self.trial.append(seconds)
            else:  # the other count's first update, not timed: unless it is hopeless already
                self.skip -= 1
                if self.base and seconds > HOPELESS * self.base:
                    self.trial += [seconds] * WINDOW
            return self._judge(step)
        if self.skip:
            self.skip -= 1
        else:
            self.timed = (self.timed + [seconds])[-WINDOW:]
        full = len(self.timed) == WINDOW
        now = statistics.median(self.timed) if full else 0.0
        slowed = full and self.judged is not None and now > SLOWDOWN * self.judged and step - self.last_trial >= MIN_GAP
        if step >= self.next_check or slowed:
            while self.next_check <= step:
                self.next_check = next(self.checks)
            self.last_trial = step
            if self.count == self.low and not self._probe_favours(self.high):
                self.judged = now or self.judged  # the probe says the cores are still busy: no trial
                return None
            # too few timed updates (just resumed): the trial still runs its updates on the other
            # count, as the uninterrupted run's did, but cannot win (a bar of 0 s)
            self.base, self.trial, self.skip = now, [], 1
            torch.set_num_threads(self._other())
        return None

    def _probe_favours(self, count: int) -> bool:
        """Whether the probe finds ``count`` clearly faster than the other: before a trial of the
        high count, whose first update beside a busy core can take 30 of the low count's (seen
        here); a matrix multiply waits at fewer barriers than an update, so where even it loses
        on the high count the update loses by more."""
        times = (self.probe or probe_threads)(self.high, self.low)
        other = self.low if count == self.high else self.high
        return times[count] < MARGIN * times[other]

    def _other(self) -> int:
        return self.low if self.count == self.high else self.high

    def _judge(self, step: int) -> str | None:
        assert self.trial is not None
        losing = sum(t >= MARGIN * self.base for t in self.trial)
        winning = len(self.trial) - losing
        if max(losing, winning) <= WINDOW // 2:
            return None  # undecided: time another update on the other count
        other, self.trial = statistics.median(self.trial), None
        if winning > WINDOW // 2:  # the median of WINDOW is below the bar, whatever the rest
            line = f"{other:.3f} s per update on {self._other()} against {self.base:.3f} s on {self.count}"
            return self._change(step, self._other(), line, other)
        torch.set_num_threads(self.count)  # the trial lost: back, and time afresh
        self.judged, self.timed, self.skip = self.base or None, [], 1
        return None

    def _change(self, step: int, count: int, why: str, judged: float | None = None) -> str:
        before, self.count = self.count, count
        torch.set_num_threads(count)
        self.timed, self.judged, self.skip = [], judged, max(self.skip, 1)
        line = f"threads: {before} -> {count} after update {step} ({why})"
        logger.info(line)
        return line

    def restore(self) -> None:
        """Give the caller back its thread count."""
        torch.set_num_threads(self.high)
