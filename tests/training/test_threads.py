"""The training loop's thread policy (condenser_lite.training.threads): two threads only while they
pay, a line when the count changes, the caller's count given back, and the same counts on the same
updates on an idle machine. The policy runs here against a simulated clock whose update time
depends on the thread count and the load, with the 2-core Xeon's measured times of the ``small``
MLM update; one test runs it inside the real loop."""

from __future__ import annotations

import json
import time

import pytest
import torch

from condenser_lite.reproduction.runs.jobs import num_threads
from condenser_lite.training import threads
from condenser_lite.training.loop import TrainConfig, train
from condenser_lite.training.threads import POLICY_ENV, ThreadPolicy

# seconds per update by [busy other processes][threads], measured on a 2-core Xeon (idle, one busy
# process); beside two busy processes two threads collapse further
MEASURED = {0: {2: 0.130, 1: 0.190}, 1: {2: 0.398, 1: 0.157}, 2: {2: 0.9, 1: 0.25}}


class Machine:
    """A simulated clock: each update advances it by the measured time at the current thread count
    and load (plus a little deterministic jitter); the probe reads the same table (or, with
    ``probe_sees_idle``, the idle row whatever the load: a probe that misjudges)."""

    def __init__(self, busy: int = 0, jitter: float = 0.03, probe_sees_idle: bool = False):
        self.busy, self.jitter, self.now, self.n = busy, jitter, 0.0, 0
        self.probe_sees_idle = probe_sees_idle

    def clock(self) -> float:
        return self.now

    def probe(self, high: int, low: int) -> dict[int, float]:
        row = MEASURED[0 if self.probe_sees_idle else self.busy]
        return {count: 1000 * row[count] for count in (high, low)}

    def update(self) -> None:
        self.n += 1
        wobble = 1 + self.jitter * ((self.n * 7919) % 11 - 5) / 5  # within +-jitter
        self.now += MEASURED[self.busy][torch.get_num_threads()] * wobble


def simulate(policy: ThreadPolicy, machine: Machine, steps: range, load=None) -> tuple[list[int], list[str]]:
    """Run ``steps`` updates under ``policy``; ``load(step)`` sets the busy processes per update.
    The thread count of every update, and the lines shown."""
    counts, lines = [], []
    for step in steps:
        if load is not None:
            machine.busy = load(step)
        policy.before(step)
        counts.append(torch.get_num_threads())
        machine.update()
        line = policy.after(step)
        if line:
            lines.append(line)
    return counts, lines


@pytest.fixture
def two_threads():
    with num_threads(2):
        yield


def run(busy: int, steps: int = 3000, load=None, start: int = 0,
        probe_sees_idle: bool = False) -> tuple[list[int], list[str], float]:
    machine = Machine(busy, probe_sees_idle=probe_sees_idle)
    policy = ThreadPolicy(2, clock=machine.clock, probe=machine.probe)
    first = policy.start(start)
    counts, lines = simulate(policy, machine, range(start + 1, start + steps + 1), load)
    policy.restore()
    return counts, ([first] if first else []) + lines, machine.now


@pytest.mark.parametrize("busy", [0, 1, 2])
def test_the_policy_is_within_a_few_percent_of_the_better_fixed_count(two_threads, busy):
    counts, lines, seconds = run(busy)
    best = 3000 * min(MEASURED[busy].values())
    assert seconds < 1.05 * best, (seconds / best, lines)
    faster = min(MEASURED[busy], key=MEASURED[busy].get)
    assert counts.count(faster) > 0.97 * len(counts)
    assert torch.get_num_threads() == 2  # the caller's count, given back


def test_idle_runs_take_the_same_counts_on_the_same_updates(two_threads):
    """Idle, the trials on one thread fall on fixed updates and always lose: two runs (and a run
    resumed at update 500) compute every update on the same count, so they end identical."""
    a, lines, _ = run(0)
    b, _, _ = run(0)
    assert a == b and lines == []
    trial_updates = [step for step, count in enumerate(a, 1) if count == 1]
    assert trial_updates and trial_updates[0] > threads.FIRST_CHECK  # after warm-up, on the schedule
    assert len(trial_updates) < 0.01 * len(a)  # each trial stops as soon as it cannot win
    for start in (500, 318):  # resumed well before a trial, and just before one (inside one: not a save_every)
        resumed, _, _ = run(0, steps=3000 - start, start=start)
        assert resumed == a[start:], start


