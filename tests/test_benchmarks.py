"""Every benchmark script runs: `--help`, a seconds-long run on micro settings where the script has
them, and imports of public library names only (a private name is free to change under it).
The numbers such runs print mean nothing; that they print them does."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "benchmarks").glob("*.py"))
# a script runs on its own; a file without a __main__ block is a part of one
# (bench_gpu.py's gpu_common.py and gpu_retrieval.py)
SCRIPTS = [p for p in FILES if 'if __name__ == "__main__":' in p.read_text()]
MIRROR = ROOT.parent / "shared" / "data"

SMOKE = {  # script: arguments of a short run on micro settings, and what its output must hold
    "bench_pretrain.py": (["--steps", "2", "--batch", "4", "--max-len", "32", "--threads", "1"],
                          ("Condenser / plain MLM step time", "small preset's stages", "cocondenser: 64 documents")),
    "bench_gradcache.py": (["--sizes", "8", "--seq-len", "32", "--steps", "1", "--budget", "20", "--cpu",
                            "--threads", "1"], "total wall time"),
    "bench_gpu.py": (["--size", "tiny", "--part", "gradcache", "--sizes", "8", "--seq-len", "32", "--device", "cpu",
                      "--dtype", "fp32", "--steps", "1", "--warmup", "0", "--vocab", "1000"], "total wall time"),
    "bench_retrieval.py": (["--quick", "--repeats", "1", "--threads", "1"], "BM25: SciFact test nDCG@10"),
    "bench_threads.py": (["--steps", "2", "--preset", "micro", "--loads", "1", "--pulse", "1"],
                         ("1 busy process(es)", "2 on/off every 1 s", "policy / better fixed")),
    "zero_shot.py": (["--quick", "--threads", "1"], ("published nDCG@10 0.645", "(plain / library)")),
}


def test_every_script_is_listed():
    assert {p.name for p in SCRIPTS} == set(SMOKE)


@pytest.mark.parametrize("script", FILES, ids=lambda p: p.name)
def test_benchmarks_import_only_public_names(script):
    tree = ast.parse(script.read_text())
    private = [f"{script.name}:{node.lineno}: from {node.module} import {alias.name}"
               for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("condenser_lite")
               for alias in node.names if alias.name.startswith("_")]
    assert not private, private


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help(script):
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage" in run.stdout.lower()


@pytest.mark.protocol  # a benchmark's smoke run
@pytest.mark.parametrize("name", sorted(SMOKE))
def test_smoke_run(name, tmp_path):
    if not MIRROR.exists():
        pytest.fail(f"the data mirror {MIRROR} is missing: put ../shared/data beside the repository")
    args, expected = SMOKE[name]
    env = {**os.environ, "CONDENSER_LITE_CACHE": str(tmp_path / "cache"), "CONDENSER_LITE_DATA": str(MIRROR)}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True,
                         timeout=600, env=env, cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    for line in (expected,) if isinstance(expected, str) else expected:
        assert line in run.stdout, run.stdout[-3000:]


@pytest.mark.protocol
def test_bench_pretrain_cycles_its_blocks(tmp_path):
    """More steps than the corpus's full 128-token blocks fill: the blocks are reused in order, and
    the script says how many it has."""
    if not MIRROR.exists():
        pytest.fail(f"the data mirror {MIRROR} is missing: put ../shared/data beside the repository")
    env = {**os.environ, "CONDENSER_LITE_CACHE": str(tmp_path / "cache"), "CONDENSER_LITE_DATA": str(MIRROR)}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_pretrain.py"), "--steps", "60", "--batch",
                          "8", "--threads", "1", "--clock", "cpu", "--stages", "none"],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "full 128-token blocks (480 used, cycled" in run.stdout, run.stdout[-3000:]
    assert "preset's stages" not in run.stdout
