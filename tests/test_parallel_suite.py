"""``pytest --nbval`` on every core (pyproject.toml, tests/conftest.py): each notebook's cells in
order in one worker, and the fixtures that train built once in the folder the whole run shares."""

import shlex
import tomllib
from types import SimpleNamespace

from locations import ROOT, run_folder

ADDOPTS = shlex.split(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"])


def test_the_suite_runs_on_every_core_with_each_file_whole_in_one_worker():
    assert ADDOPTS[ADDOPTS.index("-n") + 1] == "logical"  # a worker per logical CPU
    # a notebook's cells depend on the cells before them, and a module's fixtures are built once
    assert ADDOPTS[ADDOPTS.index("--dist") + 1] == "loadfile"


def test_the_run_folder_is_the_one_every_worker_shares(tmp_path):
    factory = SimpleNamespace(getbasetemp=lambda: tmp_path / "popen-gw1")
    assert run_folder(factory, SimpleNamespace(workerinput={"workerid": "gw1"})) == tmp_path
    assert run_folder(factory, SimpleNamespace()) == tmp_path / "popen-gw1"  # one process: its own
