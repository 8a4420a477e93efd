"""Pre-training throughput on the CPU, every figure against one baseline measured in this run:
BertForMaskedLM with the transformers Trainer and its MLM collator, in fp32 (what most users
reach for: logits over the whole vocabulary at every position).

Part 1, one tiny config (``--batch`` full blocks of ``--max-len`` tokens, fp32), tokens/s of
  1. Condenser pre-training with our loop (backbone + 2 head layers, two MLM losses),
  2. plain MLM (BertMLM) with our loop,
  3. the baseline,
and the Condenser / plain-MLM step-time ratio next to (L + n_head_layers) / L, what the extra head
layers alone would explain.

Part 2, the ``--preset`` (default ``small``) preset's stages as ``pretrain`` runs them
(``presets.stage_config(preset, method)``: the shape, batch, corpus, masking and step function of
each of mlm, condenser and cocondenser, in the precision ``mixed_precision='auto'`` resolves to on
this CPU, ``devices.resolve_precision``), tokens/s (non-padding tokens) and the ratio to the
baseline's. The coCondenser stage starts its head fresh (the real one continues a trained head:
the same computation).

Every run times steps 2..N (step 1 holds the start-up). The corpus has a few hundred full-length
blocks; a run of more steps than they fill cycles them (the script says how many there are).
The default of 20 steps is where the ratios settle: in three repeats on a 2-core CPU (one
thread, ``--clock cpu``, other work running) the Condenser / MLM ratio spread over 0.10 at 20
steps and 0.29 at 4, part 1's ratios to the baseline over 0.03 and 0.17 (part 2's, about 2.5-3.5x,
over 0.17-0.46 at 20 steps); a fourth run gave a Condenser / MLM ratio 0.11 above the three, so a
busy machine adds about as much again. Wall-clock ratios on a busy machine are noise whatever the
count: use ``--clock cpu --threads 1`` there.

    python benchmarks/bench_pretrain.py [--steps 20] [--batch 32] [--max-len 128] [--threads 2]
    python benchmarks/bench_pretrain.py --steps 3 --stages none    # part 1 only, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a CPU benchmark: our loop would otherwise pick a GPU

METHODS = ("mlm", "condenser", "cocondenser")


def full_blocks(max_len: int, n_rows: int):
    """``n_rows`` full-length blocks of the scaled-down corpus (each method then sees the same
    tokens per step), the corpus's blocks repeated in order where it has fewer; with their count."""
    from condenser_lite.data.packing import pack_blocks
    from condenser_lite.data.sources import load_pretraining_corpus
    from condenser_lite.data.tokenizer import tiny_tokenizer

    tok = tiny_tokenizer()
    blocks = pack_blocks(load_pretraining_corpus(), tok, max_len=max_len, short_seq_prob=0.0)
    blocks = blocks.filter(lambda r: len(r["input_ids"]) == max_len)
    n = len(blocks)
    if n == 0:
        raise SystemExit(f"the corpus has no block of {max_len} tokens: lower --max-len")
    return blocks.select([i % n for i in range(n_rows)]), tok, n


CLOCKS = {"wall": "elapsed", "cpu": "cpu"}  # --clock -> the training log's key


def timed(log_dir: str, clock: str) -> tuple[float, float | None]:
    """Seconds per step over steps 2..N of a training log on ``clock``, and its mean ``tokens``
    per step (logged by ``pretraining.counted``; None where the run did not count them)."""
    log = [json.loads(x) for x in open(os.path.join(log_dir, "log.jsonl"))]
    key = CLOCKS[clock]
    seconds = (log[-1][key] - log[0][key]) / (len(log) - 1)
    tokens = [r["tokens"] for r in log[1:] if "tokens" in r]
    return seconds, (sum(tokens) / len(tokens) if tokens else None)


def our_loop(model, blocks, tok, steps: int, batch: int, clock: str) -> float:
    """Seconds per step of ``model`` on ``blocks`` with our loop, in fp32."""
    from condenser_lite.modeling.masking import MLMCollator
    from condenser_lite.training.loop import TrainConfig, train

    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(max_steps=steps, batch_size=batch, lr=1e-4, epochs=100)
        train(model, blocks, cfg, output_dir=d, collate_fn=MLMCollator(tok), progress=False)
        return timed(d, clock)[0]


def hf_trainer(config, blocks, tok, steps: int, batch: int, clock: str) -> float:
    """Seconds per step of BertForMaskedLM with the transformers Trainer (the baseline)."""
    from transformers import (
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter() if clock == "wall" else time.process_time())

    model = BertForMaskedLM(config)
    with tempfile.TemporaryDirectory() as d:
        args = TrainingArguments(output_dir=d, max_steps=steps, per_device_train_batch_size=batch, learning_rate=1e-4,
                                 use_cpu=True, report_to=[], logging_strategy="no", save_strategy="no",
                                 disable_tqdm=True, dataloader_num_workers=0, dataloader_drop_last=True)
        collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
        Trainer(model=model, args=args, train_dataset=blocks.remove_columns(["doc_index"]), data_collator=collator,
                callbacks=[Clock()]).train()
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def preset_stage(preset: str, method: str, steps: int, clock: str) -> dict:
    """One stage of ``preset`` as ``pretraining.pretrain`` trains it, for ``steps`` steps, without
    its held-out evaluation or checkpoints: seconds and non-padding tokens per step."""
    from condenser_lite.modeling.masking import MLMCollator
    from condenser_lite.reproduction.configuration.presets import stage_config
    from condenser_lite.training.loop import train
    from condenser_lite.training.pretraining import build_model, counted, stage_training
    from condenser_lite.training.stage_cache import get_tokenizer
    from condenser_lite.utils.devices import resolve_precision

    cfg = stage_config(preset, method).replace(max_steps=steps, save_every=None)
    if method == "cocondenser":
        cfg = cfg.replace(head="random")  # from scratch there is no trained head to load
    tok = get_tokenizer(cfg)
    model = build_model(cfg, tok)
    collator = MLMCollator(tok, mlm_probability=cfg.mlm_probability, head_mlm_probability=cfg.head_mlm_probability)
    data, collate, step_fn = stage_training(cfg, tok, collator)
    rows = (f"{cfg.batch_size} documents x 2 spans of <= {cfg.model.max_len} tokens" if method == "cocondenser"
            else f"{cfg.batch_size} blocks of <= {cfg.model.max_len} tokens")
    with tempfile.TemporaryDirectory() as d:
        train(model, data, cfg, output_dir=d, collate_fn=collate, step_fn=counted(step_fn, cfg.grad_accum),
              progress=False)
        seconds, tokens = timed(d, clock)
    return {"seconds": seconds, "tokens": tokens, "precision": resolve_precision(cfg.mixed_precision),
            "rows": rows, "config": cfg}


