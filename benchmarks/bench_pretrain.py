"""Pre-training throughput on one tiny config, all measured in this run.

Prints tokens/s of
  1. Condenser pre-training with our loop (backbone + 2 head layers, two MLM losses),
  2. plain MLM (BertMLM) with our loop,
  3. BertForMaskedLM with the transformers Trainer and its MLM collator (the baseline most users
     reach for: logits over the whole vocabulary at every position),
and the Condenser / plain-MLM step-time ratio next to (L + n_head_layers) / L, what the extra head
layers alone would explain.

    python benchmarks/bench_pretrain.py [--steps 8] [--batch 32] [--threads 2]
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


def blocks_and_tokenizer(max_len: int, n_blocks: int):
    from condenser_lite.data.packing import pack_blocks
    from condenser_lite.data.sources import load_pretraining_corpus
    from condenser_lite.data.tokenizer import tiny_tokenizer

    tok = tiny_tokenizer()
    corpus = load_pretraining_corpus()
    blocks = pack_blocks(corpus, tok, max_len=max_len, short_seq_prob=0.0)
    # full-length blocks only, so every method sees the same number of tokens per step
    blocks = blocks.filter(lambda r: len(r["input_ids"]) == max_len).select(range(n_blocks))
    return blocks, tok


def our_loop(model, blocks, tok, steps: int, batch: int) -> float:
    """Seconds per step (steps 2..N, so start-up is excluded)."""
    from condenser_lite.modeling.masking import MLMCollator
    from condenser_lite.training.loop import TrainConfig, train

    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(output_dir=d, max_steps=steps, batch_size=batch, lr=1e-4, progress=False, epochs=100)
        train(model, blocks, cfg, collate_fn=MLMCollator(tok))
        log = [json.loads(x) for x in open(os.path.join(d, "log.jsonl"))]
    return (log[-1]["elapsed"] - log[0]["elapsed"]) / (len(log) - 1)


def hf_trainer(config, blocks, tok, steps: int, batch: int) -> float:
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
            stamps.append(time.perf_counter())

    model = BertForMaskedLM(config)
    with tempfile.TemporaryDirectory() as d:
        args = TrainingArguments(output_dir=d, max_steps=steps, per_device_train_batch_size=batch, learning_rate=1e-4,
                                 use_cpu=True, report_to=[], logging_strategy="no", save_strategy="no",
                                 disable_tqdm=True, dataloader_num_workers=0)
        collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
        Trainer(model=model, args=args, train_dataset=blocks.remove_columns(["doc_index"]), data_collator=collator,
                callbacks=[Clock()]).train()
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    import datasets
    import torch

    from condenser_lite.modeling.condenser import BertMLM, Condenser, tiny_bert_config

    datasets.disable_progress_bars()
    if a.threads:
        torch.set_num_threads(a.threads)
    blocks, tok = blocks_and_tokenizer(a.max_len, a.batch * (a.steps + 1))
    config = tiny_bert_config(vocab_size=len(tok), max_position_embeddings=a.max_len)
    tokens = a.batch * a.max_len
    torch.manual_seed(0)
    t_condenser = our_loop(Condenser.from_config(config, skip_from=2, n_head_layers=2), blocks, tok, a.steps, a.batch)
    torch.manual_seed(0)
    t_mlm = our_loop(BertMLM.from_config(config), blocks, tok, a.steps, a.batch)
    t_hf = hf_trainer(config, blocks, tok, a.steps, a.batch)
    L = config.num_hidden_layers
    print(f"tiny BERT: {L} layers, hidden {config.hidden_size}, vocab {config.vocab_size}; "
          f"batch {a.batch} x {a.max_len} tokens; {torch.get_num_threads()} threads; device cpu")
    print(f"{'run':44s} {'s/step':>8s} {'tokens/s':>9s} {'vs Trainer':>10s}")
    for name, t in [("Condenser, our loop (masked-only logits)", t_condenser),
                    ("plain MLM (BertMLM), our loop", t_mlm),
                    ("BertForMaskedLM + transformers Trainer", t_hf)]:
        print(f"{name:44s} {t:8.3f} {tokens / t:9.0f} {t_hf / t:9.2f}x")
    print(f"Condenser / plain MLM step time: {t_condenser / t_mlm:.2f}  "
          f"(extra layers alone: (L+2)/L = {(L + 2) / L:.2f}; the rest is the second MLM projection)")


if __name__ == "__main__":
    main()
