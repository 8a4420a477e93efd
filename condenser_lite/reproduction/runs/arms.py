"""The arms of the scaled-down reproduction, and what the protocol does to each one.

The arms share one tokenizer, one architecture, one data order and equal pre-training steps
(``registry.ARMS``) -- equal steps, not equal compute: a Condenser step also runs its head, a
coCondenser step two spans per document (``training/accounting.py`` measures each arm's cost).
Each arm's last stage trains by one of the preset's named stages (``ARM_STAGES``):

1. ``bert``: MLM from scratch on the general corpus, by ``stages.bert``;
2. ``bert_cont``: arm 1 + MLM by ``stages.condenser`` (the equal-step control);
3. ``condenser``: arm 1 + Condenser by ``stages.condenser`` (a fresh head, paper section 3.4);
4. ``cocondenser``: arm 3 + coCondenser on the target corpus by ``stages.cocondenser`` (head loaded);
5. ablations by ``stages.cocondenser`` too: ``co_contrastive_only`` (``mlm_weight=0``, coCondenser
   table 4's "+ contrastive loss") and ``co_mlm_only`` (``co_weight=0``: Condenser MLM on the
   target corpus, the Condenser preprint's "continue training");
6. where a preset names it, ``condenser_mod``: arm 1 + a Condenser by ``stages.condenser`` with
   the preset's ``modified_condenser`` changes (a deviation the mechanism page chose);
7. its two controls: ``bert_cont_flops`` (arm 1 + MLM for the modified Condenser's FLOPs,
   ``rules.EQUAL_FLOPS_RATIO`` x ``stages.condenser.max_steps`` updates) and
   ``condenser_mod_nocls`` (the modified Condenser whose head reads a learned constant instead
   of the late [CLS]).

Each arm is pre-trained through ``presets.stage_config`` (``pretrain_arm``), fine-tuned as a
retriever through the recipe's ``finetune.finetune_round`` (``finetune_arm``), as an STS-b
bi-encoder (``sts_arm``), and its CLS attention entropy is measured (``entropy_before``). Each
part is cached under ``$CONDENSER_LITE_CACHE`` by a hash of its settings.
Explained in chapters 2-7 (``notebooks/02_condenser.ipynb`` ... ``07_sentence_similarity.ipynb``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...data.tevatron import sample_queries
from ...data.tokenizer import load_tokenizer
from ...modeling.gauges import cls_attention_entropy
from ...retrieval.metrics import metric_depth
from ...retrieval.pooling import CLS, Pooling, checkpoint_pooling
from ...retrieval.search import evaluate_retriever
from ...training.finetune import finetune_round
from ...training.loop import TrainConfig, read_log
from ...training.pretraining import pretrain
from ...training.pretraining_config import StageConfig
from ...training.similarity import evaluate_sts, finetune_sts, sample_pairs
from ...utils.cache import LOCK_FILE, cache_dir, compute_once, settings_hash
from ...utils.devices import resolve_precision
from ...utils.loading import checkpoint_key, load_encoder
from ..configuration.presets import get_preset, stage_config
from ..configuration.settings_tree import Preset
from ..configuration.registry import ARMS, MODIFIED_ARM, PARENT
from ..statistics.rules import EQUAL_FLOPS_RATIO
from .tasks import Task, sts_data

# the named stage each arm's last stage trains by (presets.stage_config picks it from the method and start)
ARM_STAGES = {"bert": "bert", **dict.fromkeys(("bert_cont", "condenser", MODIFIED_ARM, "bert_cont_flops",
                                              "condenser_mod_nocls"), "condenser"),
              **dict.fromkeys(("cocondenser", "co_contrastive_only", "co_mlm_only"), "cocondenser")}
# coCondenser's loss weights per arm (mlm_weight, co_weight): the ablations drop one term
CO_WEIGHTS = {"cocondenser": (1.0, 1.0), "co_contrastive_only": (0.0, 1.0), "co_mlm_only": (1.0, 0.0)}


# ---- pre-training ------------------------------------------------------------------------------


# the loop's settings a fine-tuning or STS-b key always holds; the loop's others (the round's own
# max_steps and seed, the bookkeeping) join it only where a recipe sets them away from the loop's
# default, so the recorded runs keep their keys
KEYED_LOOP = ("lr", "batch_size", "warmup_ratio", "weight_decay", "mixed_precision")


def resolved(config: TrainConfig) -> dict:
    """A fine-tuning or STS-b recipe as its cache key reads it: its own settings, the loop's
    ``KEYED_LOOP`` and any other of the loop's set away from its default, with
    ``mixed_precision="auto"`` replaced by what it means on this machine
    (``devices.resolve_precision``). Chapter 4."""
    usual, loop = TrainConfig(), {f.name for f in dataclasses.fields(TrainConfig)}
    settings = {k: v for k, v in dataclasses.asdict(config).items()
                if (k not in loop or k in KEYED_LOOP or v != getattr(usual, k)) and k != "pooling"}
    # the pooling is keyed where it is read with its checkpoint (finetune_arm), as the pooling it means
    return {**settings, "mixed_precision": resolve_precision(config.mixed_precision)}


def arm_config(arm: str, preset: Preset | str | None, init: str | None) -> StageConfig:
    """The ``StageConfig`` of one arm's *last* stage, starting from ``init`` (its parent's
    checkpoint; ``None`` for ``bert``): ``presets.stage_config`` of the arm's method. Arms 2-6
    restart warm-up and decay, the same for all. Explained in chapters 2 and 3."""
    preset = get_preset(preset)
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {ARMS}")
    if arm == "bert":
        return stage_config(preset, "mlm", init=None)
    if init is None:
        raise ValueError(f"arm {arm!r} continues another arm: pass its checkpoint as init")
    if arm == MODIFIED_ARM:  # the Condenser stage with the preset's deviation
        return stage_config(preset, "condenser", init, **dict(preset.modified_condenser or {}))
    if arm == "bert_cont_flops":  # MLM for the modified Condenser's FLOPs (rules.EQUAL_FLOPS_RATIO)
        return stage_config(preset, "mlm", init, max_steps=round(preset.stages.condenser.max_steps * EQUAL_FLOPS_RATIO))
    if arm == "condenser_mod_nocls":  # the modified Condenser, its head reading a learned constant
        return stage_config(preset, "condenser", init, **dict(preset.modified_condenser or {}), head_cls="constant")
    if arm in CO_WEIGHTS:
        mlm_weight, co_weight = CO_WEIGHTS[arm]
        return stage_config(preset, "cocondenser", init, mlm_weight=mlm_weight, co_weight=co_weight)
    return stage_config(preset, "mlm" if arm == "bert_cont" else "condenser", init)


def needed_arms(arms: Sequence[str], pretrained: Mapping[str, str]) -> list[str]:
    """``arms`` plus the parents they continue from, parents first (a ``pretrained`` arm has no parent). Chapter 2."""
    out: list[str] = []

    def add(arm: str) -> None:
        if arm in out:
            return
        if arm not in pretrained and PARENT[arm] is not None:
            add(PARENT[arm])
        out.append(arm)

    for arm in arms:
        add(arm)
    return out


def pretrain_arm(arm: str, preset: Preset | str | None = None, init: str | None = None,
                 data_dir: str | None = None, seed: int | None = None,
                 check: Callable[[StageConfig], Any] | None = None) -> dict:
    """Pre-train (or reuse from the cache) one arm's last stage from ``init`` (its parent's
    checkpoint) with pre-training ``seed`` (None: the preset's). In the result, ``log`` holds the
    per-step losses and, at evaluations, the held-out gauges (``eval_*``); ``heldout`` the final
    gauges, ``heldout_set`` the evaluation set's counts and unigram entropy, ``compute`` the
    stage's own cost (``accounting.stage_compute``), ``health`` its evaluations against the
    committed runs (``check(cfg)``: ``health.stage_check``; None: not judged). An arm in
    ``preset.pretrained`` is taken as it is. Chapters 2 (``notebooks/02_condenser.ipynb``) and 3."""
    preset = get_preset(preset)
    if preset.pretrained and arm in preset.pretrained:
        return {"checkpoint": preset.pretrained[arm], "steps": None, "wall_time": None, "config": None, "log": [],
                "heldout": None, "heldout_set": None, "compute": None, "seed": None, "precision": None}
    cfg = arm_config(arm, preset, init)
    if seed is not None:
        cfg = cfg.replace(seed=seed)
    ckpt = pretrain(cfg, data_dir=data_dir, progress=False, check=check(cfg) if check else None)
    record = json.loads((Path(ckpt) / "pretrain_config.json").read_text())
    if cfg.head_mlm_probability and record["compute"] and "head_masked" not in record["compute"]:
        warnings.warn(f"{ckpt} was pre-trained before compute accounting counted the head's own masked copy: its "
                      "FLOPs leave that copy out (its early layers and the head's masked tokens); delete that "
                      "folder to pre-train it again with the count", stacklevel=2)
    keep = ("step", "loss", "mlm_loss", "co_loss", "co_acc", "head_loss", "late_loss", "lr", "elapsed")
    log = [{k: v for k, v in r.items() if k in keep or k.startswith("eval_")} for r in read_log(ckpt)]
    return {"checkpoint": str(ckpt), "steps": record["steps"], "wall_time": record["wall_time"],
            "config": record["config"], "log": log, "heldout": record["heldout"],
            "heldout_set": record["heldout_set"], "compute": record["compute"], "seed": cfg.seed,
            "precision": record["settings"].get("mixed_precision"), "health": record.get("health")}


# ---- retrieval ---------------------------------------------------------------------------------


def run_depth(preset: Preset) -> int:
    """How deep the evaluation runs are ranked: the deepest metric cutoff or nb-recall depth. Chapter 4."""
    return max([*preset.nb_k, *preset.nb_n, metric_depth(preset.metrics) or 0, 10])


def finetune_arm(
    arm: str,
    checkpoint: str,
    task: Task,
    preset: Preset | str | None = None,
    size: int | None = None,
    seed: int = 0,
    round_number: int = 1,
    round1: dict | None = None,
    entropy_texts: Sequence[str] | None = None,
    keep_model: bool = True,
) -> dict:
    """Fine-tune ``checkpoint`` as a retriever on ``size`` training queries (``None``: all) with
    the preset's recipe (``finetune.finetune_round``) and evaluate it; cached under
    ``$CONDENSER_LITE_CACHE/finetune/<arm>-r<round>-...-<hash>/``.

    Round 1 trains on BM25 negatives. Round 2 (``round1``: the round-1 result of the same arm,
    size and seed) mines with that retriever's saved model and corpus embeddings and restarts
    from the *pre-trained* checkpoint. The result's ``dir`` holds ``run.json`` (ranked doc ids per
    evaluation query), the training log and, with ``keep_model``, what round 2 mines with; with
    ``entropy_texts``, ``entropy_after`` is the CLS attention entropy per layer. Chapter 4.
    """
    preset = get_preset(preset)
    recipe = preset.finetune
    if round_number not in (1, 2):
        raise ValueError(f"round_number must be 1 or 2, got {round_number}")
    if round_number == 2 and round1 is None:
        raise ValueError("round 2 mines negatives with the round-1 retriever: pass round1=<finetune_arm(..., round_number=1)>")
    train = task.train if size is None or size >= len(task.train) else sample_queries(task.train, size, seed=seed)
    settings = {"recipe": resolved(recipe), "metrics": list(preset.metrics), "depth": run_depth(preset),
                "entropy": [preset.entropy_texts, preset.entropy_max_len] if entropy_texts else None}
    pooling = Pooling.parse(recipe.pooling) if recipe.pooling else checkpoint_pooling(checkpoint)
    if pooling != CLS:  # the papers' [CLS] adds nothing, so the keys of the runs before pooling existed hold
        settings["pooling"] = str(pooling)
    key = settings_hash({"init": checkpoint_key(checkpoint), "task": task.key, "size": len(train), "seed": seed,
                         "round": round_number, "round1": round1["key"] if round1 else None, "settings": settings})
    out_dir = cache_dir("finetune") / f"{arm}-r{round_number}-n{len(train)}-s{seed}-{key}"

    def compute() -> dict:
        t_start, cpu_start = time.perf_counter(), time.process_time()
        tok = load_tokenizer(checkpoint)
        mining: dict[str, Any] = {}
        if round_number == 2:
            r1 = Path(round1["dir"])
            mining = dict(round1=r1, corpus=task.eval.corpus, corpus_embeddings=_saved_embeddings(r1))
        model, data = finetune_round(checkpoint, train, tok, recipe, out_dir, round_number, seed, progress=False,
                                     resume=False, **mining)
        if round_number == 2:  # mined: the round-1 embeddings (13.6 GB on MS MARCO in float16) are done with
            for name in ("corpus_embeddings.npy", "corpus_ids.json"):
                (Path(round1["dir"]) / name).unlink(missing_ok=True)
        t_train = time.perf_counter() - t_start
        shutil.rmtree(out_dir / "checkpoint", ignore_errors=True)  # optimizer state: only for resuming
        # the corpus embeddings go straight to disk (a memmap), in the recipe's dtype
        ev = evaluate_retriever(model, task.eval, split=task.split, tokenizer=tok, q_max_len=recipe.q_max_len,
                                p_max_len=recipe.p_max_len, k=run_depth(preset), metrics=preset.metrics,
                                batch_size=recipe.encode_batch, embeddings_path=out_dir / "corpus_embeddings.npy",
                                embedding_dtype=recipe.embedding_dtype)
        _, ids = ev["corpus_embeddings"]
        (out_dir / "corpus_ids.json").write_text(json.dumps(list(ids)))
        ranked = {q: [d for d, _ in sorted(docs.items(), key=lambda x: (-x[1], x[0]))] for q, docs in ev["run"].items()}
        (out_dir / "run.json").write_text(json.dumps(ranked))
        entropy = None
        if entropy_texts:
            entropy = cls_attention_entropy(model.encoder("passage"), tok, list(entropy_texts),
                                            max_len=min(preset.entropy_max_len, preset.model.max_len)).tolist()
        history = model.train_result.history
        result = {"arm": arm, "round": round_number, "seed": seed, "n_queries": len(data), "steps": model.train_result.step,
                  "key": key, "dir": str(out_dir), "metrics": ev["metrics"], "loss": [r["loss"] for r in history],
                  "accuracy": [r.get("accuracy") for r in history], "entropy_after": entropy,
                  "wall_time": {"train": round(t_train, 2), "total": round(time.perf_counter() - t_start, 2),
                                "cpu": round(time.process_time() - cpu_start, 2)}}
        if not keep_model:  # only the numbers are reused: a tiny model is ~8 MB, 40 of them add up
            for p in out_dir.iterdir():
                if p.name not in ("run.json", "log.jsonl", "train_state.json", LOCK_FILE):
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        return result

    return compute_once(out_dir / "result.json", compute)


def _saved_embeddings(folder: Path) -> tuple[np.ndarray, list[str]] | None:
    """A finished round 1's corpus embeddings (a read-only memmap) and ids, or None when they are
    gone (mining then re-encodes the corpus with the round-1 model kept in the folder)."""
    if not (folder / "corpus_embeddings.npy").exists():
        return None
    ids = json.loads((folder / "corpus_ids.json").read_text())
    return np.load(folder / "corpus_embeddings.npy", mmap_mode="r"), ids


def load_run(result: Mapping) -> dict[str, dict[str, float]]:
    """A cached fine-tuning's run as ``{qid: {docid: score}}``, scores keeping the stored rank order. Chapter 6."""
    ranked = json.loads((Path(result["dir"]) / "run.json").read_text())
    return {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in ranked.items()}


