"""Choosing the scaled-down world: the pre-training study behind the book's `small` budget.

One command reproduces every number of the study page (`notebooks/09_study.md`) and writes
`results/study.json` (summarised curves plus provenance):

    python benchmarks/pretrain_study.py                      # every part, resumable
    python benchmarks/pretrain_study.py --only throughput    # or precision, sweep, long, condenser

Parts
  throughput  CPU cost of one MLM training step of our loop (`condenser.BertMLM`, masked-only logits,
              `loop.train`) for precision (fp32 / bf16 autocast through oneDNN), attention
              kernel (sdpa / eager), dropout, `torch.compile`, batch shape at equal tokens, one
              process with 2 threads against two with 1, and the transformers `Trainer` with
              `BertForMaskedLM` + `DataCollatorForLanguageModeling` on the same blocks; plus a
              retrieval fine-tuning step and encoding throughput per candidate shape (to size the
              budget). Variants are interleaved and repeated; CPU seconds per step are the
              measure (robust to other load), wall seconds are kept too.
  precision   what bf16 autocast is worth on this CPU and what it costs on one without bf16 units:
              the small preset's stage-1 update (one thread) in fp32 and bf16, and the choice of
              `mixed_precision="auto"` (`devices.cpu_precision`), natively and under an emulated
              AVX2-only CPU (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`), each in a process
              of its own (the variables are read when torch starts).
  sweep       held-out MLM loss against CPU seconds, one factor at a time from a baseline, every
              run with the same CPU budget (two 1-thread processes in parallel).
  long        longer runs of the combined recipe(s): the stage-1 checkpoints of part `condenser`.
  condenser   Condenser continuations of a long run for several splits (`skip_from`,
              `n_head_layers`), with the [CLS]-swap gap, the [CLS] cosine and both MLM losses
              logged as they train; an MLM-only continuation at the same steps as the control; a
              short coCondenser continuation on SciFact.

Held-out text: `packing.heldout_split` keeps 5% of the general corpus's documents (by a
hash of the document id) out of training; the evaluation set is 512 of their blocks with fixed
masks (`packing.mlm_eval_batches`). Every loss is reported beside the unigram entropy of
the same masked tokens (`gauges.unigram_entropy`). Nothing here looks at retrieval quality.

Every finished run is cached under `$CONDENSER_LITE_CACHE/study/<part>/<hash of its settings>/`
(`result.json`, written by the library's `cache.compute_once`, so two processes never train one
run), and training runs resume from their last checkpoint, so an interrupted study picks up
where it stopped. Runs are keyed by their settings, so changing a setting starts a new run and
keeps the run of the earlier settings beside it. FLOPs (`accounting.stage_flops`) and provenance (`results.machine`,
`results.environment`, `results.git`) come from the library too.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HELDOUT_FRACTION = 0.05
EVAL_BLOCKS = 512
EVAL_EVERY_FRACTION = 1 / 6  # curve points per run (plus the start and the end)
STUDY_VERSION = 1
LATER_FIELDS = {"mask_rate": 0.15}


# ---------------------------------------------------------------------------------------------
# Settings of one pre-training run
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One pre-training run: a model shape, a recipe and a CPU-seconds budget.

    ``method`` is ``mlm`` (from scratch, or continuing ``init``), ``condenser`` (a fresh head on
    ``init``'s backbone) or ``cocondenser`` (continuing a Condenser run, head loaded, on SciFact).
    ``init`` names another run (its ``key``) whose final weights this one starts from.
    ``steps`` fixes the step count instead of deriving it from ``cpu_budget``.
    """

    layers: int = 4
    hidden: int = 128
    heads: int = 4
    vocab: int = 8192
    max_len: int = 64
    batch: int = 32
    lr: float = 1e-3
    warmup: float = 0.1
    schedule: str = "linear"
    dropout: float = 0.1
    precision: str = "bf16"
    attn: str = "eager"
    cpu_budget: float = 240.0
    steps: int | None = None
    seed: int = 0
    method: str = "mlm"
    init: str | None = None
    skip_from: int = 0
    n_head_layers: int = 0
    mask_rate: float = 0.15  # training masks only; the held-out set keeps 15%

    def key(self) -> str:
        # Not `cache.settings_hash`: this hashes "v1:" + the JSON (the version outside the JSON),
        # which settings_hash cannot reproduce; the committed results name their runs by this key,
        # so `--collect` finds the finished runs only while it stays as it is.
        settings = dataclasses.asdict(self)
        for name, default in LATER_FIELDS.items():  # fields added later: absent at their default,
            if settings[name] == default:           # so earlier runs keep their cache keys
                del settings[name]
        blob = json.dumps(settings, sort_keys=True)
        return hashlib.sha256(f"v{STUDY_VERSION}:{blob}".encode()).hexdigest()[:12]

    def replace(self, **changes) -> "Run":
        return dataclasses.replace(self, **changes)

    @property
    def shape(self) -> str:
        return f"{self.layers}L/{self.hidden}H"


BASE = Run()  # the tiny preset's shape and data recipe, with the throughput levers of part A


def sweep_runs(budget: float, extended: bool = False) -> dict[str, Run]:
    """One factor at a time from BASE (every run gets the same CPU budget); `extended` adds
    five more (2 and 8 layers, a constant rate, lr 4e-3, batch 64)."""
    b = BASE.replace(cpu_budget=budget)
    runs = {  # in order of priority: an interrupted sweep has the most telling runs first
        "base (4L/128H, T64, B32, lr 1e-3, drop 0.1, bf16)": b,
        "tiny preset: fp32 + sdpa": b.replace(precision="no", attn="sdpa"),
        "dropout 0": b.replace(dropout=0.0),
        "4L/256H": b.replace(hidden=256),
        "6L/256H": b.replace(layers=6, hidden=256),
        "T128, B16 (same tokens/step)": b.replace(max_len=128, batch=16),
    }
    # Round 2: one factor at a time from the best of round 1 (base + dropout 0).
    b2 = b.replace(dropout=0.0)
    runs.update({
        "dropout 0 + lr 2e-3": b2.replace(lr=2e-3),
        "dropout 0 + lr 4e-3": b2.replace(lr=4e-3),
        "dropout 0 + mask 30%": b2.replace(mask_rate=0.3),
        "dropout 0 + vocab 4096": b2.replace(vocab=4096),
        "dropout 0 + batch 128, lr 2e-3": b2.replace(batch=128, lr=2e-3),
        "dropout 0 + one-cycle (warm-up 50%)": b2.replace(warmup=0.5),
    })
    more = {
        "8L/256H": b.replace(layers=8, hidden=256),
        "2L/128H": b.replace(layers=2),
        "constant lr after warm-up": b.replace(schedule="constant"),
        "lr 2e-3": b.replace(lr=2e-3),
        "vocab 4096": b.replace(vocab=4096),
        "batch 128, lr 2e-3": b.replace(batch=128, lr=2e-3),
        "one-cycle (warm-up 50%)": b.replace(warmup=0.5),
        "batch 64": b.replace(batch=64),
    }
    return {**runs, **more} if extended else runs


