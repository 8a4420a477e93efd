"""The sizing study's pre-training runs (``python -m condenser_lite sizing``, chapter 9,
`notebooks/09_study.ipynb`): what one run is (``Run``), the runs of each part, and training one
with held-out evaluation in a one-thread worker.

A run is the library's pre-training stage (``Run.stage``: built by ``pretraining.build_model``)
with the study's own budget: a CPU-seconds allowance instead of a step count, its curve logged
every sixth of the way. Every finished run is cached under
``$CONDENSER_LITE_CACHE/study/<part>/<method>-<key>/`` (``result.json``, written by
``cache.compute_once``, so two processes never train one run), and a run resumes from its last
checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

HELDOUT_FRACTION = 0.05
EVAL_BLOCKS = 512
EVAL_EVERY_FRACTION = 1 / 6  # curve points per run (plus the start and the end)
# The key hashes the settings as JSON behind this tag; the committed results name their runs by
# it, so it stays as it is.
KEY_TAG = "v1:"
# Settings left out of the key at these values: the first sweep runs were recorded without them,
# and so keep the keys (and cache folders) they were stored under.
KEY_OMITS_AT = {"mask_rate": 0.15}


@dataclass(frozen=True)
class Run:
    """One pre-training run: a model shape, a recipe and a CPU-seconds budget (chapter 9).

    The shape and recipe fields have no defaults here: ``base_run`` takes them from the ``tiny``
    preset. ``method`` is ``mlm`` (from scratch, or continuing ``init``), ``condenser`` (a fresh
    head on ``init``'s backbone) or ``cocondenser`` (continuing a Condenser run, head loaded, on
    SciFact). ``init`` is the checkpoint folder of another run whose final weights this one starts
    from. ``steps`` fixes the step count instead of deriving it from ``cpu_budget``.
    ``mask_rate`` masks the training blocks only; the held-out set keeps 15%.
    """

    layers: int
    hidden: int
    heads: int
    vocab: int
    max_len: int
    batch: int
    lr: float
    warmup: float
    dropout: float
    schedule: str = "linear"
    precision: str = "bf16"
    attn: str = "eager"
    cpu_budget: float = 240.0
    steps: int | None = None
    seed: int = 0
    method: str = "mlm"
    init: str | None = None
    skip_from: int = 0
    n_head_layers: int = 0
    mask_rate: float = 0.15

    def key(self) -> str:
        """The run's name in the cache and in ``results/study.json``: a hash of its settings
        (``KEY_TAG``, ``KEY_OMITS_AT`` say why it is not ``cache.settings_hash``)."""
        settings = dataclasses.asdict(self)
        for name, value in KEY_OMITS_AT.items():
            if settings[name] == value:
                del settings[name]
        blob = json.dumps(settings, sort_keys=True)
        return hashlib.sha256(f"{KEY_TAG}{blob}".encode()).hexdigest()[:12]

    def replace(self, **changes) -> "Run":
        return dataclasses.replace(self, **changes)

    @property
    def shape(self) -> str:
        return f"{self.layers}L/{self.hidden}H"

    def stage(self):
        """This run as the library's pre-training stage, which ``pretraining.build_model`` builds:
        the FFN four times the hidden size, coCondenser on SciFact, the head's split only where
        the method has a head."""
        from condenser_lite.training.pretraining_config import ModelConfig, StageConfig

        head = {"skip_from": self.skip_from, "n_head_layers": self.n_head_layers} if self.method != "mlm" else {}
        model = ModelConfig(vocab_size=self.vocab, hidden_size=self.hidden, num_hidden_layers=self.layers,
                            num_attention_heads=self.heads, intermediate_size=4 * self.hidden, max_len=self.max_len,
                            dropout=self.dropout, attn_implementation=self.attn, **head)
        return StageConfig(method=self.method, init=self.init, model=model, seed=self.seed,
                           corpus="scifact" if self.method == "cocondenser" else "general")


def base_run(**changes) -> Run:
    """The ``tiny`` preset's shape and pre-training recipe as a run, with ``changes`` (chapter 9)."""
    from condenser_lite.reproduction.configuration.presets import get_preset

    tiny = get_preset("tiny")
    m, p = tiny.model, tiny.stages.bert
    return Run(layers=m.num_hidden_layers, hidden=m.hidden_size, heads=m.num_attention_heads, vocab=m.vocab_size,
               max_len=m.max_len, batch=p.batch_size, lr=p.lr, warmup=p.warmup_ratio, dropout=m.dropout, **changes)


