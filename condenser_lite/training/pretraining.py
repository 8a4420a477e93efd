"""Running a pre-training stage (MLM, Condenser, coCondenser) from its ``StageConfig``: the model
built, the step, the stage cached by its key (``stage_cache``) and gauged on the held-out set
(``pretraining_data``). A stage is the loop's config itself (``StageRecipe`` is a
``loop.TrainConfig``). Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3
(``notebooks/03_cocondenser.ipynb``).
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from tqdm import tqdm

from ..data.sources import load_pretraining_corpus
from ..modeling.condenser import BertMLM, Condenser
from ..modeling.variant import CondenserVariant, deviations
from ..modeling.gradcache import cocondenser_step
from ..modeling.masking import MLMCollator
from ..modeling.spans import SpanPairCollator
from ..utils.cache import cache_dir, output_lock, settings_diff, settings_hash
from ..utils.errors import CheckpointError, ConfigError
from ..utils.loading import check_checkpoint, check_vocabulary, has_head, read_condenser_config
from .accounting import stage_compute
from .checkpoint import save_model
from .loop import set_step_seed, train
from .progress import TrainResult
from .pretraining_config import StageConfig, stage_name
from .pretraining_data import final_gauges, general_blocks, heldout_set, span_pairs, stage_gauges
from .stage_cache import DONE_FILE, get_tokenizer, is_done, stage_settings
from .threads import counts_used

logger = logging.getLogger(__name__)


def _check_head_choice(cfg: StageConfig) -> None:
    """coCondenser continues a Condenser with its head: refuse a headless ``init`` with
    ``head='load'`` naming both ways out, and warn when the head starts fresh (a deviation)."""
    if cfg.resolved_head == "load" and not has_head(cfg.init):
        raise ConfigError(
            f"coCondenser starts from {cfg.init!r} with head='load', but that checkpoint has no Condenser head "
            "(the published Luyu/condenser has none). Either pre-train stage 1 yourself "
            "(pretrain(paper_condenser()), then paper_cocondenser(init=<its folder>)), or start the head fresh "
            "with head='random' (--set stages.cocondenser.head=random), a deviation from the paper.")
    if cfg.resolved_head == "random":
        warnings.warn(f"coCondenser stage from {cfg.init!r} with a fresh, untrained Condenser head: a deviation from "
                      "the paper, which continues a Condenser with its trained head (pre-train stage 1 yourself "
                      "with paper_condenser() to follow it)", UserWarning, stacklevel=3)


def _check_head_shape(cfg: StageConfig) -> None:
    """A stage that continues a saved Condenser head must give it the shape it was trained with:
    the stage's ``skip_from`` / ``n_head_layers`` come from its preset, the head from the checkpoint,
    and a head read from another layer than it learnt on would train on, silently wrong."""
    saved = read_condenser_config(cfg.init) or {}
    asked = {"skip_from": cfg.model.skip_from, "n_head_layers": cfg.model.n_head_layers}
    differ = {k: v for k, v in asked.items() if k in saved and saved[k] != v}
    if differ:
        have = ", ".join(f"{k}={saved[k]}" for k in differ)
        fix = " ".join(f"--set model.{k}={saved[k]}" for k in differ)
        raise ConfigError(f"the Condenser head in {cfg.init!r} was trained with {have}, but this stage asks for "
                          + ", ".join(f"{k}={v}" for k, v in differ.items())
                          + f"; pass {fix} to continue that head, or --set stages.{stage_name(cfg.method, cfg.init)}.head=random "
                          "for a fresh one")


def build_model(cfg: StageConfig, tokenizer, init_seed: int | None = None):
    """``BertMLM`` for ``mlm``, ``Condenser`` otherwise (``CondenserVariant`` where the stage turns
    on a switch of the mechanism page or the control), from scratch or from ``cfg.init``.

    Random initial weights (a model from scratch, a fresh Condenser head) are drawn as "step 0"
    of the stage's seed: without it they came from torch's start-up seed, which differs in every
    process, so a stage re-run from a cold cache gave other numbers. ``init_seed`` draws them
    from ``torch.manual_seed(init_seed)`` instead: the sizing study's runs (chapter 9) were keyed
    with that draw, and a run trained anew under the same key must start from the same weights."""
    if init_seed is None:
        set_step_seed(cfg.seed, 0)  # the training loop seeds steps 1, 2, ...
    else:
        torch.manual_seed(init_seed)

    switches = deviations(cfg)
    head_copy = switches.pop("head_mlm_probability", None)  # the collator's: the model reads a batch input
    condenser_kw = dict(skip_from=cfg.model.skip_from, n_head_layers=cfg.model.n_head_layers, late_mlm=cfg.late_mlm, **switches)
    # the head's own masked copy is a batch input only the variant's forward reads
    condenser = CondenserVariant if head_copy is not None else Condenser.class_for(condenser_kw)
    if cfg.init is None and cfg.method != "mlm" and cfg.resolved_head == "load":
        raise ConfigError("head='load' needs an init checkpoint that has a Condenser head: pass --init a Condenser "
                          "checkpoint, or --set stages.cocondenser.head=random for a new head")
    if cfg.method == "cocondenser":
        _check_head_choice(cfg)
    if cfg.init is None:
        config = cfg.model.bert_config(tokenizer)
        model = BertMLM.from_config(config) if cfg.method == "mlm" else condenser.from_config(config, **condenser_kw)
    elif cfg.method == "mlm":
        model = BertMLM.from_pretrained(cfg.init)
    elif cfg.resolved_head == "load":
        _check_head_shape(cfg)
        model = condenser.from_pretrained(cfg.init, head="load", **condenser_kw)
    else:
        model = condenser.from_bert(cfg.init, **condenser_kw)
    if cfg.init is not None and tokenizer is not None:  # ids past the embeddings: an IndexError mid-run
        check_vocabulary(model.backbone.config, tokenizer, cfg.init)
    # the kernel only (eager and sdpa agree to ~5e-7); the head's layers share the backbone's config
    model.backbone.set_attn_implementation(cfg.model.attn_implementation)
    return model



def mlm_step(model, batch: dict, accelerator) -> dict[str, float]:
    """One MLM/Condenser micro-batch through ``train``'s ``step_fn`` hook: forward, backward,
    the output's losses (the loop scales the gradients for accumulation). Chapter 2."""
    out = model(**batch)
    accelerator.backward(out.loss)
    return {k: float(getattr(out, k).detach()) for k in ("loss", "head_loss", "late_loss")
            if getattr(out, k, None) is not None}