# ---------------------------------------------------------------------------------------------
# Data: tokenizer, training blocks, held-out evaluation set (one copy per process and setting)
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def study_data(vocab: int, max_len: int) -> dict:
    import datasets

    from condenser_lite.data.packing import heldout_split, mlm_eval_batches, pack_blocks
    from condenser_lite.data.sources import load_pretraining_corpus
    from condenser_lite.data.tokenizer import tiny_tokenizer
    from condenser_lite.modeling.gauges import unigram_entropy
    from condenser_lite.modeling.masking import MLMCollator

    datasets.disable_progress_bars()
    tok = tiny_tokenizer(vocab_size=vocab)
    train_corpus, held_corpus = heldout_split(load_pretraining_corpus(), fraction=HELDOUT_FRACTION)
    blocks = pack_blocks(train_corpus, tok, max_len=max_len, short_seq_prob=0.1, seed=0).remove_columns("doc_index")
    held = pack_blocks(held_corpus, tok, max_len=max_len, short_seq_prob=0.0, seed=0)
    collator = MLMCollator(tok)
    evalset = mlm_eval_batches(held, collator, n_blocks=EVAL_BLOCKS, batch_size=64, seed=0)
    specials = tok.all_special_ids
    entropy = unigram_entropy(blocks["input_ids"], evalset, vocab_size=len(tok), ignore_ids=specials)
    n_tokens = sum(len(x) for x in blocks["input_ids"])
    return {"tokenizer": tok, "blocks": blocks, "collator": collator, "eval": evalset,
            "unigram_entropy": entropy, "train_tokens": n_tokens, "heldout_sections": len(held_corpus),
            "train_sections": len(train_corpus), "heldout_blocks": len(held),
            "eval_masked_tokens": int(sum(int((b["labels"] != -100).sum()) for b in evalset))}


@functools.lru_cache(maxsize=4)
def full_blocks(vocab: int, max_len: int):
    """Only the full-length training blocks: every throughput step then holds the same tokens."""
    return study_data(vocab, max_len)["blocks"].filter(lambda x: len(x["input_ids"]) == max_len)


def bert_config(run: Run, tok):
    from condenser_lite.modeling.condenser import tiny_bert_config

    cfg = tiny_bert_config(vocab_size=len(tok), hidden_size=run.hidden, num_hidden_layers=run.layers,
                           num_attention_heads=run.heads, intermediate_size=4 * run.hidden,
                           max_position_embeddings=run.max_len, pad_token_id=tok.pad_token_id,
                           hidden_dropout_prob=run.dropout, attention_probs_dropout_prob=run.dropout)
    return cfg


def non_embedding_params(config) -> int:
    from condenser_lite.training.accounting import layer_params

    return config.num_hidden_layers * layer_params(config.hidden_size, config.intermediate_size)


def flops_per_token(config, method: str, max_len: int, head_layers: int = 0) -> float:
    """Training FLOPs per token of full-length blocks: `accounting.stage_flops` of one position
    (T attention pairs, 0.15 masked), times the tokens afterwards as before (the same floats).
    15% also for the `mask 30%` run (30% masked): its committed estimate was made so."""
    from condenser_lite.training.accounting import stage_flops

    shape = {**config.to_dict(), "n_head_layers": head_layers}
    return stage_flops(method, shape, {"positions": 1, "pairs": max_len, "masked": 0.15})


# ---------------------------------------------------------------------------------------------
# Part B/C: one training run with held-out evaluation (runs in a 1-thread worker process)
# ---------------------------------------------------------------------------------------------


def _run_dir(part: str, run: Run) -> Path:
    from condenser_lite.utils.cache import cache_dir

    return cache_dir("study") / part / f"{run.method}-{run.key()}"


def _build_model(run: Run, tok, part: str):
    # Not `pretraining.build_model`: it draws the initial weights from `set_step_seed(seed, 0)`,
    # this from `torch.manual_seed(seed)`, so a run trained anew would start from other weights
    # than its cached twin. The config is the library's (`bert_config`: `tiny_bert_config`).
    import torch

    from condenser_lite.modeling.condenser import BertMLM, Condenser

    torch.manual_seed(run.seed)
    if run.init is None:
        if run.method != "mlm":
            raise ValueError("a Condenser/coCondenser run continues another run: set init")
        model = BertMLM.from_config(bert_config(run, tok))
    else:
        src = Path(run.init)
        if not (src / "config.json").exists():
            raise FileNotFoundError(f"init checkpoint {src} is missing; run its part first")
        if run.method == "mlm":
            model = BertMLM.from_pretrained(src)
        elif run.method == "condenser":
            model = Condenser.from_bert(str(src), skip_from=run.skip_from, n_head_layers=run.n_head_layers)
        else:
            model = Condenser.from_pretrained(src, head="load")
    model.backbone.set_attn_implementation(run.attn)
    return model


