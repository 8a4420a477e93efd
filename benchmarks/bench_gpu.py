"""Full-size code path on a GPU: coCondenser step with/without the gradient cache, retriever
fine-tuning, encoding and FAISS search on SciFact. Every ratio is against a baseline measured
in the same run.

    python benchmarks/bench_gpu.py                      # BERT-base-sized, bf16, CUDA, both parts
    python benchmarks/bench_gpu.py --part gradcache --sizes 64 256 1024 2048 4096 --chunks 64 128
    python benchmarks/bench_gpu.py --part retrieval --ft-steps 100
    python benchmarks/bench_gpu.py --part none --exact-spans 512 --chunks 64 128   # cache vs plain loss/gradient
    python benchmarks/bench_gpu.py --size tiny --device cpu --dtype fp32 --sizes 8 16 --chunks 4 --ft-steps 3 --quick  # smoke test

Part 1 (gradcache): ``gradcache.cocondenser_step`` + AdamW on random 128-token spans, with the
gradient cache (``chunk_size``) vs the plain full-batch step; seconds per update and peak
``torch.cuda.max_memory_allocated``. A plain step that runs out of memory is reported as OOM.
Part 2 (retrieval): ``finetune_retriever`` with the msmarco preset's batch shape (8 queries x 8
passages, 32/128 tokens) vs a hand-written loop over the same batches; ``encode_corpus`` over
the SciFact corpus vs a plain AutoModel loop; ``search`` (FAISS flat IP); ``evaluate_retriever``
end to end. Weights are random (the Hub is not needed), so only speed and memory mean anything.
The retrieval tokenizer is a WordPiece trained on the SciFact passages (``--vocab`` pieces).
``--exact-spans N`` first compares one step's loss and gradient, plain vs cache, on this device.
Part 2's code is in ``gpu_retrieval.py`` beside this script.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from gpu_common import SIZES, bert_config, free, model_shape, peak_mb, print_table, sync  # noqa: E402
from gpu_retrieval import bench_retrieval  # noqa: E402


# ---- part 1: coCondenser step ------------------------------------------------------------


def span_batch(n: int, seq_len: int, vocab: int, device: str) -> dict:
    """Random spans as SpanPairCollator would give them: CLS ... SEP, 15% masked."""
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(5, vocab, (n, seq_len), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    masked = torch.rand(n, seq_len, generator=g) < 0.15
    masked[:, 0] = masked[:, -1] = False
    masked[:, 1] = True
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    batch = {"input_ids": ids.masked_fill(masked, 4), "attention_mask": torch.ones_like(ids), "labels": labels}
    return {k: v.to(device) for k, v in batch.items()}


def bench_gradcache(args) -> None:
    from condenser_lite.modeling.condenser import Condenser
    from condenser_lite.modeling.gradcache import cocondenser_step
    from condenser_lite.training.prepare import make_accelerator

    dev = args.device
    cfg = bert_config(args, args.vocab)
    shape = model_shape(args)
    skip = shape.skip_from
    torch.manual_seed(0)
    model = Condenser.from_config(cfg, skip_from=skip, n_head_layers=shape.n_head_layers).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    # The library's mixed precision: accelerate autocast per forward, fp32 master weights.
    acc = make_accelerator("bf16" if args.dtype == "bf16" else "no")
    n_params = sum(p.numel() for p in model.parameters())

    def update(batch, chunk):
        m = cocondenser_step(model, batch, accelerator=acc, chunk_size=chunk)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return m

    update(span_batch(4, args.seq_len, args.vocab, dev), None)  # creates AdamW state before measuring
    free(dev)
    base_mb = torch.cuda.memory_allocated() / 2**20 if dev == "cuda" else float("nan")
    print(f"\n[gradcache] Condenser {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, skip_from {skip}, "
          f"2 head layers, vocab {args.vocab}, {n_params / 1e6:.1f}M parameters, attention "
          f"{cfg._attn_implementation}, {args.dtype}, {args.seq_len} tokens/span, device {dev}; "
          f"weights + AdamW state {base_mb:.0f} MB", flush=True)

    results = {}  # (spans, chunk or None) -> dict or "OOM"
    for n in args.sizes:
        batch = span_batch(n, args.seq_len, args.vocab, dev)
        for chunk in [None, *args.chunks]:
            if chunk is not None and chunk >= n:
                continue  # the cached step would be the plain step
            free(dev)
            try:
                times = []
                for i in range(args.warmup + args.steps):
                    sync(dev)
                    t = time.perf_counter()
                    m = update(batch, chunk)
                    sync(dev)
                    if i >= args.warmup:
                        times.append(time.perf_counter() - t)
                r = dict(s=min(times), mem=peak_mb(dev), loss=m["loss"])
            except torch.cuda.OutOfMemoryError:
                opt.zero_grad(set_to_none=True)
                r = "OOM"
            results[n, chunk] = r
            free(dev)
            desc = r if r == "OOM" else f"{r['s']:.3f} s/update, peak {r['mem']:.0f} MB, loss {r['loss']:.3f}"
            print(f"  spans {n:5d} chunk {str(chunk):>4}: {desc}", flush=True)
        del batch

    header = ["spans", "plain s/upd", "plain spans/s", "plain peak MB"]
    for c in args.chunks:
        header += [f"c{c} s/upd", f"c{c} spans/s", f"c{c} peak MB", f"c{c}/plain time", f"c{c}/plain mem"]
    rows = []
    for n in args.sizes:
        p = results.get((n, None))
        row = [str(n)] + (["OOM"] * 3 if p == "OOM" else [f"{p['s']:.3f}", f"{n / p['s']:,.0f}", f"{p['mem']:,.0f}"])
        for c in args.chunks:
            r = results.get((n, c))
            if r is None:
                row += ["(=plain)"] + [""] * 4
            elif r == "OOM":
                row += ["OOM"] * 3 + [""] * 2
            else:
                ok = isinstance(p, dict)
                row += [f"{r['s']:.3f}", f"{n / r['s']:,.0f}", f"{r['mem']:,.0f}",
                        f"{r['s'] / p['s']:.2f}x" if ok else "-", f"{r['mem'] / p['mem']:.2f}x" if ok else "-"]
        rows.append(row)
    print_table(f"coCondenser update (cocondenser_step + AdamW), best of {args.steps} after {args.warmup} warm-up; "
                f"peak = max_memory_allocated incl. {base_mb:.0f} MB weights + AdamW state", header, rows)
    del model, opt
    free(dev)


def check_exact(args) -> None:
    """Loss and gradient of one step, plain vs gradient cache, from the same weights, dropout off
    (the cache replays dropout per chunk, which a full-batch step draws differently)."""
    from condenser_lite.modeling.condenser import Condenser
    from condenser_lite.modeling.gradcache import cocondenser_step
    from condenser_lite.training.prepare import make_accelerator

    dev, n = args.device, args.exact_spans
    cfg = bert_config(args, args.vocab)
    torch.manual_seed(0)
    shape = model_shape(args)
    model = Condenser.from_config(cfg, skip_from=shape.skip_from, n_head_layers=shape.n_head_layers).to(dev).eval()
    batch = span_batch(n, args.seq_len, args.vocab, dev)
    rows = []
    for dtype in ("fp32", "bf16"):
        acc = make_accelerator("bf16" if dtype == "bf16" else "no")
        grads = {}
        for chunk in (None, *args.chunks):
            if chunk is not None and chunk >= n:
                continue
            model.zero_grad(set_to_none=True)
            m = cocondenser_step(model, batch, accelerator=acc, chunk_size=chunk)
            grads[chunk] = (m["loss"], torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        loss0, g0 = grads.pop(None)
        for chunk, (loss, g) in grads.items():
            rel = float((g - g0).norm() / g0.norm())
            rows.append([dtype, str(n), str(chunk), f"{loss0:.6f}", f"{loss:.6f}", f"{abs(loss - loss0):.1e}", f"{rel:.1e}"])
    print_table("Gradient cache exactness on this device (one step, same weights, dropout off; "
                "fp32 with TF32 matmuls off)", ["precision", "spans", "chunk", "plain loss", "cache loss",
                                                  "|diff|", "rel. grad diff"], rows)
    del model
    free(dev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["gradcache", "retrieval", "all", "none"], default="all")
    ap.add_argument("--exact-spans", type=int, default=0, help="first check cache vs plain loss/gradient at this batch")
    ap.add_argument("--tok-parallel", choices=["true", "false"], default="true",
                    help="TOKENIZERS_PARALLELISM (the Rust tokenizer's threads)")
    ap.add_argument("--size", choices=sorted(SIZES), default="base", help="the model of the paper preset (BERT-base-sized) or of the tiny preset")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--vocab", type=int, default=30522, help="vocab size (gradcache); WordPiece target (retrieval)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 2048, 4096], help="spans per batch")
    ap.add_argument("--chunks", type=int, nargs="+", default=[128], help="gradient-cache chunk sizes")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2, help="timed updates per setting (best is reported)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ft-steps", type=int, default=100, help="fine-tuning steps (msmarco batch shape)")
    ap.add_argument("--nq-steps", type=int, default=0, help="also fine-tune with the nq preset (gradient cache)")
    ap.add_argument("--max-len", type=int, default=128, help="passage tokens for encoding")
    ap.add_argument("--batch", type=int, default=256, help="encoding batch size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="retrieval on a 300-passage slice (smoke test)")
    args = ap.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = args.tok_parallel

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 runs: TF32 matmuls, as a trainer would
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
    else:
        print(f"device: cpu, torch {torch.__version__}, {torch.get_num_threads()} threads")
    t = time.perf_counter()
    if args.exact_spans:
        torch.backends.cuda.matmul.allow_tf32 = False
        check_exact(args)
        torch.backends.cuda.matmul.allow_tf32 = True
    if args.part in ("gradcache", "all"):
        bench_gradcache(args)
    if args.part in ("retrieval", "all"):
        bench_retrieval(args)
    print(f"\ntotal wall time {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