def counted(step_fn, grad_accum: int):
    """``step_fn`` that also reports its batch's sizes (``accounting.COUNTS``) for compute
    accounting. The loop averages metrics over micro-batches and processes, so each count is
    scaled by both: the logged value is the whole optimizer step's. Chapter 4."""

    def step(model, batch: dict, accelerator) -> dict[str, float]:
        metrics = step_fn(model, batch, accelerator)
        rows, length = batch["input_ids"].shape
        scale = grad_accum * accelerator.num_processes
        metrics.update(tokens=float(batch["attention_mask"].sum()) * scale, positions=float(rows * length * scale),
                       pairs=float(rows * length * length * scale),
                       masked=float((batch["labels"] != -100).sum()) * scale if "labels" in batch else 0.0)
        if "head_labels" in batch:  # the head's own masked copy: its early layers and MLM loss
            metrics["head_masked"] = float((batch["head_labels"] != -100).sum()) * scale
        return metrics

    return step



# ---- running a stage -------------------------------------------------------------------------


def stage_training(cfg: StageConfig, tokenizer, mlm_collator: MLMCollator, data_dir: str | None = None,
                   corpus: Dataset | None = None):
    """``(data, collate_fn, step_fn)`` of a stage: coCondenser's span pairs with the gradient-cache
    step (``cocondenser_step``), or the packed blocks of an MLM or Condenser stage with the plain
    step; what ``pretrain`` trains and ``benchmarks/bench_pretrain.py`` times. Chapters 2 and 3."""
    if cfg.method == "cocondenser":
        step_fn = functools.partial(cocondenser_step, chunk_size=cfg.chunk_size, mlm_weight=cfg.mlm_weight,
                                    co_weight=cfg.co_weight)
        return span_pairs(cfg, tokenizer, data_dir), SpanPairCollator(mlm_collator), step_fn
    return general_blocks(cfg, tokenizer, data_dir, corpus), mlm_collator, mlm_step