def _evaluate(model, data: dict, extra: dict | None) -> dict[str, float]:
    from condenser_lite.modeling.gauges import cls_cosine, cls_swap_gap, heldout_mlm_loss

    out = dict(heldout_mlm_loss(model, data["eval"]))
    out["cls_cosine"] = cls_cosine(model, data["eval"][:2])  # 128 blocks: cheap and stable enough
    if hasattr(model, "head_forward"):
        gap = cls_swap_gap(model, data["eval"])
        out.update(swap_gap=gap["gap"], swap_noise=gap["noise"], swap_shift_spread=gap["shift_spread"])
    if extra is not None:  # the same model on the 64-token evaluation set
        out["mlm_loss_T64"] = heldout_mlm_loss(model, extra["eval"])["mlm_loss"]
    return out


def _step_cost(model, data, run: Run, collate, step_fn=None) -> float:
    """CPU seconds per optimizer step of this run's loop, measured on a throwaway copy."""
    from condenser_lite.training.loop import TrainConfig, train

    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(d, max_steps=7, batch_size=run.batch, lr=run.lr, mixed_precision=run.precision,
                          seed=run.seed + 1000, progress=False)
        hist = train(copy.deepcopy(model), data, cfg, collate_fn=collate, step_fn=step_fn).history
    return (hist[-1]["cpu"] - hist[1]["cpu"]) / (len(hist) - 2)


def run_one(part: str, run: Run) -> dict:
    """Train one run (or reuse it) and return its summary (`result.json`)."""
    from condenser_lite.utils.cache import compute_once

    out = _run_dir(part, run)
    return compute_once(out / "result.json", lambda: _train(part, run, out))


