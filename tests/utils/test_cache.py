"""The cache (condenser_lite/utils/cache.py): its root, names by content, computing something once,
a JSON result (``compute_once``) or a folder (``build_once``), one writer per output folder (a
second process waits), and a cache folder that cannot be written named."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from command_line import cli, one_error_line
from locations import ROOT

from condenser_lite.utils.cache import DONE_FILE, LOCK_FILE, build_once, cache_dir, compute_once, settings_hash
from condenser_lite.utils.errors import ConfigError


def test_cache_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "c"))
    assert cache_dir("x") == tmp_path / "c" / "x" and (tmp_path / "c" / "x").is_dir()


def test_compute_once_computes_once(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"value": 3}

    path = tmp_path / "job" / "result.json"
    assert compute_once(path, compute) == compute_once(path, compute) == {"value": 3}
    assert calls == [1] and json.loads(path.read_text()) == {"value": 3}
    assert settings_hash({"a": 1, "b": [2]}) == settings_hash({"b": [2], "a": 1}) != settings_hash({"a": 2, "b": [2]})


def test_build_once_builds_once_and_clears_what_an_interrupted_build_left(tmp_path):
    built = []

    def build(folder):
        built.append(sorted(p.name for p in folder.iterdir()))  # what the folder holds when a build starts
        (folder / "vocab.txt").write_text("built")

    folder = tmp_path / "tokenizer"
    assert build_once(folder, build) == folder
    assert built == [[LOCK_FILE]] and (folder / "vocab.txt").read_text() == "built" and (folder / DONE_FILE).exists()
    assert build_once(folder, build) == folder  # done: the second call builds nothing and keeps the files
    assert len(built) == 1 and (folder / "vocab.txt").read_text() == "built"

    def interrupted(folder):
        (folder / "vocab.txt").write_text("half")
        (folder / "shards").mkdir()
        (folder / "shards" / "0.bin").write_bytes(b"half")
        raise KeyboardInterrupt

    other = tmp_path / "task"
    with pytest.raises(KeyboardInterrupt):
        build_once(other, interrupted)
    assert (other / "vocab.txt").exists() and not (other / DONE_FILE).exists()  # unfinished, and says so
    build_once(other, build)  # the leftovers go before the build starts; the lock file stays
    assert built[1] == [LOCK_FILE] and (other / "vocab.txt").read_text() == "built"
    assert sorted(p.name for p in other.iterdir()) == sorted([DONE_FILE, LOCK_FILE, "vocab.txt"])


WAITER = """
import sys
from condenser_lite.utils.cache import output_lock
with output_lock(sys.argv[1]):
    print("in", flush=True)
"""


def test_a_second_process_waits_for_the_lock(tmp_path):
    from condenser_lite.utils.cache import output_lock

    with output_lock(tmp_path / "out"):
        child = subprocess.Popen([sys.executable, "-c", WAITER, str(tmp_path / "out")], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        message = child.stderr.readline()  # blocks until the child reports that it waits
        assert "out is being written by process" in message and "waiting" in message
        time.sleep(0.5)
        assert child.poll() is None  # still waiting while this process holds the lock
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out == "in\n"


def test_a_cache_that_cannot_be_written_is_named(beir, tmp_path, monkeypatch, capsys):
    """A `$CONDENSER_LITE_CACHE` that is a file is named in one line with the way out, and a
    read-only cache folder is named by `cache_dir` before anything is written there. (The tests run
    as root, for whom every folder is writable: the read-only folder is simulated through os.access.)"""
    from condenser_lite.utils.cache import cache_dir

    afile = tmp_path / "cachefile"
    afile.write_text("not a folder")
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(afile))
    line = one_error_line(cli(["pretrain", "--method", "mlm", "--set", "stages.bert.max_steps=1"], capsys))
    assert f"the cache folder {afile} ($CONDENSER_LITE_CACHE) cannot be written" in line
    assert "point $CONDENSER_LITE_CACHE at a writable folder" in line

    readonly = tmp_path / "readonly"
    readonly.mkdir()
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(readonly))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p).is_relative_to(readonly) and mode == os.W_OK
                        else real_access(p, mode))
    with pytest.raises(ConfigError, match=rf"cache folder {readonly}/experiments .* cannot be written \(read-only"):
        cache_dir("experiments")