def pretrain(
    cfg: StageConfig,
    output_dir: str | Path | None = None,
    data_dir: str | None = None,
    progress: bool | None = None,
    restart: bool = False,
    check: Callable[[int, Mapping[str, float]], dict] | None = None,
) -> Path:
    """Run one pre-training stage (or reuse it from the cache) and return its checkpoint folder.

    The folder holds a plain Hugging Face BERT checkpoint (the backbone; with a Condenser also
    ``condenser_head.pt``), the tokenizer, the training log ``train/log.jsonl`` and
    ``pretrain_config.json``. Interrupting and calling again resumes from the last training
    checkpoint in ``train/``. The folder is named by ``stage_key`` unless ``output_dir`` is
    given; a finished stage there is reused only if it was made with the same
    ``stage_settings``, else ``CheckpointError`` names the differing ones (``restart=True``
    replaces it; so it does an unfinished one). The folder is locked while the stage runs
    (``cache.output_lock``): a second process asking for it waits, then reuses it.
    ``check`` (``health.stage_check``) judges every held-out evaluation against the committed
    runs: its line is printed (logged without ``progress``), its verdict joins the log line and the
    stage's record keeps the updates outside the band. Explained in chapter 2
    (``notebooks/02_condenser.ipynb``).
    """
    if cfg.init is not None:
        check_checkpoint(cfg.init)
    tokenizer = get_tokenizer(cfg, data_dir)
    settings = stage_settings(cfg, tokenizer, data_dir)
    key = settings_hash(settings)
    out = Path(output_dir) if output_dir is not None else cache_dir("checkpoints") / f"{cfg.method}-{key}"
    with output_lock(out):
        if restart:
            (out / DONE_FILE).unlink(missing_ok=True)
        elif is_done(out):
            _check_stage_record(out, key, settings)
            logger.info("reusing the pre-trained stage in %s", out)
            return out
        elif (out / "config.json").exists() and not (out / "train" / "checkpoint").exists():
            raise CheckpointError(f"{out} holds a model that no pre-training stage finished there (no {DONE_FILE}); "
                                  "it is not overwritten: use another output folder, or restart=True (command "
                                  "line: --restart) to replace it")
        model = build_model(cfg, tokenizer)
        mlm_collator = MLMCollator(tokenizer, mlm_probability=cfg.mlm_probability,
                                   head_mlm_probability=cfg.head_mlm_probability)
        # MLM stages load the general corpus once, for training and (first time) the held-out set
        corpus = load_pretraining_corpus(data_dir=data_dir) if cfg.method != "cocondenser" and cfg.corpus == "general" \
            else None
        heldout = heldout_set(cfg, tokenizer, data_dir, corpus) if cfg.heldout_fraction is not None else None
        eval_fn = functools.partial(stage_gauges, batches=heldout["batches"],
                                    mask_draws=heldout.get("mask_draws", ())) if heldout else None
        on_eval = None
        if check is not None and heldout is not None:
            if hasattr(check, "check_heldout"):
                check.check_heldout(heldout["info"])
            on_eval = functools.partial(_health, check, progress)
        data, collate_fn, step_fn = stage_training(cfg, tokenizer, mlm_collator, data_dir, corpus)
        caller_threads = torch.get_num_threads()
        # the stage is the loop's config itself (StageRecipe is a TrainConfig)
        result = train(model, data, cfg, output_dir=out / "train", collate_fn=collate_fn,
                       step_fn=counted(step_fn, cfg.grad_accum), eval_fn=eval_fn, on_eval=on_eval,
                       depends_on=settings, resume=not restart, progress=progress)
        save_model(model, out)
        tokenizer.save_pretrained(out)
        record = _stage_record(cfg, model, data, result, heldout, caller_threads)
        record.update(key=key, settings=settings, health=_health_summary(result.history) if on_eval else None)
        (out / DONE_FILE).write_text(json.dumps(record, indent=2, default=str))
        # the optimizer state is only needed to resume an unfinished stage
        shutil.rmtree(out / "train" / "checkpoint", ignore_errors=True)
    return out


