"""The cache (condenser_lite/utils/cache.py): its root, names by content, and computing something
once, a JSON result (``compute_once``) or a folder (``build_once``)."""

import json

import pytest

from condenser_lite.utils.cache import DONE_FILE, LOCK_FILE, build_once, cache_dir, compute_once, settings_hash


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
