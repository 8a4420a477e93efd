"""The studies as commands (``python -m condenser_lite mechanism``, ``health-runs``): a
seconds-long run on micro settings, and a bad input named in one line. The study's rules and summaries are tested on
made-up gauges in ``test_mechanism_scaling.py`` and ``studies/test_onset.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MIRROR = ROOT.parent / "shared" / "data"


def study(*args: str, cwd: Path, env: dict | None = None, name: str = "mechanism") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "condenser_lite", name, *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd, env=env)


@pytest.mark.parametrize("name", ["mechanism", "health-runs"])
def test_the_study_is_a_command_with_its_own_help(name, tmp_path):
    run = study("--help", cwd=tmp_path, name=name)
    assert run.returncode == 0 and f"usage: python -m condenser_lite {name}" in run.stdout, run.stderr[-2000:]
    listed = subprocess.run([sys.executable, "-m", "condenser_lite", "--help"], capture_output=True, text=True)
    assert name in listed.stdout


@pytest.mark.protocol  # trains micro stages
def test_the_mechanism_study_runs_on_micro_settings(tmp_path):
    if not MIRROR.exists():
        pytest.fail(f"the data mirror {MIRROR} is missing: put ../shared/data beside the repository")
    env = {**os.environ, "CONDENSER_LITE_CACHE": str(tmp_path / "cache"), "CONDENSER_LITE_DATA": str(MIRROR)}
    run = study("--preset", "micro", "--seeds", "1,2", "--workers", "1", "--out", "mechanism.json", cwd=tmp_path,
                env=env)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "wrote mechanism.json" in run.stdout
    assert '"command": "python -m condenser_lite mechanism --preset micro' in (tmp_path / "mechanism.json").read_text()


@pytest.mark.parametrize("args, message", [
    (["--seeds", "42,,43"], "error: --seeds '42,,43': give at least one seed"),
    (["--seeds", "-1"], "error: --seeds '-1': give at least one seed"),
    (["--preset", "nope"], "error: unknown preset 'nope'"),
    (["--data-dir", "/nonexistent"], "error: the data mirror /nonexistent"),
    (["--workers", "0"], "--workers: '0': give a whole number of at least 1"),
])
def test_the_mechanism_study_names_a_bad_input_in_one_line(args, message, tmp_path):
    """A bad input is one line that says what to change, not a traceback; ``--debug`` shows it."""
    run = study("--dry-run", "--only", "e0", "--out", "x.json", *args, cwd=tmp_path)
    assert run.returncode in (1, 2) and message in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    if args[0] == "--seeds":
        debug = study("--dry-run", "--only", "e0", "--out", "x.json", *args, "--debug", cwd=tmp_path)
        assert "Traceback" in debug.stderr and "ConfigError" in debug.stderr


@pytest.mark.protocol  # trains micro stages
def test_the_health_runs_run_on_micro_settings(tmp_path):
    """Chapter 2's health runs, four updates each on micro settings: every run is judged (micro
    has no committed run to compare with) and the file names the command."""
    if not MIRROR.exists():
        pytest.fail(f"the data mirror {MIRROR} is missing: put ../shared/data beside the repository")
    env = {**os.environ, "CONDENSER_LITE_CACHE": str(tmp_path / "cache"), "CONDENSER_LITE_DATA": str(MIRROR)}
    run = study("--preset", "micro", "--steps", "4", "--out", "health.json", cwd=tmp_path, env=env,
                name="health-runs")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "health: no committed run to compare with" in run.stdout and "wrote health.json" in run.stdout
    written = json.loads((tmp_path / "health.json").read_text())
    assert list(written["runs"]) == ["schedule", "short", "lr_x100", "mask_5pct", "leak"]
    assert written["provenance"]["command"] == ("python -m condenser_lite health-runs --preset micro --steps 4 "
                                                "--out health.json")


@pytest.mark.parametrize("args, message", [
    (["--runs", "schedule,nope"], "error: --runs 'schedule,nope': unknown run(s) ['nope']"),
    (["--preset", "nope"], "error: unknown preset 'nope'"),
    (["--steps", "0"], "--steps: '0': give a whole number of at least 1"),
])
def test_the_health_runs_name_a_bad_input_in_one_line(args, message, tmp_path):
    run = study("--out", "x.json", *args, cwd=tmp_path, name="health-runs")
    assert run.returncode in (1, 2) and message in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "x.json").exists()
