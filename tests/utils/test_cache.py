"""The cache (condenser_lite/utils/cache.py): its root, names by content, and computing something
once, a JSON result (``run_cached``) or a folder (``build_once``)."""

import json

from condenser_lite.utils.cache import cache_dir, run_cached, settings_hash


def test_cache_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "c"))
    assert cache_dir("x") == tmp_path / "c" / "x" and (tmp_path / "c" / "x").is_dir()


def test_run_cached_computes_once(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"value": 3}

    path = tmp_path / "job" / "result.json"
    assert run_cached(path, compute) == run_cached(path, compute) == {"value": 3}
    assert calls == [1] and json.loads(path.read_text()) == {"value": 3}
    assert settings_hash({"a": 1, "b": [2]}) == settings_hash({"b": [2], "a": 1}) != settings_hash({"a": 2, "b": [2]})
