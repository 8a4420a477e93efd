"""Which accelerator runs the work, and the few calls that differ on a TPU, kept in one place.

Explained on page 3b, `notebooks/03_gradient_cache.ipynb` (the gradient cache replays the TPU's
random state too) and chapter 4 (encoding). A Colab TPU is an XLA device (``torch_xla``); three
things differ there and nowhere else:

* the device to compute on and load a checkpoint onto (``default_device``: CUDA, else XLA, else the CPU);
* the random state dropout draws from lives on the device: the gradient cache records and replays
  it (``gradcache.RandContext`` through ``xla.get_rng_state`` / ``xla.set_rng_state``);
* XLA compiles a graph per tensor shape, so encoding pads every batch to one width
  (``search.encode``).

``is_xla`` is the one device check; every ``torch_xla`` call goes through the ``xla`` object,
which imports ``torch_xla`` on first use. Tests replace ``xla`` with a stand-in to check the
branching on a CPU; nothing here has run on a TPU (README, "What runs where").

The precision a run computes in is chosen here too (``resolve_precision``): ``"auto"`` means bf16
where the hardware runs it natively and faster, fp16 on a GPU whose tensor cores have no bf16
(``cuda_amp_dtype``: a T4, Colab's free GPU, or a V100, where torch would emulate bf16 through
fp32 arithmetic), full precision elsewhere. On a CPU that is not a
property of the instruction set alone: a bf16 autocast matrix multiply is 2-3x faster than fp32
on CPUs with bf16 units (``avx512_bf16``, AMX) and about 25x *slower* on one with AVX2 only,
where it is emulated. So ``cpu_precision`` reads the CPU's flags and then times a few
milliseconds of both (the study page, ``notebooks/09_study.md``, shows both cases).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

PRECISIONS = ("no", "bf16", "fp16", "auto")
PRECISION_ENV = "CONDENSER_LITE_CPU_BF16"  # "1" / "0": skip the probe and force bf16 / fp32 on a CPU
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 flags of CPUs with bf16 arithmetic units
# bf16 must beat fp32 by this much on the probe's matrix multiply: autocast adds casts around
# every other op, so a smaller win on the matmul alone is lost over a whole training step (the
# study measured a 2.8x matmul win giving a 1.3x faster step).
BF16_MIN_SPEEDUP = 1.5
PROBE_SHAPE = (2048, 128, 512)  # the small model's feed-forward: 32 x 64 tokens, hidden 128 -> 512


def is_xla(device: Any) -> bool:
    """Whether ``device`` (a ``torch.device``, a string such as ``"xla:0"``, or None) is an XLA
    device (TPU): the one check behind which the library's XLA calls sit. Chapter 3."""
    if device is None:
        return False
    return torch.device(device).type == "xla"


class TorchXLA:
    """The ``torch_xla`` calls the library makes, imported when first used (chapter 3)."""

    def available(self) -> bool:
        """Whether ``torch_xla`` is installed (a TPU runtime)."""
        return importlib.util.find_spec("torch_xla") is not None

    def device(self) -> torch.device:
        import torch_xla.core.xla_model as xm

        return xm.xla_device()

    def get_rng_state(self, device: Any) -> int:
        """The seed XLA's next random op (dropout) draws from on ``device``."""
        import torch_xla.core.xla_model as xm

        return xm.get_rng_state(device=torch.device(device))

    def set_rng_state(self, state: int, device: Any) -> None:
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(state, device=torch.device(device))


xla = TorchXLA()


def default_device() -> torch.device | str:
    """The device this machine computes on: ``"cuda"`` if there is a GPU, else the XLA device if
    ``torch_xla`` is installed (a TPU), else ``"cpu"``. A checkpoint loaded by name goes there,
    and the chapters run there. (Apple's MPS is not used: nothing here was tested on it.)
    Chapter 4."""
    if torch.cuda.is_available():
        return "cuda"
    if xla.available():
        return xla.device()
    return "cpu"


