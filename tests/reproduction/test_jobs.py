"""The job runner: dependencies through Ref arguments, priorities, results kept on disk (the
results' cache itself, ``compute_once``, is tests/utils/test_cache.py's)."""

import pytest

from condenser_lite.reproduction.jobs import Job, Ref, run_jobs


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
