"""Gradient cache vs plain step: time per update and peak memory as the span batch grows.

    python benchmarks/bench_gradcache.py            # tiny Condenser, 16..1024 spans of 128 tokens, chunk 32
    python benchmarks/bench_gradcache.py --quick    # 16..256 spans of 64 tokens (well under a minute)

Every setting runs in a fresh process, so its memory high-water mark is its own: on CPU the
resident-set high-water (``resource.getrusage().ru_maxrss``; tracemalloc does not see torch's
allocator), reported both as the total and as the growth during the updates over the level
after the model, optimiser and batch were built; on CUDA ``torch.cuda.max_memory_allocated``.
A setting whose time, extrapolated from the previous size, would overrun ``--budget`` seconds
is skipped and marked so. Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def worker(params: dict, queue) -> None:
    """One setting, in its own process; puts its measurements on ``queue``."""
    args = SimpleNamespace(**params)
    import torch

    from condenser_lite.modeling.condenser import Condenser
    from condenser_lite.modeling.gradcache import cocondenser_step
    from condenser_lite.reproduction.configuration.presets import TINY

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    torch.manual_seed(0)
    cfg = TINY.model.bert_config(vocab_size=args.vocab, max_position_embeddings=max(128, args.seq_len))
    settings = dict(skip_from=TINY.model.skip_from, n_head_layers=TINY.model.n_head_layers)
    model = Condenser.from_config(cfg, **settings).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, args.vocab, (args.spans, args.seq_len), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3  # CLS, SEP
    masked = torch.rand(args.spans, args.seq_len, generator=g) < 0.15
    masked[:, 0] = masked[:, -1] = False
    masked[:, 1] = True  # at least one masked token per span
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    batch = {"input_ids": ids.masked_fill(masked, 4), "attention_mask": torch.ones_like(ids), "labels": labels}
    batch = {k: v.to(device) for k, v in batch.items()}
    chunk = None if args.chunk == "none" else int(args.chunk)

    def update() -> dict:
        metrics = cocondenser_step(model, batch, chunk_size=chunk)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return metrics

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        mem_before = torch.cuda.memory_allocated()
    for _ in range(args.warmup):
        update()
    times = []
    for _ in range(args.steps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        metrics = update()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    out = {
        "device": device,
        "threads": torch.get_num_threads(),
        "seconds_per_update": min(times),
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024,
        "loss": metrics["loss"],
    }
    if device == "cuda":
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        out["cuda_growth_mb"] = (torch.cuda.max_memory_allocated() - mem_before) / 2**20
    queue.put(out)


def run_setting(ctx, args: argparse.Namespace, spans: int, chunk: str) -> dict:
    steps = args.steps if spans <= 64 else 1
    warmup = 1 if spans <= 64 else 0
    params = dict(spans=spans, chunk=chunk, seq_len=args.seq_len, vocab=args.vocab, steps=steps,
                  warmup=warmup, threads=args.threads, cpu=args.cpu)
    queue = ctx.Queue()
    proc = ctx.Process(target=worker, args=(params, queue))
    t = time.perf_counter()
    proc.start()
    proc.join()
    if proc.exitcode != 0 or queue.empty():
        raise RuntimeError(f"setting spans={spans} chunk={chunk} failed (exit code {proc.exitcode})")
    result = queue.get()
    result["wall"] = time.perf_counter() - t
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="16..256 spans of 64 tokens")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="spans per batch (default 16 64 256 1024)")
    p.add_argument("--chunk-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=None, help="tokens per span incl. CLS/SEP (default 128; 64 with --quick)")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--steps", type=int, default=3, help="timed updates for small batches (1 above 64 spans)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per run (0 = torch's default)")
    p.add_argument("--budget", type=float, default=180.0, help="seconds; settings that would overrun are skipped")
    p.add_argument("--cpu", action="store_true", help="stay on CPU even if CUDA is available")
    args = p.parse_args()
    if args.seq_len is None:
        args.seq_len = 64 if args.quick else 128
    # A fresh process per setting, so each has its own memory high-water mark. Forked from a
    # parent that has imported torch and transformers (but computed nothing, so no thread pool
    # or CUDA context is copied), a child starts in well under a second.
    if "fork" in mp.get_all_start_methods():
        ctx = mp.get_context("fork")
        import torch  # noqa: F401

        import condenser_lite.modeling.condenser  # noqa: F401
        import condenser_lite.modeling.gradcache  # noqa: F401
    else:
        ctx = mp.get_context("spawn")
    sizes = args.sizes or ([16, 64, 256] if args.quick else [16, 64, 256, 1024])
    if args.quick:
        args.budget = min(args.budget, 60.0)
    chunk = str(args.chunk_size)

    start = time.perf_counter()
    rows, last = [], {}  # last: setting -> (spans, seconds per update) for extrapolation
    for spans in sizes:
        row = {"spans": spans}
        for name, c in (("cache", chunk), ("plain", "none")):  # the cache first: its memory curve is the point
            prev = last.get(name)
            predicted = None
            if prev is not None:
                per_update = prev[1] * spans / prev[0]
                predicted = per_update * (args.steps + 1 if spans <= 64 else 1) + 2  # + process start-up
            if predicted is not None and time.perf_counter() - start + predicted > args.budget:
                row[name] = None
                continue
            row[name] = run_setting(ctx, args, spans, c)
            last[name] = (spans, row[name]["seconds_per_update"])
        rows.append(row)

    first = next(r[k] for r in rows for k in ("plain", "cache") if r[k])
    mem_key = "cuda" if first["device"] == "cuda" else "rss"
    print(f"Condenser tiny config (4 layers, hidden 128, vocab {args.vocab}, head 2 layers), "
          f"{args.seq_len} tokens per span, chunk size {chunk}, device {first['device']}, "
          f"{first['threads']} torch threads; seconds per update = forward + backward + AdamW (best of timed runs)")
    unit = "CUDA max_memory_allocated" if mem_key == "cuda" else "RSS high-water"
    print(f"memory: {unit}, MB, total (growth during the updates)")
    header = f"{'spans':>6} | {'plain s/upd':>11} | {'cache s/upd':>11} | {'cache/plain':>11} | {'plain mem':>16} | {'cache mem':>16}"
    print(header)
    print("-" * len(header))

    def mem(r):
        return f"{r[mem_key + '_peak_mb']:7.0f} ({r[mem_key + '_growth_mb']:5.0f})" if r else f"{'skipped':>16}"

    for r in rows:
        a, b = r["plain"], r["cache"]
        ta = f"{a['seconds_per_update']:11.3f}" if a else f"{'skipped':>11}"
        tb = (f"{b['seconds_per_update']:10.3f}" + ("*" if r["spans"] <= args.chunk_size else " ")) if b \
            else f"{'skipped':>11}"
        ratio = f"{b['seconds_per_update'] / a['seconds_per_update']:11.2f}" if a and b else f"{'':>11}"
        print(f"{r['spans']:>6} | {ta} | {tb} | {ratio} | {mem(a):>16} | {mem(b):>16}")
    print("* batch <= chunk size: the cached step is the plain step (one forward/backward)")
    print(f"total wall time {time.perf_counter() - start:.0f} s (budget {args.budget:.0f} s)")


if __name__ == "__main__":
    main()
