"""The job runner: dependencies through Ref arguments, priorities, results kept on disk (the
results' cache itself, ``compute_once``, is tests/utils/test_cache.py's)."""

import pytest

from condenser_lite.reproduction.runs.jobs import Job, Ref, run_jobs


def add(a, b):
    return {"sum": a + b}


def test_refs_fill_in_results_and_order_follows_priority():
    seen = []
    jobs = {
        ("late",): Job(add, dict(a=Ref(("first",), "sum"), b=1), priority=5),
        ("first",): Job(add, dict(a=1, b=2), priority=9),  # runs first anyway: the others wait on it
        ("soon",): Job(add, dict(a=Ref(("first",), "sum"), b=Ref(("first",), "sum")), priority=0),
    }
    done = run_jobs(jobs, workers=1, on_done=lambda key, result: seen.append(key))
    assert seen == [("first",), ("soon",), ("late",)]
    assert done[("late",)] == {"sum": 4} and done[("soon",)] == {"sum": 6}
    assert run_jobs({("x",): Job(add, dict(a=Ref(("known",), "sum"), b=0))}, done={("known",): {"sum": 7}})[("x",)] == {"sum": 7}
    with pytest.raises(RuntimeError, match="unmet dependencies"):
        run_jobs({("x",): Job(add, dict(a=Ref(("missing",)), b=0))})


def test_the_first_stage_takes_one_thread_on_a_busy_machine(monkeypatch):
    """The protocol's first stage and its dry run take the same count: all cores when the machine
    is quiet, one when the 1-minute load is above 1 (two threads beside other work lose to one)."""
    from condenser_lite.reproduction.runs import jobs

    monkeypatch.setattr(jobs, "load_average", lambda: [2.3, 1.0, 1.0])
    assert jobs.first_stage_threads(2) == 1
    monkeypatch.setattr(jobs, "load_average", lambda: [0.2, 1.0, 1.0])
    assert jobs.first_stage_threads(2) is None
    assert jobs.first_stage_threads(1) is None  # one worker: the caller's setting


def test_a_job_runs_on_its_workers_threads():
    """Spawned workers share the cores out; one worker runs the jobs in this process, on the
    caller's count (the training loop's thread policy manages it)."""
    import os

    from condenser_lite.reproduction.runs import jobs

    assert jobs.worker_threads(1) is None
    assert jobs.worker_threads(2) == max(1, (os.cpu_count() or 1) // 2)
    assert jobs.worker_threads(64) == 1
