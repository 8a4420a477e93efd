"""Tests for condenser_lite.utils.devices' precision choice: ``"auto"`` picks bf16 on a CPU only where bf16
is native and faster, keys and checkpoints carry the resolved precision, and a resume across
precisions is refused. Both branches are forced, whatever this machine's CPU is."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from toy_models import masking_collate, tiny_bert, token_data

from condenser_lite.training.loop import TrainConfig, train
from condenser_lite.utils import devices
from condenser_lite.utils.devices import PRECISION_ENV, cpu_precision, resolve_precision
from condenser_lite.utils.errors import CheckpointError, ConfigError

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's choice; a GPU decides 'auto' itself")


@pytest.fixture
def fresh(monkeypatch):
    """A process that has not decided yet (the decision is made once and handed to workers)."""
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    monkeypatch.delenv(devices._DECIDED_ENV, raising=False)
    cpu_precision.cache_clear()
    yield monkeypatch
    cpu_precision.cache_clear()
    os.environ.pop(devices._DECIDED_ENV, None)
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()  # accelerate keeps one state per process: leave no bf16 behind


def _no_probe(*args, **kwargs):
    raise AssertionError("the probe ran")


@pytest.mark.parametrize("forced, expected", [("1", "bf16"), ("0", "no")])
def test_forced_choice(fresh, forced, expected):
    fresh.setenv(PRECISION_ENV, forced)
    fresh.setattr(devices, "probe_bf16", _no_probe)
    assert resolve_precision("auto") == expected
    assert resolve_precision("bf16") == "bf16" and resolve_precision("no") == "no"  # explicit ones stay


def test_x86_without_bf16_unit_is_fp32_without_probing(fresh):
    fresh.setattr(devices, "cpu_flags", lambda: ())
    fresh.setattr(devices.platform, "machine", lambda: "x86_64")
    fresh.setattr(devices, "probe_bf16", _no_probe)
    choice = cpu_precision()
    assert not choice.bf16 and "avx512_bf16" in choice.reason
    assert resolve_precision("auto") == "no"


@pytest.mark.parametrize("fp32_ms, bf16_ms, expected", [
    (3.5, 1.3, "bf16"),    # native bf16 (Zen 4: 2.8x)
    (3.5, 3.0, "no"),      # faster, but not by enough to pay for autocast's casts
    (5.8, 147.0, "no"),    # emulated (AVX2 only: 25x slower)
])
def test_probe_decides_where_flags_allow(fresh, fp32_ms, bf16_ms, expected):
    fresh.setattr(devices, "cpu_flags", lambda: ("avx512_bf16",))
    fresh.setattr(devices, "probe_bf16", lambda: (fp32_ms, bf16_ms))
    assert resolve_precision("auto") == expected
    assert cpu_precision().fp32_ms == fp32_ms  # recorded for the provenance


def test_workers_inherit_the_decision(fresh):
    fresh.setattr(devices, "cpu_flags", lambda: ("avx512_bf16",))
    fresh.setattr(devices, "probe_bf16", lambda: (3.5, 1.3))
    assert cpu_precision().bf16
    script = ("from condenser_lite.utils.devices import cpu_precision as c; import json; "
              "print(json.dumps(c().to_dict()))")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=os.environ)
    assert json.loads(child.stdout) == json.loads(json.dumps(cpu_precision().to_dict()))


def test_unknown_precision_is_refused():
    with pytest.raises(ConfigError, match="choose one of"):
        resolve_precision("fp8")


def test_stage_key_holds_the_resolved_precision(fresh):
    from condenser_lite.reproduction.configuration.presets import stage_config
    from condenser_lite.training.stage_cache import stage_settings

    class Tok:  # the stage's settings read only the tokenizer's identity
        pass

    cfg = stage_config("small", "mlm", max_steps=2)
    assert cfg.mixed_precision == "auto"
    fresh.setattr("condenser_lite.training.stage_cache.tokenizer_key", lambda tok: "tok")
    fresh.setattr("condenser_lite.training.stage_cache.data_id", lambda *a, **k: "data")
    fresh.setenv(PRECISION_ENV, "1")
    cpu_precision.cache_clear()
    on = stage_settings(cfg, Tok())
    fresh.setenv(PRECISION_ENV, "0")
    cpu_precision.cache_clear()
    off = stage_settings(cfg, Tok())
    assert (on["mixed_precision"], off["mixed_precision"]) == ("bf16", "no")


def test_resume_across_precisions_is_refused(fresh, tmp_path):
    fresh.setenv(PRECISION_ENV, "1")
    cfg, out = TrainConfig(max_steps=4, batch_size=8, lr=1e-3, mixed_precision="auto", save_every=2), tmp_path / "run"
    train(tiny_bert(), token_data(), dataclasses.replace(cfg, max_steps=2), output_dir=out, collate_fn=masking_collate)
    fresh.setenv(PRECISION_ENV, "0")
    cpu_precision.cache_clear()
    os.environ.pop(devices._DECIDED_ENV, None)
    with pytest.raises(CheckpointError, match=r"mixed_precision: checkpoint 'bf16' vs now 'no'"):
        train(tiny_bert(), token_data(), cfg, output_dir=out, collate_fn=masking_collate)


def test_emulated_avx2_takes_the_slow_path():
    """``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` makes a bf16 CPU behave like an AVX2-only
    one (the study page relies on it): bf16 must come out slower there, and ``auto`` fp32."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    env.pop(PRECISION_ENV, None)
    env.pop(devices._DECIDED_ENV, None)
    script = ("import torch; from condenser_lite.utils.devices import cpu_precision as c; import json; "
              "print(json.dumps([torch.backends.cpu.get_cpu_capability(), c().to_dict()]))")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    capability, choice = json.loads(child.stdout)
    assert capability in ("AVX2", "DEFAULT")
    assert choice["bf16"] is False
    if choice["bf16_ms"] is not None:  # a CPU with a bf16 flag: the probe ran and saw the slow path
        assert choice["bf16_ms"] > choice["fp32_ms"]


def test_the_probe_runs_on_one_thread_and_gives_the_threads_back():
    import torch

    before = torch.get_num_threads()
    seen = []
    real = torch.Tensor.__matmul__

    def spy(a, b):
        seen.append(torch.get_num_threads())
        return real(a, b)

    torch.set_num_threads(2)  # as a chapter or the protocol might have it (the tests run on one)
    torch.Tensor.__matmul__ = spy
    try:
        fp32, bf16 = devices.probe_bf16(shape=(64, 32, 16), repeats=3)
        assert torch.get_num_threads() == 2  # given back
    finally:
        torch.Tensor.__matmul__ = real
        torch.set_num_threads(before)
    assert seen and set(seen) == {1} and fp32 > 0 and bf16 > 0


@pytest.mark.parametrize("capability, expected, dtype", [
    ((7, 5), "fp16", torch.float16),    # T4 (Colab's free GPU): bf16 would be emulated through fp32
    ((7, 0), "fp16", torch.float16),    # V100
    ((8, 0), "bf16", torch.bfloat16),   # A100
    ((9, 0), "bf16", torch.bfloat16),   # H100
])
def test_auto_on_a_gpu_takes_its_tensor_cores_precision(fresh, capability, expected, dtype):
    from condenser_lite.retrieval import search

    fresh.setattr(torch.cuda, "is_available", lambda: True)
    fresh.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    fresh.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what torch says on a T4 too
    fresh.setattr(devices.xla, "available", lambda: False)
    fresh.setattr(devices, "probe_bf16", _no_probe)
    assert devices.cuda_amp_dtype() == dtype
    assert resolve_precision("auto") == expected == resolve_precision("auto", "cuda")
    assert resolve_precision("no") == "no"  # an explicit choice stays
    fresh.setattr(torch, "autocast", lambda device_type, dtype: (device_type, dtype))
    assert search._autocast(torch.device("cuda"), None) == ("cuda", dtype)  # encoding computes in the same