def test_a_load_that_comes_and_goes_is_followed_and_each_change_is_a_line(two_threads):
    """Idle for 1,000 updates, one busy process for 2,000, idle again: one thread soon after the
    load arrives (the updates slowed: a trial before the next scheduled one), two again by the
    first scheduled trial after it leaves."""
    load = lambda step: 1 if 1000 < step <= 3000 else 0  # noqa: E731
    counts, lines, _ = run(0, steps=5000, load=load)
    assert counts[1010] == 1 and counts[2999] == 1
    assert counts[4999] == 2
    down = next(i for i in range(1000, 3000) if counts[i] == 1 and counts[i + 5] == 1)
    assert down < 1010  # within a few updates of the load's arrival
    assert lines[0].startswith("threads: 2 -> 1 after update") and "s per update on 1 against" in lines[0]
    assert any(line.startswith("threads: 1 -> 2") for line in lines)


def test_under_load_the_probe_spares_the_trials_of_two_threads(two_threads):
    """On one thread beside busy processes the probe, run first at each check, finds two threads
    slower: no update runs on two."""
    assert run(1)[0].count(2) == 0 and run(2)[0].count(2) == 0


def test_a_trial_stops_as_soon_as_it_cannot_win(two_threads):
    """With a probe that misjudges the load, the trials run: the first 20 updates on two threads
    (the probe saw idle cores), one thread from the trial after the 20th, then four trials of two
    (after the 120th, 320th, 720th and 1,520th updates). Beside one busy process two threads are
    2.5x slower: each trial runs its first update and two timed ones. Beside two, 3.6x: the first
    update alone has lost."""
    assert run(1, probe_sees_idle=True)[0].count(2) == 20 + 4 * 3
    assert run(2, probe_sees_idle=True)[0].count(2) == 20 + 4


def test_busy_at_the_start_the_probe_starts_on_one_thread(two_threads):
    counts, lines, _ = run(1, steps=50)
    assert counts[0] == 1 and lines[0].startswith("threads: 2 -> 1 after update 0 (a 2048x128x512 matrix multiply")


def test_which_runs_the_policy_manages(two_threads, monkeypatch):
    monkeypatch.delenv(POLICY_ENV, raising=False)
    assert ThreadPolicy.for_run("cpu", 1) is not None
    assert ThreadPolicy.for_run("cuda", 1) is None and ThreadPolicy.for_run("cpu", 2) is None
    monkeypatch.setenv(POLICY_ENV, "off")
    assert ThreadPolicy.for_run("cpu", 1) is None
    monkeypatch.delenv(POLICY_ENV)
    torch.set_num_threads(1)  # a one-thread worker, a chapter, a unit test
    assert ThreadPolicy.for_run("cpu", 1) is None


def test_the_probe_times_both_counts_and_gives_the_count_back(two_threads):
    times = threads.probe_threads(2, 1, repeats=2)
    assert set(times) == {1, 2} and all(t > 0 for t in times.values())
    assert torch.get_num_threads() == 2


def test_the_loop_logs_the_change_and_gives_the_threads_back(two_threads, monkeypatch, tmp_path, capsys):
    """In the real loop: updates that get slow on two threads (a step function that sleeps longer
    there, as a busy core makes them) drop to one thread, a line says so on the progress output,
    the log's next line has ``threads``, and the caller's count comes back after the run."""
    monkeypatch.delenv(POLICY_ENV, raising=False)
    monkeypatch.setattr(threads, "probe_threads", lambda high, low: {high: 1.0, low: 1.0})  # start on 2
    monkeypatch.setattr(threads, "FIRST_CHECK", 6)
    model = torch.nn.Linear(2, 1)

    def step_fn(model, batch, acc):
        time.sleep(0.03 if torch.get_num_threads() == 2 else 0.005)
        loss = model(batch).pow(2).mean()
        acc.backward(loss)
        return {"loss": loss.detach()}

    cfg = TrainConfig(max_steps=16, batch_size=2)
    result = train(model, [torch.ones(2)] * 8, cfg, output_dir=tmp_path, collate_fn=torch.stack, step_fn=step_fn,
                   progress=True)
    assert torch.get_num_threads() == 2
    err = capsys.readouterr().err
    assert "threads: 2 -> 1 after update" in err, err[-2000:]
    changed = [r for r in result.history if "threads" in r]
    assert [r["threads"] for r in changed] == [1]
    logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "threads" in r] == [changed[0]["step"]]
    assert threads.counts_used(result.history, 2) == {"start": 2, "changes": [[changed[0]["step"], 1]]}
