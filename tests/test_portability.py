"""The chapters pass on any CPU: re-executed under another kernel set, from a cold cache, every
chapter still matches its committed outputs (numbers that come out of training are ignored by
nbval there and checked by assert cells in ranges that hold on any CPU).

``ATEN_CPU_CAPABILITY=default`` makes torch use its portable kernels instead of the AVX2/AVX-512
ones this machine would pick, so floating-point sums round differently, as they do on another
reader's CPU. The live checkpoints are trained again under it (a cache of their own), so what
is compared is what another machine would compute end to end. About two minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "CONDENSER_LITE_CACHE": str(tmp_path / "cache")}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    return env


def test_the_kernel_switch_takes_effect(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         capture_output=True, text=True, check=True, env=_env(tmp_path))
    assert out.stdout.strip() == "DEFAULT"


@pytest.mark.skipif(os.environ.get("ATEN_CPU_CAPABILITY") == "default", reason="already running under it")
def test_chapters_pass_under_the_portable_kernels(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "notebooks", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True, env=_env(tmp_path), timeout=1800)
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-40:])
    assert run.returncode == 0, f"the chapters under ATEN_CPU_CAPABILITY=default:\n{tail}"