# ---- precision --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuPrecision:
    """What ``"auto"`` picks on this CPU and why (recorded in a results file's provenance).
    ``bf16``: the choice; ``reason``: one line; ``flags``: the CPU's bf16 flags found;
    ``capability``: torch's kernel set (``ATEN_CPU_CAPABILITY`` changes it); ``fp32_ms`` /
    ``bf16_ms``: the probe's best times (None where no probe ran). Chapter 9 (the study)."""

    bf16: bool
    reason: str
    flags: tuple[str, ...]
    capability: str
    fp32_ms: float | None = None
    bf16_ms: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_flags() -> tuple[str, ...] | None:
    """The CPU's bf16 flags from ``/proc/cpuinfo`` (Linux), or None where that file is absent."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    words = set(next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith(("flags", "Features"))), []))
    return tuple(f for f in BF16_FLAGS if f in words)


def probe_bf16(shape: tuple[int, int, int] = PROBE_SHAPE, repeats: int = 15) -> tuple[float, float]:
    """Best-of-``repeats`` milliseconds of one ``[m, k] @ [k, n]`` multiply in fp32 and under CPU
    bf16 autocast (a few milliseconds where bf16 is native). On one thread, and the two
    precisions timed in turn: two threads on a busy 2-core machine wait on each other at every
    operation, and a load that came and went during one precision's timings alone could flip the
    choice (seen: 20 ms vs 16 ms under load, 1.3 ms vs 2.7 ms without)."""
    m, k, n = shape
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)

    def fp32() -> None:
        a @ b

    def bf16() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a @ b

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = {fp32: float("inf"), bf16: float("inf")}
        for fn in best:
            fn()  # warm-up: kernel selection, allocation
        for i in range(repeats):
            for fn in best:
                t0 = time.perf_counter()
                fn()
                best[fn] = min(best[fn], (time.perf_counter() - t0) * 1e3)
            if i >= 2 and best[bf16] > 3 * best[fp32]:
                break  # clearly slow (emulated): no need to measure it precisely
    finally:
        torch.set_num_threads(threads)
    return best[fp32], best[bf16]


def _decide() -> CpuPrecision:
    capability = torch.backends.cpu.get_cpu_capability()
    forced = os.environ.get(PRECISION_ENV, "").strip().lower()
    flags = cpu_flags()
    if forced in ("1", "0", "true", "false", "yes", "no"):
        on = forced in ("1", "true", "yes")
        return CpuPrecision(on, f"${PRECISION_ENV}={forced}", flags or (), capability)
    if flags is not None and not flags and platform.machine().lower() in ("x86_64", "amd64"):
        return CpuPrecision(False, "no bf16 unit (no avx512_bf16 or amx_bf16 flag): bf16 would be emulated",
                            (), capability)
    fp32, bf16 = probe_bf16()
    speedup = fp32 / bf16
    fast = speedup >= BF16_MIN_SPEEDUP
    verdict = "faster" if fast else "not fast enough" if speedup >= 1 else "slower"
    reason = (f"a bf16 matmul of {'x'.join(map(str, PROBE_SHAPE))} took {bf16:.2f} ms vs {fp32:.2f} ms in fp32 "
              f"({speedup:.2f}x, {verdict}; bf16 needs {BF16_MIN_SPEEDUP}x)")
    return CpuPrecision(fast, reason, flags or (), capability, round(fp32, 3), round(bf16, 3))


_DECIDED_ENV = "_CONDENSER_LITE_CPU_PRECISION"  # the decision, handed to worker processes


@functools.cache
def cpu_precision() -> CpuPrecision:
    """Whether bf16 autocast is native and faster than fp32 on this CPU, decided once:
    ``$CONDENSER_LITE_CPU_BF16`` (1/0) if set; else an x86 CPU without a bf16 flag is fp32;
    else a probe times both precisions (``probe_bf16``). Worker processes inherit the decision
    of the process that started them (a probe under load could otherwise flip a close call, and
    with it the cache keys). Chapter 9 (the study)."""
    inherited = os.environ.get(_DECIDED_ENV)
    if inherited and not os.environ.get(PRECISION_ENV):
        fields = json.loads(inherited)
        return CpuPrecision(**{**fields, "flags": tuple(fields["flags"])})
    choice = _decide()
    os.environ[_DECIDED_ENV] = json.dumps(choice.to_dict())
    return choice


def cuda_amp_dtype() -> torch.dtype:
    """The autocast dtype of the current GPU: bf16 where its tensor cores compute it (compute
    capability 8.0 and later: A100, L4, H100), else fp16 (a T4 or V100). Not
    ``torch.cuda.is_bf16_supported()``, which is also true where bf16 is only emulated, through
    fp32 arithmetic at a fraction of the fp16 rate. Chapter 2 (the training loop)."""
    if torch.version.hip:  # ROCm GPUs compute bf16
        return torch.bfloat16
    major, _ = torch.cuda.get_device_capability()
    return torch.bfloat16 if major >= 8 else torch.float16


def resolve_precision(mixed_precision: str, device: Any = None) -> str:
    """The precision a run computes in: ``mixed_precision`` itself unless it is ``"auto"``, which
    means bf16 on a TPU, on a GPU with bf16 tensor cores and on a CPU where ``cpu_precision``
    finds bf16 native and faster; fp16 on an older GPU (``cuda_amp_dtype``: Colab's T4); full
    precision (``"no"``) otherwise. The CPU's choice is printed once
    per process. Cache keys and checkpoints use the resolved value, so a run made in bf16 is
    never reused or resumed as an fp32 one. Chapter 2 (the training loop)."""
    if mixed_precision not in PRECISIONS:
        from .errors import ConfigError

        raise ConfigError(f"mixed_precision={mixed_precision!r}: choose one of {PRECISIONS}")
    if mixed_precision != "auto":
        return mixed_precision
    kind = None if device is None else torch.device(device).type
    if kind in (None, "xla") and xla.available():
        return "bf16"
    if kind in (None, "cuda") and torch.cuda.is_available():
        return "bf16" if cuda_amp_dtype() == torch.bfloat16 else "fp16"
    if kind not in (None, "cpu"):
        return "no"
    choice = cpu_precision()
    _announce(choice)
    return "bf16" if choice.bf16 else "no"


_ANNOUNCED: list[bool] = []


def _announce(choice: CpuPrecision) -> None:
    if not _ANNOUNCED:
        _ANNOUNCED.append(True)
        print(f"mixed_precision='auto' on this CPU: {'bf16' if choice.bf16 else 'fp32'} ({choice.reason})",
              file=sys.stderr, flush=True)


def load_average() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, or None where the system has none. Chapter 4."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