def _train(part: str, run: Run, out: Path) -> dict:
    import torch

    torch.set_num_threads(1)
    from condenser_lite.training.loop import TrainConfig, train

    load_start = [round(x, 2) for x in os.getloadavg()]  # other jobs on the machine slow the wall clock
    data = study_data(run.vocab, run.max_len)
    extra = study_data(run.vocab, 64) if run.max_len != 64 else None
    tok = data["tokenizer"]
    model = _build_model(run, tok, part)
    collate = data["collator"]
    if run.mask_rate != collate.mlm_probability:
        from condenser_lite.modeling.masking import MLMCollator

        collate = MLMCollator(tok, mlm_probability=run.mask_rate)
    step_fn, train_data, tokens_per_step = None, data["blocks"], run.batch * run.max_len
    if run.method == "cocondenser":
        from condenser_lite.modeling.gradcache import cocondenser_step
        from condenser_lite.modeling.spans import SpanPairCollator
        from condenser_lite.training.pretraining_config import StageConfig
        from condenser_lite.training.pretraining_data import span_pairs

        train_data = span_pairs(StageConfig().replace(method="cocondenser", corpus="scifact", max_len=run.max_len,
                                                      min_span=16, seed=run.seed), tok)
        collate = SpanPairCollator(collate)
        step_fn = functools.partial(cocondenser_step, chunk_size=None, mlm_weight=1.0, co_weight=1.0)
        tokens_per_step = 2 * run.batch * run.max_len
    # The step count is fixed once (calibrated on this machine) and kept in plan.json, so a
    # resumed run trains to the same total as the interrupted one.
    plan, state = out / "plan.json", out / "train" / "checkpoint" / "state.json"
    if plan.exists():
        cost, steps = json.loads(plan.read_text())["cost"], json.loads(plan.read_text())["steps"]
    elif state.exists():  # interrupted before plan.json existed: the checkpoint knows its total
        cost, steps = None, json.loads(state.read_text())["run"]["max_steps"]
    else:
        cost = _step_cost(model, train_data, run, collate, step_fn)
        steps = run.steps or max(20, int(run.cpu_budget / cost))
    plan.write_text(json.dumps({"cost": cost, "steps": steps}))
    every = max(1, round(steps * EVAL_EVERY_FRACTION))
    start_eval = _evaluate(model, data, extra)
    cfg = TrainConfig(str(out / "train"), max_steps=steps, batch_size=run.batch, lr=run.lr,
                      warmup_ratio=run.warmup, schedule=run.schedule, mixed_precision=run.precision,
                      seed=run.seed, log_every=max(1, steps // 50), eval_every=every,
                      save_every=max(every, steps // 4), progress=False)
    res = train(model, train_data, cfg, collate_fn=collate, step_fn=step_fn,
                eval_fn=lambda m: _evaluate(m, data, extra))
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    shutil.rmtree(out / "train" / "checkpoint", ignore_errors=True)
    curve = [{"step": 0, "cpu": 0.0, "elapsed": 0.0, "tokens": 0,
              **{f"eval_{k}": round(v, 4) for k, v in start_eval.items()}}]
    train_curve = []
    for r in res.history:
        train_curve.append({"step": r["step"], "cpu": r["cpu"], "loss": round(r["loss"], 4),
                            **({"head_loss": round(r["head_loss"], 4)} if "head_loss" in r else {})})
        if any(k.startswith("eval_") for k in r):
            curve.append({"step": r["step"], "cpu": r["cpu"], "elapsed": r["elapsed"],
                          "tokens": r["step"] * tokens_per_step,
                          **{k: round(v, 4) for k, v in r.items() if k.startswith("eval_")}})
    config = model.config
    fpt = flops_per_token(config, run.method, run.max_len, head_layers=getattr(model, "n_head_layers", 0))
    final = curve[-1]
    result = {
        "run": dataclasses.asdict(run), "key": run.key(), "part": part, "checkpoint": str(out / "model"),
        "steps": res.step, "tokens": res.step * tokens_per_step, "cpu_seconds": round(final["cpu"], 1),
        "wall_seconds": round(res.wall_time, 1), "loadavg_start_end": [load_start, [round(x, 2) for x in os.getloadavg()]], "cpu_per_step": round(final["cpu"] / max(res.step, 1), 4),
        "calibrated_cpu_per_step": round(cost, 4) if cost else None, "passes": round(res.step * run.batch / len(data["blocks"]), 2)
        if run.method != "cocondenser" else None,
        "non_embedding_params": non_embedding_params(config),
        "params": sum(p.numel() for p in model.parameters()),
        "flops_estimate": float(fpt * res.step * tokens_per_step),
        "unigram_entropy": round(data["unigram_entropy"], 4),
        "final": {k: v for k, v in final.items() if k.startswith("eval_")},
        "below_unigram": round(data["unigram_entropy"] - final["eval_mlm_loss"], 4),
        "curve": curve, "train_curve": train_curve[:: max(1, len(train_curve) // 50)],
    }
    return result


def _run_star(args):
    return run_one(*args)


COLLECT_ONLY = False  # --collect: report finished runs, start none


def run_many(part: str, runs: dict[str, Run], workers: int) -> dict[str, dict]:
    """Run several (independent) runs in `workers` 1-thread processes; cached ones return at once."""
    todo = [(name, run) for name, run in runs.items()]
    if COLLECT_ONLY:
        todo = [(n, r) for n, r in todo if (_run_dir(part, r) / "result.json").exists()]
    if workers <= 1:
        results = [run_one(part, run) for _, run in todo]
    else:
        with mp.get_context("spawn").Pool(workers) as pool:
            results = pool.map(_run_star, [(part, run) for _, run in todo], chunksize=1)
    return {name: {"label": name, **res} for (name, _), res in zip(todo, results)}


# ---------------------------------------------------------------------------------------------
# Part A: throughput
# ---------------------------------------------------------------------------------------------


def _loop_cost(run: Run, steps: int, compile_: bool = False, threads: int = 1, batch_shape=None) -> dict:
    """CPU and wall seconds per step of `loop.train` for this run's model and recipe.

    Steps 3..N are timed (start-up, first-step allocation and compilation excluded); the
    compile time is the extra cost of the first two steps."""
    import torch

    from condenser_lite.training.loop import TrainConfig, train

    torch.set_num_threads(threads)
    r = run if batch_shape is None else run.replace(batch=batch_shape[0], max_len=batch_shape[1])
    data = study_data(r.vocab, r.max_len)
    full = full_blocks(r.vocab, r.max_len)
    model = _build_model(r.replace(init=None, method="mlm"), data["tokenizer"], "throughput")
    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(d, max_steps=steps, batch_size=r.batch, lr=r.lr, mixed_precision=r.precision,
                          compile=compile_, seed=0, progress=False)
        t0 = time.perf_counter()
        hist = train(model, full, cfg, collate_fn=data["collator"]).history
        total_wall = time.perf_counter() - t0
    n = len(hist) - 2
    cpu = (hist[-1]["cpu"] - hist[1]["cpu"]) / n
    wall = (hist[-1]["elapsed"] - hist[1]["elapsed"]) / n
    first_two = hist[1]["cpu"]
    return {"cpu_per_step": cpu, "wall_per_step": wall, "tokens_per_step": r.batch * r.max_len,
            "first_two_steps_cpu": first_two, "startup_overhead_cpu": max(0.0, first_two - 2 * cpu),
            "total_wall": total_wall}


EMULATIONS = {"native": {}, "emulated AVX2-only": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}


def _precision_child(steps: int) -> dict:
    """In a process started with the emulation's variables: the kernels torch uses, what
    ``"auto"`` picks and why, and the recommended run's update cost in fp32 and in bf16."""
    import torch

    from condenser_lite.utils.devices import cpu_precision

    out = {"capability": torch.backends.cpu.get_cpu_capability(), "auto": cpu_precision().to_dict()}
    for precision in ("no", "bf16"):
        out["fp32" if precision == "no" else "bf16"] = _loop_cost(RECOMMENDED.replace(precision=precision), steps)
    return out


def precision_costs(steps: int) -> dict:
    """``_precision_child`` natively and under the emulated AVX2-only CPU (part ``precision``)."""
    out = {}
    for name, env in EMULATIONS.items():
        child_env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                                                         "CONDENSER_LITE_CPU_BF16",
                                                                         "_CONDENSER_LITE_CPU_PRECISION")}
        run = subprocess.run([sys.executable, __file__, "--precision-child", str(steps)], env={**child_env, **env},
                             capture_output=True, text=True, check=True)
        out[name] = {"environment": env, **json.loads(run.stdout.strip().splitlines()[-1])}
        r = out[name]
        print(f"[precision] {name}: kernels {r['capability']}, auto -> {'bf16' if r['auto']['bf16'] else 'fp32'}; "
              f"fp32 {r['fp32']['cpu_per_step']:.3f} s/update, bf16 {r['bf16']['cpu_per_step']:.3f} "
              f"({r['fp32']['cpu_per_step'] / r['bf16']['cpu_per_step']:.2f}x)", flush=True)
    return out


def _hf_trainer_cost(run: Run, steps: int, bf16: bool = False) -> dict:
    """The baseline most users reach for: `BertForMaskedLM` (logits at every position) with the
    transformers `Trainer` and `DataCollatorForLanguageModeling`, on the same full-length blocks."""
    import torch
    from transformers import (
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    torch.set_num_threads(1)
    data = study_data(run.vocab, run.max_len)
    full = full_blocks(run.vocab, run.max_len)
    stamps: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append((time.process_time(), time.perf_counter()))

    torch.manual_seed(0)
    config = bert_config(run, data["tokenizer"])
    model = BertForMaskedLM(config)
    with tempfile.TemporaryDirectory() as d:
        args = TrainingArguments(output_dir=d, max_steps=steps, per_device_train_batch_size=run.batch,
                                 learning_rate=run.lr, use_cpu=True, bf16=bf16, report_to=[],
                                 logging_strategy="no", save_strategy="no", disable_tqdm=True,
                                 dataloader_num_workers=0)
        collator = DataCollatorForLanguageModeling(data["tokenizer"], mlm_probability=0.15)
        Trainer(model=model, args=args, train_dataset=full, data_collator=collator, callbacks=[Clock()]).train()
    n = len(stamps) - 2
    return {"cpu_per_step": (stamps[-1][0] - stamps[1][0]) / n, "wall_per_step": (stamps[-1][1] - stamps[1][1]) / n,
            "tokens_per_step": run.batch * run.max_len}


def _finetune_costs(run: Run, reps: int = 6) -> dict:
    """Retrieval fine-tuning step (8 queries x n passages) and passage encoding, one thread, fp32 vs bf16."""
    import torch
    from transformers import BertModel

    from condenser_lite.retrieval.biencoder import BiEncoder

    torch.set_num_threads(1)
    config = bert_config(run.replace(max_len=128), study_data(run.vocab, 64)["tokenizer"])
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1  # fine-tuning keeps BERT's dropout
    out = {}
    for precision in ("no", "bf16"):
        torch.manual_seed(0)
        enc = BertModel(config, add_pooling_layer=False)
        enc.set_attn_implementation(run.attn)
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
        for n_passages in (2, 4):
            for p_len in (64, 128):
                model = BiEncoder(enc, train_n_passages=n_passages)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                q = torch.randint(5, config.vocab_size, (8, 48))
                p = torch.randint(5, config.vocab_size, (8 * n_passages, p_len))

                def step():
                    with ctx():
                        loss = model(q, torch.ones_like(q), p, torch.ones_like(p)).loss
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad()

                step()
                c0 = time.process_time()
                for _ in range(reps):
                    step()
                out[f"ft_step_{precision}_8x{n_passages}_P{p_len}"] = round((time.process_time() - c0) / reps, 4)
        enc.eval()
        for p_len in (64, 128):
            x = torch.randint(5, config.vocab_size, (256, p_len))
            with torch.no_grad(), ctx():
                enc(input_ids=x, attention_mask=torch.ones_like(x))
                c0 = time.process_time()
                for _ in range(3):
                    enc(input_ids=x, attention_mask=torch.ones_like(x))
            out[f"encode_{precision}_P{p_len}_per_s"] = round(3 * 256 / (time.process_time() - c0), 1)
    return out


def _parallel_cost(run: Run, steps: int) -> dict:
    """Aggregate tokens/s: one process with 2 threads, against two 1-thread processes at once."""
    one = _loop_cost(run, steps, threads=2)
    with mp.get_context("spawn").Pool(2) as pool:
        t0 = time.perf_counter()
        two = pool.starmap(_loop_cost, [(run, steps), (run, steps)])
        wall = time.perf_counter() - t0
    tok = run.batch * run.max_len
    return {"one_process_2_threads_tokens_per_s": tok / one["wall_per_step"],
            "two_processes_1_thread_tokens_per_s": sum(tok / t["wall_per_step"] for t in two),
            "two_processes_wall_per_step": [t["wall_per_step"] for t in two],
            "one_process_wall_per_step": one["wall_per_step"], "two_processes_total_wall": wall}


def parallel(reps: int, steps: int) -> dict:
    """Part ``parallel``: ``_parallel_cost`` repeated, medians, and the load around it."""
    loads = [os.getloadavg()[0]]
    rows = [_parallel_cost(BASE.replace(dropout=0.0), 3 * steps) for _ in range(reps)]
    loads.append(os.getloadavg()[0])
    keys = ("one_process_2_threads_tokens_per_s", "two_processes_1_thread_tokens_per_s")
    return {"4L/128H, 32x64, bf16, eager, dropout 0": {
        **{k: sorted(r[k] for r in rows)[len(rows) // 2] for k in keys},
        "repetitions": rows, "loadavg_before_after": loads, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}}


THROUGHPUT_VARIANTS = {
    "fp32, sdpa, dropout 0.1 (tiny preset)": dict(precision="no", attn="sdpa", dropout=0.1),
    "bf16, sdpa, dropout 0.1": dict(precision="bf16", attn="sdpa", dropout=0.1),
    "bf16, eager, dropout 0.1": dict(precision="bf16", attn="eager", dropout=0.1),
    "fp32, eager, dropout 0": dict(precision="no", attn="eager", dropout=0.0),
    "bf16, eager, dropout 0": dict(precision="bf16", attn="eager", dropout=0.0),
}
THROUGHPUT_SHAPES = {
    "4L/128H, 32x64 (tiny)": BASE,
    "4L/256H, 32x64": BASE.replace(hidden=256),
    "6L/256H, 32x128": BASE.replace(layers=6, hidden=256, max_len=128),
}


def throughput(reps: int, steps: int) -> dict:
    out: dict = {"variants": {}, "compile": {}, "batch_shape": {}, "trainer": {}, "parallel": {}, "finetune": {}}
    for shape, run in THROUGHPUT_SHAPES.items():
        rows: dict[str, list[dict]] = {v: [] for v in THROUGHPUT_VARIANTS}
        for _ in range(reps):  # interleaved: every variant once per round
            for v, change in THROUGHPUT_VARIANTS.items():
                rows[v].append(_loop_cost(run.replace(**change), steps))
        out["variants"][shape] = {v: _summarise(r) for v, r in rows.items()}
        print(f"[throughput] {shape}: " + ", ".join(f"{v}: {s['cpu_per_step']:.3f}" for v, s in out["variants"][shape].items()), flush=True)
    best = dict(precision="bf16", attn="eager", dropout=0.0)
    tiny = BASE.replace(**best)
    comp = {"eager": [], "compiled": []}
    for _ in range(reps):
        comp["eager"].append(_loop_cost(tiny, steps))
        comp["compiled"].append(_loop_cost(tiny, steps, compile_=True))
    out["compile"]["4L/128H, 32x64, bf16, eager, dropout 0"] = {k: _summarise(v) for k, v in comp.items()}
    shapes = {"32x64": (32, 64), "64x32": (64, 32), "16x128": (16, 128)}
    rows = {k: [] for k in shapes}
    for _ in range(reps):
        for k, bs in shapes.items():
            rows[k].append(_loop_cost(tiny, steps, batch_shape=bs))
    out["batch_shape"]["4L/128H, bf16, eager, dropout 0 (2,048 tokens per step)"] = {k: _summarise(v) for k, v in rows.items()}
    trainer = {"Trainer fp32": [], "Trainer bf16": [], "ours fp32, sdpa, dropout 0.1": [], "ours bf16, eager, dropout 0": []}
    tiny = BASE.replace(precision="no", attn="sdpa")
    for _ in range(reps):
        trainer["Trainer fp32"].append(_hf_trainer_cost(tiny, steps))
        trainer["Trainer bf16"].append(_hf_trainer_cost(tiny, steps, bf16=True))
        trainer["ours fp32, sdpa, dropout 0.1"].append(_loop_cost(tiny, steps))
        trainer["ours bf16, eager, dropout 0"].append(_loop_cost(tiny, steps))
    out["trainer"]["4L/128H, 32x64"] = {k: _summarise(v) for k, v in trainer.items()}
    print("[throughput] trainer: " + json.dumps({k: round(v["cpu_per_step"], 3) for k, v in out["trainer"]["4L/128H, 32x64"].items()}), flush=True)
    out["parallel"]["4L/128H, 32x64, bf16, eager, dropout 0"] = _parallel_cost(tiny, 3 * steps)
    for shape, run in THROUGHPUT_SHAPES.items():
        out["finetune"][shape.split(",")[0]] = _finetune_costs(run.replace(**best))
    return out


def _summarise(rows: list[dict]) -> dict:
    import statistics

    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
    s = {k: round(statistics.median(r[k] for r in rows), 4) for k in keys}
    s["cpu_per_step_all"] = [round(r["cpu_per_step"], 4) for r in rows]
    s["tokens_per_cpu_s"] = round(rows[0]["tokens_per_step"] / s["cpu_per_step"], 1) if "tokens_per_step" in rows[0] else None
    return s


# ---------------------------------------------------------------------------------------------
# Orchestration, provenance, recommendation
# ---------------------------------------------------------------------------------------------


def machine() -> dict:
    """`results.machine` in the study's keys (the study page reads `cpu_model`), with the CPU's
    bf16/AMX flags, which the library does not record and the precision part is about."""
    from condenser_lite.reproduction.results import machine as library_machine

    m = library_machine(None)
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    return {"cpu_model": m["cpu"] or "?", "cores": m["cores"], "platform": m["platform"],
            "matrix_flags": sorted(f for f in flags if "bf16" in f or "amx" in f or f == "avx512f"),
            "memory_gb": m["ram_gib"]}


def versions() -> dict:
    """`results.environment`'s versions in the study's keys, and whether oneDNN is there."""
    import torch

    from condenser_lite.reproduction.results import environment

    env = environment()
    names = ("torch", "transformers", "tokenizers", "datasets", "accelerate")
    return {"python": env["python"], **{k: env["packages"][k] for k in names}, "onednn": torch.backends.mkldnn.is_available()}


def git_commit() -> str:
    from condenser_lite.reproduction.results import git

    sha, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return "unknown" if sha is None or status is None else sha + ("+dirty" if status else "")


def condenser_runs(stage1: dict, budget: float, splits=None) -> tuple[dict[str, Run], Run]:
    """Condenser splits continuing a stage-1 run, all for the same number of steps, and the
    MLM-only continuation at those steps (the control). The steps come from the CPU budget at
    an assumed Condenser/MLM step-cost ratio of 1.6 (measured ratios are in the results)."""
    run = Run(**stage1["run"])
    steps = max(20, int(budget / (1.6 * stage1["cpu_per_step"])))
    cont = run.replace(init=stage1["checkpoint"], steps=steps, warmup=0.1, schedule="linear", seed=1)
    L = run.layers
    splits = splits or [(1, 1), (1, 2), (2, 1), (2, 2), (L // 2, 2)]
    runs = {f"{run.shape}: skip_from={s}, n_head_layers={h} (head path {s + h} of {L} layers)":
            cont.replace(method="condenser", skip_from=s, n_head_layers=h) for s, h in dict.fromkeys(splits) if 1 <= s < L}
    return runs, cont


def build_parser() -> argparse.ArgumentParser:
    from condenser_lite.utils.cli_args import positive_int

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["throughput", "parallel", "precision", "sweep", "long", "condenser"],
                    action="append",
                    help="parallel: re-measure only one 2-thread process against two 1-thread ones (needs a quiet "
                         "machine; the value in the throughput part can be disturbed by other jobs)")
    ap.add_argument("--budget", type=float, default=200.0, help="CPU seconds per sweep run")
    ap.add_argument("--long-budget", type=float, default=1500.0, help="CPU seconds of each long run")
    ap.add_argument("--condenser-budget", type=float, default=300.0,
                    help="CPU seconds of a Condenser continuation (sets the common step count)")
    ap.add_argument("--extended", action="store_true", help="five more sweep runs (see sweep_runs)")
    ap.add_argument("--workers", type=positive_int, default=2)
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error (a bad input)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions in the throughput part")
    ap.add_argument("--steps", type=int, default=10, help="steps per throughput measurement")
    ap.add_argument("--long", action="append", default=None,
                    help="JSON of Run fields for a long run (default: the recommendation in this file)")
    ap.add_argument("--stage1", default="long",
                    help="what the Condenser splits continue: a sweep run's label, or 'long' (the first long run)")
    ap.add_argument("--reference", default="",
                    help="a 4-layer sweep run whose continuation with the tiny preset's split (2 + 2) is measured too ('' for none)")
    ap.add_argument("--out", default=str(ROOT / "results" / "study.json"))
    ap.add_argument("--collect", action="store_true",
                    help="write the results file from the runs finished so far, starting none")
    ap.add_argument("--precision-child", type=int, help=argparse.SUPPRESS)  # see precision_costs
    return ap


def condenser_part(a: argparse.Namespace, study: dict) -> None:
    """The Condenser splits continuing the stage-1 run ``a.stage1`` (and a coCondenser look at
    the clearest one), with their MLM controls, into ``study["condenser"]``."""
    if a.stage1 == "long":
        stage1 = next(iter(study["long"].values()))  # (--collect: fails until the long run is done)
    else:  # a finished sweep run (cached: returns at once)
        stage1 = run_many("sweep", {a.stage1: sweep_runs(a.budget, True)[a.stage1]}, 1)[a.stage1]
    study["condenser_stage1"] = {"label": stage1["label"], "key": stage1["key"], "steps": stage1["steps"],
                                 "final": stage1["final"]}
    runs, control = condenser_runs(stage1, a.condenser_budget)
    controls = {f"{Run(**stage1['run']).shape}: control, MLM continuation (same steps)": control}
    if a.reference:  # the tiny preset's split (2 + 2 of 4 layers) on a 4-layer sweep model, for comparison
        ref = run_many("sweep", {a.reference: sweep_runs(a.budget, True)[a.reference]}, 1)[a.reference]
        ref_runs, ref_control = condenser_runs(ref, a.condenser_budget, splits=[(2, 2), (1, 1)])
        runs.update(ref_runs)
        controls[f"{Run(**ref['run']).shape}: control, MLM continuation (same steps)"] = ref_control
    res = run_many("condenser", {**runs, **controls}, a.workers)
    # coCondenser continues the split with the clearest gap (gap / noise) on SciFact, for
    # half the steps (a look at the gauges under the contrastive loss, not a full stage).
    main_runs = [n for n in runs if n.startswith(Run(**stage1["run"]).shape) and n in res]
    if main_runs:
        clear = max(main_runs, key=lambda n: res[n]["final"]["eval_swap_gap"] / max(res[n]["final"]["eval_swap_noise"], 1e-9))
        extra = {f"coCondenser on SciFact, continuing [{clear}]": runs[clear].replace(
            method="cocondenser", init=res[clear]["checkpoint"], steps=max(20, runs[clear].steps // 2), seed=2)}
        res.update(run_many("condenser", extra, a.workers))
    for r in res.values():
        if r["run"]["method"] == "condenser":
            r["cls_ablation"] = cls_ablation(r)
    study["condenser"] = res
    for name, r in res.items():
        f = r["final"]
        print(f"[condenser] {name:60s} late {f['eval_mlm_loss']:.3f} head {f.get('eval_head_loss', float('nan')):.3f} "
              f"gap {f.get('eval_swap_gap', float('nan')):.3f} +- {f.get('eval_swap_noise', float('nan')):.3f} "
              f"cos {f['eval_cls_cosine']:.3f}", flush=True)


def provenance(parts: list[str], start: dict, t0: float, cpu0: float, study: dict) -> dict:
    """The study's provenance: this call's commit, command, times and machine, the runs' CPU
    seconds and the held-out sets' sizes."""
    # taken before git_commit() imports the library's provenance module (and torch), so the times leave that out
    finished, wall, cpu = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter() - t0, sum(os.times()[:4]) - cpu0
    return {
        "commit": git_commit(), "command": " ".join(["python", *sys.argv]), "parts_run_now": parts,
        "started": start["time"], "finished": finished,
        "wall_seconds_this_call": round(wall, 1), "cpu_seconds_this_call": round(cpu, 1),
        "cpu_seconds_all_runs": round(sum(r["cpu_seconds"] for p in ("sweep", "long", "condenser")
                                          for r in study.get(p, {}).values()), 1),
        "loadavg_start": [round(x, 2) for x in start["loadavg"]],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "machine": machine(), "versions": versions(),
        "heldout": {"fraction_of_documents": HELDOUT_FRACTION, "eval_blocks": EVAL_BLOCKS, "mask_seed": 0,
                    **{f"V{v}_T{t}": {k: d[k] for k in ("heldout_sections", "train_sections", "heldout_blocks",
                                                         "eval_masked_tokens", "train_tokens", "unigram_entropy")}
                       for (v, t), d in _data_summaries(study).items()}},
    }


def main() -> None:
    a = build_parser().parse_args()
    if a.precision_child:
        print(json.dumps(_precision_child(a.precision_child)))
        return
    global COLLECT_ONLY
    COLLECT_ONLY = a.collect
    parts = a.only or ["throughput", "precision", "sweep", "long", "condenser"]
    out_path = Path(a.out)
    study = json.loads(out_path.read_text()) if out_path.exists() else {}
    # local time, as in every results file so far (the library's `results.now` is UTC ISO)
    start = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg": os.getloadavg()}
    # user + system seconds of this process and its finished workers (`results.cpu_seconds`, whose
    # module imports torch: a baseline from it would move torch's import in or out of this call)
    t0, cpu0 = time.perf_counter(), sum(os.times()[:4])

    from condenser_lite.utils.cache import cache_dir, compute_once

    tp_dir = cache_dir("study") / "throughput"
    cached = tp_dir / f"reps{a.reps}-steps{a.steps}-v{STUDY_VERSION}.json"
    # threads vs processes, re-measured on its own on a quiet machine (--only parallel): it
    # replaces the throughput part's own measurement, which other jobs can disturb
    parallel_cached = tp_dir / f"parallel-reps{a.reps}-steps{a.steps}-v{STUDY_VERSION}.json"
    if "parallel" in parts and not a.collect:
        compute_once(parallel_cached, lambda: parallel(a.reps, a.steps))
    if "throughput" in parts and (cached.exists() or not a.collect):
        study["throughput"] = compute_once(cached, lambda: throughput(a.reps, a.steps))
    if parallel_cached.exists() and "throughput" in study:
        study["throughput"]["parallel"] = json.loads(parallel_cached.read_text())
    precision_cached = tp_dir / f"precision-steps{a.steps}-v{STUDY_VERSION}.json"
    if "precision" in parts and not a.collect:
        compute_once(precision_cached, lambda: {"run": dataclasses.asdict(RECOMMENDED), "steps": a.steps,
                                              "commit": git_commit(), "command": " ".join(["python", *sys.argv]),
                                              "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
                                              "loadavg_before": os.getloadavg()[0],
                                              **precision_costs(a.steps),
                                              "loadavg_after": os.getloadavg()[0],
                                              "machine": machine()})
    if precision_cached.exists():
        study["precision"] = json.loads(precision_cached.read_text())
    if "sweep" in parts:
        res = run_many("sweep", sweep_runs(a.budget, a.extended), a.workers)
        study["sweep"] = res
        for name, r in res.items():
            print(f"[sweep] {name:48s} steps {r['steps']:5d} cpu {r['cpu_seconds']:6.0f}s "
                  f"loss {r['final']['eval_mlm_loss']:.3f} unigram {r['unigram_entropy']:.3f} "
                  f"below {r['below_unigram']:.3f}", flush=True)
    specs = [Run(**json.loads(spec)) for spec in a.long] if a.long else [RECOMMENDED]
    long_specs = {f"long: {r.shape}, T{r.max_len}, B{r.batch}, lr {r.lr:g}, dropout {r.dropout:g}":
                  r.replace(cpu_budget=a.long_budget) for r in specs}
    if "long" in parts or ("condenser" in parts and a.stage1 == "long"):
        res = run_many("long", long_specs, a.workers)
        study["long"] = res
        for name, r in res.items():
            print(f"[long] {name}: steps {r['steps']} cpu {r['cpu_seconds']}s loss {r['final']['eval_mlm_loss']:.3f} "
                  f"unigram {r['unigram_entropy']:.3f}", flush=True)
    if "condenser" in parts:
        condenser_part(a, study)
    if set(parts) <= {"precision"} and "provenance" in study:
        # the part carries its own commit, command and machine; the rest keeps its provenance
        out_path.write_text(json.dumps(study, indent=1) + "\n")
        print(f"wrote {out_path}")
        return
    study["provenance"] = provenance(parts, start, t0, cpu0, study)
    study["recommendation"] = {**RECOMMENDATION, "measured_costs": sizing(study)}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(study, indent=1) + "\n")
    print(f"wrote {out_path}")


def sizing(study: dict) -> dict:
    """The measured per-item CPU costs the `small` budget is sized from (one thread each)."""
    out: dict = {}
    t = study.get("throughput", {})
    for shape, variants in t.get("variants", {}).items():
        out[f"mlm_step_cpu_s {shape}"] = {v: variants[v]["cpu_per_step"] for v in variants}
    if t.get("finetune"):
        out["finetune_and_encode (cpu s per step; passages per cpu s)"] = t["finetune"]
    cond = study.get("condenser", {})
    for name, r in cond.items():
        out[f"{r['run']['method']} step cpu s ({name})"] = {
            "cpu_per_step": r["cpu_per_step"], "batch": r["run"]["batch"], "max_len": r["run"]["max_len"],
            "shape": f"{r['run']['layers']}L/{r['run']['hidden']}H", "steps": r["steps"]}
    return out


def cls_ablation(result: dict) -> dict:
    """Does the head's loss depend on the late [CLS] at all? Head MLM loss on the held-out
    set with its own late [CLS], with a zero vector and with Gaussian noise of the same norm in
    its place, and the mean attention the head's first layer pays to position 0 (the [CLS]
    slot; 1/length would be uniform). Cached beside the run's result (a few CPU seconds)."""
    from condenser_lite.utils.cache import compute_once

    return compute_once(Path(result["checkpoint"]).parent / "cls_ablation.json", lambda: _cls_ablation(result))


def _cls_ablation(result: dict) -> dict:
    import torch

    from condenser_lite.modeling.condenser import Condenser
    from condenser_lite.modeling.gauges import head_block_losses

    run = Run(**result["run"])
    data = study_data(run.vocab, run.max_len)
    model = Condenser.from_pretrained(result["checkpoint"], head="load").eval()
    gen = torch.Generator().manual_seed(0)
    sums, n, attn, rows = {"own": 0.0, "zero": 0.0, "noise": 0.0}, 0, 0.0, 0

    def ablations(own):  # the late [CLS] replaced by zeros, and by noise of its norm
        noise = torch.randn(own.shape, generator=gen) * own.norm(dim=-1, keepdim=True) / own.shape[-1] ** 0.5
        return [torch.zeros_like(own), noise]

    with torch.no_grad():
        for batch in data["eval"]:
            _, own_loss, (zero_loss, noise_loss), counts = head_block_losses(model, batch, ablations)
            for name, loss in (("own", own_loss), ("zero", zero_loss), ("noise", noise_loss)):
                sums[name] += float(loss.sum())
            n += int(counts.sum())
            # attention of the first head layer's queries (tokens) on key 0, per block
            out = model.backbone.bert(batch["input_ids"], attention_mask=batch["attention_mask"],
                                      output_hidden_states=True)
            own, early = out.last_hidden_state[:, :1], out.hidden_states[model.skip_from][:, 1:]
            h = torch.cat([own, early], 1)
            sa = model.head[0].attention.self
            b, t, width = h.shape
            heads = sa.num_attention_heads
            q = sa.query(h).view(b, t, heads, -1).transpose(1, 2)
            k = sa.key(h).view(b, t, heads, -1).transpose(1, 2)
            scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
            scores = scores.masked_fill(batch["attention_mask"][:, None, None, :] == 0, float("-inf"))
            weight = scores.softmax(-1)[:, :, 1:, 0]  # [B, heads, T-1]
            keep = batch["attention_mask"][:, None, 1:].bool().expand_as(weight)
            attn += float(weight[keep].sum())
            rows += int(keep.sum())
    out = {f"head_loss_{k}": round(v / n, 4) for k, v in sums.items()}
    out["attention_on_cls"] = round(attn / rows, 4)
    lengths = [float(m.sum()) for batch in data["eval"] for m in batch["attention_mask"]]
    out["uniform_attention"] = round(sum(1 / x for x in lengths) / len(lengths), 4)
    return out


def _data_summaries(study: dict) -> dict:
    combos = {(r["run"]["vocab"], r["run"]["max_len"]) for p in ("sweep", "long", "condenser")
              for r in study.get(p, {}).values()}
    return {c: study_data(*c) for c in sorted(combos)}


# The study's choice (notebooks/09_study.md): the tiny shape with the fastest levers and no
# dropout, the best held-out loss per CPU second of the sweep; the long run trains it, and the
# `small` preset (condenser_lite/reproduction/presets.py) is sized from it.
RECOMMENDED = BASE.replace(dropout=0.0)
RECOMMENDATION: dict = {
    "preset": "small",
    "model": "4 layers, hidden 128, 4 heads, WordPiece 8192, blocks of 64 tokens (tiny's shape)",
    "pre-training": "bf16 autocast, eager attention, no dropout, batch 32, lr 1e-3 linear decay, 12,000 stage-1 updates",
    "condenser split": "skip_from=1, n_head_layers=1 (head path 2 of 4 layers)",
    "fine-tuning": "tiny's recipe with dropout 0.1 put back",
}


if __name__ == "__main__":
    from condenser_lite.utils.cli_args import run_script

    run_script(main)  # a bad input is one line, not a traceback
