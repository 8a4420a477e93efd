"""What a pre-training stage reads: the general corpus's blocks, coCondenser's span pairs,
and the fixed held-out set with the gauges every stage logs on it.

Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3
(``notebooks/03_cocondenser.ipynb``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from datasets import Dataset

from ..data.beir import load_documents
from ..data.packing import heldout_split, mlm_eval_batches, pack_blocks
from ..data.sources import PRETRAINING_SOURCES, data_id, load_pretraining_corpus
from ..data.tevatron import TEVATRON_TASKS, load_tevatron_corpus
from ..modeling.condenser import Condenser
from ..modeling.gauges import cls_cosine, cls_reliance_gauge, cls_swap_gap, heldout_mlm_loss, unigram_entropy
from ..modeling.masking import MLMCollator
from ..modeling.spans import SpanPairs, tokenize_documents
from ..utils.cache import cache_dir, settings_hash
from .pretraining_config import StageConfig

TARGET_CORPORA = TEVATRON_TASKS  # the passage collections coCondenser reads, by the tasks' names


def general_sections(heldout_fraction: float | None, data_dir: str | None = None, corpus: Dataset | None = None):
    """``(train, heldout)`` sections of the scaled-down general corpus: with ``heldout_fraction``
    the hash split of ``packing.heldout_split`` (by document, so no held-out section shares
    an article with a training one), else ``(all, None)``. ``corpus``: the loaded corpus, if at
    hand. Chapter 2."""
    corpus = corpus if corpus is not None else load_pretraining_corpus(data_dir=data_dir)
    if heldout_fraction is None:
        return corpus, None
    return heldout_split(corpus, fraction=heldout_fraction)


def general_blocks(cfg: StageConfig, tokenizer, data_dir: str | None = None, corpus: Dataset | None = None):
    """The blocks an MLM or Condenser stage trains on, ``[CLS] ... [SEP]`` packed
    (``packing.pack_blocks``): the general corpus's training sections (held-out documents
    excluded, ``general_sections``; then the first ``corpus_limit``), or a reader's own corpus
    (``cfg.corpus`` a path or a retrieval corpus's name: ``target_documents``), all of it, each
    title a sentence of its own. Either way the held-out gauges read the general corpus's
    held-out set, so a stage on your corpus compares with the book's. Chapter 2."""
    if cfg.corpus not in ("general", "wikipedia"):
        train = _titled(target_documents(cfg, data_dir))
    elif cfg.corpus == "wikipedia":
        if cfg.heldout_fraction is not None:
            raise ValueError("held-out evaluation reads the scaled-down general corpus, not streamed Wikipedia: "
                             "set heldout_fraction=None at full scale")
        # streamed: materialise only what the budget needs
        stream = load_pretraining_corpus(data_dir=data_dir, full=True)
        train = Dataset.from_list(list(stream.take(cfg.corpus_limit or 1_000_000)))
    else:
        train, _ = general_sections(cfg.heldout_fraction, data_dir, corpus)
        if cfg.corpus_limit:
            train = train.select(range(min(cfg.corpus_limit, len(train))))
    return pack_blocks(train, tokenizer, max_len=cfg.model.max_len, short_seq_prob=cfg.short_seq_prob, seed=cfg.seed)


def _titled(docs: Dataset) -> Dataset:
    """Documents as one ``text`` each, the title (where there is one) on a line of its own before
    the text: packing splits sentences at line breaks, so a title never runs into the text."""
    texts = [f"{title.strip()}\n{text or ''}" if title and title.strip() else text or ""
             for title, text in zip(docs["title"], docs["text"])]
    return Dataset.from_dict({"text": texts})


def target_documents(cfg: StageConfig, data_dir: str | None = None):
    """The target search corpus coCondenser pre-trains on, or a reader's own corpus an MLM or
    Condenser stage does (rows with ``title`` and ``text``):
    ``msmarco`` / ``nq`` (Tevatron's passage collections), a BEIR name, or a path
    (a BEIR folder, a ``.jsonl`` of documents, a text file with one document per line:
    ``beir.load_documents``). Chapter 3."""
    if cfg.corpus in TARGET_CORPORA:
        docs = load_tevatron_corpus(TARGET_CORPORA[cfg.corpus], data_dir=data_dir)
    else:
        docs = load_documents(cfg.corpus, data_dir=data_dir)
    if cfg.corpus_limit:
        docs = docs.select(range(min(cfg.corpus_limit, len(docs))))
    return docs


def span_pairs(cfg: StageConfig, tokenizer, data_dir: str | None = None):
    """Per-epoch span pairs of the target corpus (``spans.SpanPairs``)."""
    ids = tokenize_documents(target_documents(cfg, data_dir), tokenizer)
    return SpanPairs(ids, max_len=cfg.model.max_len, min_span=cfg.min_span, seed=cfg.seed)



# ---- held-out evaluation and gauges -------------------------------------------------------

EVAL_SEED = 0  # packing and masking of the held-out blocks: one fixed set for every stage and seed
_EVAL_BATCH = 64  # blocks per evaluation batch (the [CLS] swap rolls within a batch)
RELIANCE_DRAWS = 3  # mask draws of the held-out blocks the [CLS]-reliance gauge averages over
# What a Condenser-family stage logs joins its cache key, so a cached stage is reused only where it
# logged the gauges the book reads (an MLM stage's key carries no such entry); the "-2" names how
# the ablation partners are drawn: from every held-out block, not only the batch's.
HEAD_GAUGES = "cls-reliance-2"


def heldout_set(cfg: StageConfig, tokenizer, data_dir: str | None = None, corpus: Dataset | None = None) -> dict:
    """The fixed held-out evaluation set of ``cfg``'s tokenizer, cached on disk:
    ``{"batches": [...], "info": {...}}``.

    ``batches``: ``eval_blocks`` blocks of the general corpus's held-out documents
    (``general_sections``), packed and masked once with ``EVAL_SEED``
    (``packing.mlm_eval_batches``), so every stage of every arm and pre-training seed is
    scored on the same tokens; each batch carries ``doc_id``, its blocks' documents (numbered by
    ``source`` and ``doc_id``, the key of the held-out split), so the [CLS]-reliance gauge takes
    its ablation partners from other documents. ``mask_draws``: ``RELIANCE_DRAWS - 1`` further
    maskings of the same blocks (the reliance gauge's noise covers masks). ``info``: ``unigram_entropy``, the cross-entropy of those masked
    tokens under the unigram model of the training sections (``gauges.unigram_entropy``: what
    a model that knows only word frequencies scores; computed once per tokenizer), and the counts
    (``n_blocks``, ``n_masked``, held-out ``sections``). The key covers the vocabulary itself, so
    a stage continuing a checkpoint finds its parent's set. Explained in chapter 2.
    """
    vocab = sorted(tokenizer.get_vocab().items())
    settings = {"vocab": settings_hash(vocab), "max_len": cfg.model.max_len, "short_seq_prob": cfg.short_seq_prob,
                "mlm_probability": cfg.mlm_probability, "fraction": cfg.heldout_fraction, "blocks": cfg.eval_blocks,
                "data": data_id(PRETRAINING_SOURCES, data_dir), "seed": EVAL_SEED,
                "doc_ids": True, "mask_draws": RELIANCE_DRAWS}
    path = cache_dir("heldout") / f"heldout-{settings_hash(settings)}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    train, held = general_sections(cfg.heldout_fraction, data_dir, corpus)
    blocks = pack_blocks(held, tokenizer, max_len=cfg.model.max_len, short_seq_prob=cfg.short_seq_prob, seed=EVAL_SEED)
    collator = MLMCollator(tokenizer, mlm_probability=cfg.mlm_probability)
    # a block's document: its section's (source, doc_id), numbered; sections of one article share it
    number: dict[tuple, int] = {}
    section_doc = torch.tensor([number.setdefault(key, len(number)) for key in zip(held["source"], held["doc_id"])])

    def draw(mask_seed: int) -> list[dict]:
        out = mlm_eval_batches(blocks, collator, n_blocks=cfg.eval_blocks, batch_size=_EVAL_BATCH, seed=EVAL_SEED,
                               mask_seed=mask_seed, columns=("doc_index",))
        for b in out:
            b["doc_id"] = section_doc[b.pop("doc_index")]
        return out

    batches = draw(EVAL_SEED)  # the blocks and masks of every committed stage's gauges, so runs compare
    mask_draws = [draw(EVAL_SEED + d) for d in range(1, RELIANCE_DRAWS)]
    # unigram counts from the training sections as text (packing would only drop a few short blocks)
    train_ids = tokenizer(list(train["text"]), add_special_tokens=False, return_attention_mask=False,
                          return_token_type_ids=False, verbose=False)["input_ids"]
    info = {"unigram_entropy": unigram_entropy(train_ids, batches, len(tokenizer), tokenizer.all_special_ids),
            "n_blocks": sum(len(b["input_ids"]) for b in batches),
            "n_masked": int(sum(int((b["labels"] != -100).sum()) for b in batches)),
            "sections": len(held), "heldout_fraction": cfg.heldout_fraction, "settings": settings}
    out = {"batches": batches, "mask_draws": mask_draws, "info": info}
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    torch.save(out, tmp)
    tmp.replace(path)
    return out


def stage_gauges(model, batches: list[dict], mask_draws: Sequence[list[dict]] = ()) -> dict[str, float]:
    """What a stage logs on the held-out batches (chapter 2): ``mlm_loss`` (the backbone's last
    layer) and ``cls_cosine`` (mean cosine between different blocks' late [CLS]) for every model;
    for a Condenser (and coCondenser) also ``head_loss``, the [CLS]-swap gap ``cls_swap_gap`` with
    its paired standard error ``cls_swap_noise`` (``gauges.cls_swap_gap``) and, where the batches
    carry ``doc_id`` (``heldout_set``), the pre-registered reliance gauge over ``batches`` and
    ``mask_draws`` (``gauges.cls_reliance_gauge``): ``cls_reliance`` (omitted where undefined),
    ``cls_reliance_noise``, ``cls_reliance_mask_spread``, ``cls_reliance_zero``,
    ``cls_reliance_mean`` and the losses it is made of, ``reliance_{own,ablated,zero,mean,late}_loss``
    (from which the scorecard recomputes it). Eval mode, no gradients."""
    out = heldout_mlm_loss(model, batches)
    out["cls_cosine"] = cls_cosine(model, batches)
    if isinstance(model, Condenser):
        swap = cls_swap_gap(model, batches)
        out["cls_swap_gap"], out["cls_swap_noise"] = swap["gap"], swap["noise"]
        if all("doc_id" in b for b in batches):
            rel = cls_reliance_gauge(model, [batches, *mask_draws])
            for k in ("own", "ablated", "zero", "mean", "late"):
                out[f"reliance_{k}_loss"] = rel[f"{k}_loss"]
            named = {"cls_reliance": "reliance", "cls_reliance_noise": "noise", "cls_reliance_mask_spread":
                     "mask_spread", "cls_reliance_zero": "reliance_zero", "cls_reliance_mean": "reliance_mean"}
            # the training log holds floats: an undefined value is left out, not written as NaN
            out.update({k: rel[v] for k, v in named.items() if rel[v] is not None})
    return out


def final_gauges(history: list[dict]) -> dict[str, float] | None:
    """The last held-out evaluation of a training log (``eval_*`` keys, prefix dropped, with its
    ``step``), or None if the stage evaluated nothing. Chapter 2."""
    for rec in reversed(history):
        values = {k[len("eval_"):]: v for k, v in rec.items() if k.startswith("eval_")}
        if values:
            return {"step": rec["step"], **values}
    return None