def _stage_record(cfg: StageConfig, model: torch.nn.Module, data: Any, result: TrainResult, heldout: dict | None,
                  caller_threads: int) -> dict:
    """What a finished stage's ``pretrain_config.json`` holds besides its key and health: its
    settings, updates, time, skipped documents, final gauges, compute and threads. Chapter 2."""
    if cfg.method == "cocondenser":
        n_skipped, n_documents, rows = data.n_skipped, data.n_documents, 2 * cfg.batch_size
    else:
        n_skipped, n_documents, rows = 0, 0, cfg.batch_size
    shape = {k: getattr(model.config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")}
    shape["n_head_layers"] = getattr(model, "n_head_layers", 0)
    if cfg.head_mlm_probability:  # the head reads its own masked copy: its early layers run again
        shape["head_copy_layers"] = cfg.model.skip_from
    grad_cache = cfg.method == "cocondenser" and cfg.chunk_size is not None and cfg.chunk_size < rows
    return {"config": cfg.settings(), "steps": result.step, "wall_time": result.wall_time,
            "skipped_documents": n_skipped, "documents": n_documents, "heldout": final_gauges(result.history),
            "heldout_set": heldout["info"] if heldout else None,
            "compute": stage_compute(result.history, cfg.method, shape, rows, grad_cache, result.wall_time),
            "threads": counts_used(result.history, caller_threads)}


def _health(check: Callable, progress: bool | None, step: int, values: Mapping[str, float]) -> dict:
    """One held-out evaluation judged by ``check``: its line shown, its verdict for the log."""
    verdict = dict(check(step, {k.removeprefix("eval_"): v for k, v in values.items()}))
    line = verdict.pop("line", None)
    if line:
        if progress:
            tqdm.write(line)
        else:
            logger.info(line)
    return verdict


def _health_summary(history: Sequence[Mapping]) -> dict:
    """A stage's health verdicts: how many evaluations fell within the band, and the updates that did not."""
    judged = [r for r in history if "health" in r]
    return {"evaluations": len(judged), "within": sum(r["health"] == "within" for r in judged),
            "outside": [{"step": r["step"], "health": r["health"], "excess": r.get("health_excess")}
                        for r in judged if r["health"] in ("above", "below")],
            "no_reference": sum(r["health"] == "none" for r in judged)}


def _check_stage_record(out: Path, key: str, settings: dict) -> None:
    """A finished stage in ``out`` is the one asked for, or ``CheckpointError`` says what differs."""
    record = json.loads((out / DONE_FILE).read_text())
    if record.get("key") == key:
        return
    saved = json.loads(json.dumps(record.get("settings") or {}))
    now = json.loads(json.dumps(settings, default=str))  # as it reads back (tuples -> lists)
    diff = settings_diff(saved, now) if saved else [f"settings hash: saved {record.get('key')!r} vs now {key!r}"]
    raise CheckpointError(f"{out} holds another pre-training stage ({'; '.join(diff)}); use another output "
                          "folder, or restart=True (command line: --restart) to replace it")
