"""What both parts of ``bench_gpu.py`` share: the model each ``--size`` builds (a preset's
``ModelConfig``, so the benchmark times the shape the presets train), and the device's clock,
memory and table helpers. ``bench_gpu.py`` runs the parts (``python benchmarks/bench_gpu.py --help``).
"""

from __future__ import annotations

import gc

import torch

SIZES = {"base": "paper", "tiny": "tiny"}  # --size: the preset whose model (shape, Condenser split) is built


def model_shape(args):
    from condenser_lite.reproduction.configuration.presets import get_preset

    return get_preset(SIZES[args.size]).model


def bert_config(args, vocab: int):
    return model_shape(args).bert_config(vocab_size=vocab, max_position_embeddings=512)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_mb(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)))