BASE = base_run()  # the tiny preset's shape and recipe, with the throughput levers of part A (bf16, eager)
# The study's choice: the tiny shape with the fastest levers and no dropout, the best held-out
# loss per CPU second of the sweep; the long run trains it, and the `small` preset is sized from it.
RECOMMENDED = BASE.replace(dropout=0.0)


def sweep_runs(budget: float, extended: bool = False) -> dict[str, Run]:
    """One factor at a time from BASE (every run gets the same CPU budget); ``extended`` adds
    more (2 and 8 layers, a constant rate, lr 2e-3, batch 64, ...). Chapter 9."""
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


def condenser_runs(stage1: dict, budget: float, splits=None) -> tuple[dict[str, Run], Run]:
    """Condenser splits continuing a stage-1 run's result, all for the same number of steps, and
    the MLM-only continuation at those steps (the control). The steps come from the CPU budget at
    an assumed Condenser/MLM step-cost ratio of 1.6 (measured ratios are in the results). Chapter 9."""
    run = Run(**stage1["run"])
    steps = max(20, int(budget / (1.6 * stage1["cpu_per_step"])))
    cont = run.replace(init=stage1["checkpoint"], steps=steps, warmup=0.1, schedule="linear", seed=1)
    n = run.layers
    splits = splits or [(1, 1), (1, 2), (2, 1), (2, 2), (n // 2, 2)]
    runs = {f"{run.shape}: skip_from={s}, n_head_layers={h} (head path {s + h} of {n} layers)":
            cont.replace(method="condenser", skip_from=s, n_head_layers=h) for s, h in dict.fromkeys(splits) if 1 <= s < n}
    return runs, cont


# ---- data: tokenizer, training blocks, held-out evaluation set (one copy per process and setting) ----


@functools.lru_cache(maxsize=4)
def study_data(vocab: int, max_len: int) -> dict:
    """The tokenizer of ``vocab`` pieces, the training blocks of ``max_len`` tokens, the fixed
    held-out evaluation set (``EVAL_BLOCKS`` blocks of the held-out documents, fixed masks) and
    the unigram entropy of its masked tokens. Chapter 9."""
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
    entropy = unigram_entropy(blocks["input_ids"], evalset, vocab_size=len(tok), ignore_ids=tok.all_special_ids)
    n_tokens = sum(len(x) for x in blocks["input_ids"])
    return {"tokenizer": tok, "blocks": blocks, "collator": collator, "eval": evalset,
            "unigram_entropy": entropy, "train_tokens": n_tokens, "heldout_sections": len(held_corpus),
            "train_sections": len(train_corpus), "heldout_blocks": len(held),
            "eval_masked_tokens": int(sum(int((b["labels"] != -100).sum()) for b in evalset))}


@functools.lru_cache(maxsize=4)
def full_blocks(vocab: int, max_len: int):
    """Only the full-length training blocks: every throughput step then holds the same tokens. Chapter 9."""
    return study_data(vocab, max_len)["blocks"].filter(lambda x: len(x["input_ids"]) == max_len)


def build_model(run: Run, tok):
    """The run's model, built by the library's ``pretraining.build_model`` from ``Run.stage``, its
    random weights drawn from ``torch.manual_seed(run.seed)``: the draw the committed runs' keys
    stand for (``Run.key``), so a run trained anew starts where its cached twin started. Chapter 9."""
    from condenser_lite.training.pretraining import build_model as build_stage_model

    return build_stage_model(run.stage(), tok, init_seed=run.seed)


def bert_config(run: Run, tok):
    """The run's BERT config from scratch (``ModelConfig.bert_config`` of ``Run.stage``'s model,
    as ``pretraining.build_model`` makes it), for the baselines built outside the library's
    models and for the FLOPs. Chapter 9."""
    return run.stage().model.bert_config(tok)


def non_embedding_params(config) -> int:
    """Parameters of the encoder's layers (``accounting.layer_params``). Chapter 9."""
    from condenser_lite.training.accounting import layer_params

    return config.num_hidden_layers * layer_params(config.hidden_size, config.intermediate_size)


def flops_per_token(config, method: str, max_len: int, head_layers: int = 0) -> float:
    """Training FLOPs per token of full-length blocks: ``accounting.stage_flops`` of one position
    (``max_len`` attention pairs, 15% masked; also for the ``mask 30%`` run, whose committed
    estimate was made so). Chapter 9."""
    from condenser_lite.training.accounting import stage_flops

    shape = {**config.to_dict(), "n_head_layers": head_layers}
    return stage_flops(method, shape, {"positions": 1, "pairs": max_len, "masked": 0.15})


# ---- one training run with held-out evaluation (in a one-thread worker) -----------------------------


def run_dir(part: str, run: Run) -> Path:
    """The run's cache folder. Chapter 9."""
    from condenser_lite.utils.cache import cache_dir

    return cache_dir("study") / part / f"{run.method}-{run.key()}"


def evaluate(model, data: dict, extra: dict | None) -> dict[str, float]:
    """The held-out gauges of ``model`` on ``data``'s evaluation set (and the MLM loss on
    ``extra``'s, the 64-token set, when the run's blocks are longer). Chapter 9."""
    from condenser_lite.modeling.gauges import cls_cosine, cls_swap_gap, heldout_mlm_loss

    out = dict(heldout_mlm_loss(model, data["eval"]))
    out["cls_cosine"] = cls_cosine(model, data["eval"][:2])  # 128 blocks: cheap and stable enough
    if hasattr(model, "head_forward"):
        gap = cls_swap_gap(model, data["eval"])
        out.update(swap_gap=gap["gap"], swap_noise=gap["noise"], swap_shift_spread=gap["shift_spread"])
    if extra is not None:
        out["mlm_loss_T64"] = heldout_mlm_loss(model, extra["eval"])["mlm_loss"]
    return out


def step_cost(model, data, run: Run, collate, step_fn=None) -> float:
    """CPU seconds per optimizer step of this run's loop, measured on a throwaway copy. Chapter 9."""
    from condenser_lite.training.loop import TrainConfig, train

    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(max_steps=7, batch_size=run.batch, lr=run.lr, mixed_precision=run.precision,
                          seed=run.seed + 1000)
        hist = train(copy.deepcopy(model), data, cfg, output_dir=d, collate_fn=collate, step_fn=step_fn,
                     progress=False).history
    return (hist[-1]["cpu"] - hist[1]["cpu"]) / (len(hist) - 2)


def run_one(part: str, run: Run) -> dict:
    """Train one run (or read it back from the cache) and return its summary. Chapter 9."""
    from condenser_lite.utils.cache import compute_once

    out = run_dir(part, run)
    return compute_once(out / "result.json", lambda: _train(part, run, out))


def _training_data(run: Run, data: dict):
    """The run's training data, collator, step function and tokens per step."""
    collate = data["collator"]
    if run.mask_rate != collate.mlm_probability:
        from condenser_lite.modeling.masking import MLMCollator

        collate = MLMCollator(data["tokenizer"], mlm_probability=run.mask_rate)
    if run.method != "cocondenser":
        return data["blocks"], collate, None, run.batch * run.max_len
    from condenser_lite.modeling.gradcache import cocondenser_step
    from condenser_lite.modeling.spans import SpanPairCollator
    from condenser_lite.training.pretraining_data import span_pairs

    step_fn = functools.partial(cocondenser_step, chunk_size=None, mlm_weight=1.0, co_weight=1.0)
    return span_pairs(run.stage(), data["tokenizer"]), SpanPairCollator(collate), step_fn, 2 * run.batch * run.max_len


def _plan(out: Path, model, train_data, run: Run, collate, step_fn) -> tuple[float | None, int]:
    """The step count, fixed once (calibrated on this machine) and kept in ``plan.json``, so a
    resumed run trains to the same total as the interrupted one."""
    plan, state = out / "plan.json", out / "train" / "checkpoint" / "state.json"
    if plan.exists():
        cost, steps = json.loads(plan.read_text())["cost"], json.loads(plan.read_text())["steps"]
    elif state.exists():  # interrupted before plan.json existed: the checkpoint knows its total
        cost, steps = None, json.loads(state.read_text())["run"]["max_steps"]
    else:
        cost = step_cost(model, train_data, run, collate, step_fn)
        steps = run.steps or max(20, int(run.cpu_budget / cost))
    plan.write_text(json.dumps({"cost": cost, "steps": steps}))
    return cost, steps


def _train(part: str, run: Run, out: Path) -> dict:
    import torch

    from condenser_lite.training.loop import TrainConfig, train

    torch.set_num_threads(1)
    load_start = [round(x, 2) for x in os.getloadavg()]  # other jobs on the machine slow the wall clock
    data = study_data(run.vocab, run.max_len)
    extra = study_data(run.vocab, 64) if run.max_len != 64 else None
    tok = data["tokenizer"]
    model = build_model(run, tok)
    train_data, collate, step_fn, tokens_per_step = _training_data(run, data)
    out.mkdir(parents=True, exist_ok=True)
    cost, steps = _plan(out, model, train_data, run, collate, step_fn)
    every = max(1, round(steps * EVAL_EVERY_FRACTION))
    start_eval = evaluate(model, data, extra)
    cfg = TrainConfig(max_steps=steps, batch_size=run.batch, lr=run.lr, warmup_ratio=run.warmup,
                      schedule=run.schedule, mixed_precision=run.precision, seed=run.seed,
                      log_every=max(1, steps // 50), eval_every=every, save_every=max(every, steps // 4))
    res = train(model, train_data, cfg, output_dir=out / "train", collate_fn=collate, step_fn=step_fn,
                eval_fn=lambda m: evaluate(m, data, extra), progress=False)
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
    return {
        "run": dataclasses.asdict(run), "key": run.key(), "part": part, "checkpoint": str(out / "model"),
        "steps": res.step, "tokens": res.step * tokens_per_step, "cpu_seconds": round(final["cpu"], 1),
        "wall_seconds": round(res.wall_time, 1),
        "loadavg_start_end": [load_start, [round(x, 2) for x in os.getloadavg()]],
        "cpu_per_step": round(final["cpu"] / max(res.step, 1), 4),
        "calibrated_cpu_per_step": round(cost, 4) if cost else None,
        "passes": round(res.step * run.batch / len(data["blocks"]), 2) if run.method != "cocondenser" else None,
        "non_embedding_params": non_embedding_params(config),
        "params": sum(p.numel() for p in model.parameters()),
        "flops_estimate": float(fpt * res.step * tokens_per_step),
        "unigram_entropy": round(data["unigram_entropy"], 4),
        "final": {k: v for k, v in final.items() if k.startswith("eval_")},
        "below_unigram": round(data["unigram_entropy"] - final["eval_mlm_loss"], 4),
        "curve": curve, "train_curve": train_curve[:: max(1, len(train_curve) // 50)],
    }


def run_many(part: str, runs: dict[str, Run], workers: int, collect: bool = False) -> dict[str, dict]:
    """Independent runs in ``workers`` one-thread processes (``jobs.run_jobs``); cached ones return
    at once. ``collect``: only the runs already finished, starting none. Chapter 9."""
    from condenser_lite.reproduction.runs.jobs import Job, run_jobs

    todo = {name: run for name, run in runs.items() if not collect or (run_dir(part, run) / "result.json").exists()}
    done = run_jobs({(name,): Job(run_one, dict(part=part, run=run)) for name, run in todo.items()}, workers)
    return {name: {"label": name, **done[(name,)]} for name in todo}


def cls_ablation(result: dict) -> dict:
    """Does the head's loss depend on the late [CLS] at all? Head MLM loss on the held-out set
    with its own late [CLS], with a zero vector and with Gaussian noise of the same norm in its
    place, and the mean attention the head's first layer pays to position 0 (the [CLS] slot;
    1/length would be uniform). Cached beside the run's result (a few CPU seconds). Chapter 9."""
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
            b, t, _ = h.shape
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