def precision_name(mp: str) -> str:
    return "fp32" if mp == "no" else mp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="steps per run; steps 2..N are timed (default 20)")
    ap.add_argument("--batch", type=int, default=32, help="part 1: blocks per step")
    ap.add_argument("--max-len", type=int, default=128, help="part 1: tokens per block")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=CLOCKS, default="wall",
                    help="wall: seconds as they pass; cpu: this process's CPU seconds, steadier on a machine "
                         "busy with other work (with --threads 1, where no thread waits for another)")
    ap.add_argument("--preset", default="small", help="part 2: the preset whose stages are timed (default small)")
    ap.add_argument("--stages", default=",".join(METHODS),
                    help=f"part 2: comma-separated stages of the preset to time, of {', '.join(METHODS)}; "
                         "'none' for part 1 only")
    a = ap.parse_args()
    stages = [] if a.stages == "none" else [s.strip() for s in a.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in METHODS]
    if unknown or a.steps < 2:
        ap.error(f"--stages: unknown {unknown}; choose from {METHODS} or 'none'" if unknown
                 else "--steps must be >= 2 (the first step is not timed)")
    import datasets
    import torch

    from condenser_lite.modeling.condenser import BertMLM, Condenser
    from condenser_lite.reproduction.configuration.presets import get_preset

    datasets.disable_progress_bars()
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = a.batch * a.steps
    blocks, tok, n_blocks = full_blocks(a.max_len, rows)
    config = get_preset("tiny").model.bert_config(vocab_size=len(tok), max_position_embeddings=a.max_len)
    torch.manual_seed(0)
    t_condenser = our_loop(Condenser.from_config(config, skip_from=2, n_head_layers=2), blocks, tok, a.steps,
                           a.batch, a.clock)
    torch.manual_seed(0)
    t_mlm = our_loop(BertMLM.from_config(config), blocks, tok, a.steps, a.batch, a.clock)
    t_hf = hf_trainer(config, blocks, tok, a.steps, a.batch, a.clock)
    staged = {m: preset_stage(a.preset, m, a.steps, a.clock) for m in stages}

    tokens = a.batch * a.max_len
    base = tokens / t_hf  # the baseline's tokens/s
    L = config.num_hidden_layers
    cycled = f", cycled {rows / n_blocks:.1f} times" if rows > n_blocks else ""
    print(f"tiny BERT: {L} layers, hidden {config.hidden_size}, vocab {config.vocab_size}; "
          f"batch {a.batch} x {a.max_len} tokens; {torch.get_num_threads()} threads; device cpu; {a.clock} clock; "
          f"{a.steps} steps per run (2..{a.steps} timed); the corpus has {n_blocks} full {a.max_len}-token blocks "
          f"({rows} used{cycled})")
    print(f"{'run':52s} {'precision':>9s} {'s/step':>8s} {'tokens/s':>9s} {'vs Trainer':>10s}")
    for name, t in [("Condenser, our loop (masked-only logits)", t_condenser),
                    ("plain MLM (BertMLM), our loop", t_mlm),
                    ("BertForMaskedLM + transformers Trainer (baseline)", t_hf)]:
        print(f"{name:52s} {'fp32':>9s} {t:8.3f} {tokens / t:9.0f} {tokens / t / base:9.2f}x")
    print(f"Condenser / plain MLM step time: {t_condenser / t_mlm:.2f}  "
          f"(extra layers alone: (L+2)/L = {(L + 2) / L:.2f}; the rest is the second MLM projection)")
    if staged:
        cfg = next(iter(staged.values()))["config"]
        print(f"\n{a.preset} preset's stages (pretrain's data, masking and step; no held-out evaluation): "
              f"{cfg.model.num_hidden_layers} layers, hidden {cfg.model.hidden_size}, Condenser head from layer "
              f"{cfg.model.skip_from} through {cfg.model.n_head_layers}; mixed_precision={cfg.mixed_precision!r}; "
              "tokens/s against the baseline's")
        for method, r in staged.items():
            name = f"{method}: {r['rows']}"
            print(f"{name:52s} {precision_name(r['precision']):>9s} {r['seconds']:8.3f} "
                  f"{r['tokens'] / r['seconds']:9.0f} {r['tokens'] / r['seconds'] / base:9.2f}x")


if __name__ == "__main__":
    main()