# ---- STS-b and attention entropy ------------------------------------------------------------------


def sts_arm(
    arm: str,
    checkpoint: str,
    preset: Preset | str | None = None,
    size: int | None = None,
    seed: int = 0,
    data: tuple[Any, Any] | None = None,
    data_dir: str | None = None,
) -> dict:
    """Fine-tune ``checkpoint`` on ``size`` STS-b training pairs (``None``: all, for
    ``epochs_full``) with the cosine regression loss and return the test Spearman; cached
    (the weights are not kept). Condenser table 1. Explained in chapter 7."""
    preset = get_preset(preset)
    sts = preset.sts
    train_all, test = data if data is not None else sts_data(preset, data_dir)
    full = size is None or size >= len(train_all)
    train = train_all if full else sample_pairs(train_all, size, seed=seed)
    epochs = sts.epochs_full if full else sts.epochs_low_data
    key = settings_hash({"init": checkpoint_key(checkpoint), "n": len(train), "test": len(test), "seed": seed,
                         "epochs": epochs, "sts": resolved(sts)})
    out_dir = cache_dir("sts") / f"{arm}-n{len(train)}-s{seed}-{key}"

    def compute() -> dict:
        t0, cpu0 = time.perf_counter(), time.process_time()
        tok = load_tokenizer(checkpoint)
        model = finetune_sts(checkpoint, train, tok, dataclasses.replace(sts, epochs=epochs, seed=seed), out_dir,
                             max_len=sts.max_len, dropout=sts.dropout, progress=False, resume=False)
        spearman = evaluate_sts(model, test, tok, max_len=sts.max_len)
        for p in out_dir.iterdir():  # the weights are not reused: keep only the numbers and the log
            if p.is_dir():
                shutil.rmtree(p)
            elif p.name not in ("log.jsonl", LOCK_FILE):
                p.unlink()
        return {"arm": arm, "seed": seed, "n_pairs": len(train), "epochs": epochs, "spearman": spearman,
                "steps": model.train_result.step, "wall_time": round(time.perf_counter() - t0, 2),
                "cpu_time": round(time.process_time() - cpu0, 2)}

    return compute_once(out_dir / "result.json", compute)


def entropy_before(checkpoint: str, texts: Sequence[str], preset: Preset | str | None = None) -> list[float]:
    """CLS attention entropy per layer of a pre-trained checkpoint's backbone (chapter 5)."""
    preset = get_preset(preset)
    max_len = min(preset.entropy_max_len, preset.model.max_len)
    return cls_attention_entropy(load_encoder(checkpoint), load_tokenizer(checkpoint), list(texts), max_len=max_len).tolist()
