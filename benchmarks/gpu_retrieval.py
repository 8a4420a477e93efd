"""Part 2 of ``bench_gpu.py`` (``--part retrieval``): ``finetune_retriever`` with the msmarco
preset's batch shape against a hand-written loop over the same batches, ``encode_corpus`` over the
SciFact corpus against a plain AutoModel loop, ``search`` (FAISS flat IP) and ``evaluate_retriever``
end to end, from random weights. ``bench_gpu.py`` runs it and holds the
command line; ``gpu_common.py`` the helpers both parts share (``python benchmarks/bench_gpu.py --help``).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from gpu_common import bert_config, free, peak_mb, print_table, sync


def autocast(dev: str, dtype: str):
    """bf16 autocast on a GPU for ``--dtype bf16``, else none: the plain baselines' precision."""
    if dev == "cuda" and dtype == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def plain_finetune_loop(model_dir: str, train, collator, steps: int, dev: str, dtype: str, lr: float,
                        precollate: bool = False, log_metrics: bool = False) -> float:
    """Baseline: the same batch shape through AutoModel + AdamW in a bare loop, rows read from the
    Dataset and collated each step as training.train does (``precollate``: batches built before
    timing, so only the GPU work is timed; ``log_metrics``: read loss and gradient norm back to
    the host every step, as a logging loop does). Seconds/step after 5 warm-up steps."""
    import random

    from transformers import AutoModel

    from condenser_lite.modeling.losses import retrieval_loss

    enc = AutoModel.from_pretrained(model_dir, add_pooling_layer=False).to(dev).train()
    opt = torch.optim.AdamW(enc.parameters(), lr=lr)
    random.seed(0)

    def make_batch():
        return {k: v.to(dev) for k, v in collator([train[random.randrange(len(train))] for _ in range(8)]).items()}

    ready = [make_batch() for _ in range(steps)] if precollate else None
    amp = autocast(dev, dtype)
    warm = min(5, steps - 1)
    for i in range(steps):
        if i == warm:
            sync(dev)
            t = time.perf_counter()
        b = ready[i] if precollate else make_batch()
        with amp:
            q = enc(input_ids=b["query_input_ids"], attention_mask=b["query_attention_mask"]).last_hidden_state[:, 0]
            p = enc(input_ids=b["passage_input_ids"], attention_mask=b["passage_attention_mask"]).last_hidden_state[:, 0]
        loss = retrieval_loss(q.float(), p.float(), collator.train_n_passages)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(enc.parameters(), 1.0)
        if log_metrics:  # host syncs: the CPU can no longer queue work ahead of the GPU
            float(loss), float(norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(dev)
    return (time.perf_counter() - t) / (steps - warm)


def collate_time(train, collator, n: int = 50) -> tuple[float, float]:
    """CPU seconds per batch of 8 queries: (reading the rows from the Dataset, tokenising them)."""
    import random

    random.seed(1)
    t_read = t_tok = 0.0
    for _ in range(n):
        t = time.perf_counter()
        rows = [train[random.randrange(len(train))] for _ in range(8)]
        t_read += time.perf_counter() - t
        t = time.perf_counter()
        collator(rows)
        t_tok += time.perf_counter() - t
    return t_read / n, t_tok / n


def plain_encode(model, tok, strings, max_len: int, batch: int, dev: str, dtype: str) -> np.ndarray:
    """Baseline: batches in input order, padded to the batch's longest, CLS of the last layer."""
    out = []
    model.eval()
    amp = autocast(dev, dtype)
    with torch.inference_mode(), amp:
        for s in range(0, len(strings), batch):
            enc = tok(strings[s:s + batch], padding=True, truncation=True, max_length=max_len,
                      return_tensors="pt", return_token_type_ids=False)
            enc = {k: v.to(dev) for k, v in enc.items()}
            out.append(model(**enc).last_hidden_state[:, 0].float().cpu().numpy())
    return np.concatenate(out)


def best_of(repeats: int, fn, dev: str):
    best, out = float("inf"), None
    for _ in range(repeats):
        sync(dev)
        t = time.perf_counter()
        out = fn()
        sync(dev)
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_retrieval(args) -> None:
    """Fine-tuning, encoding and search on SciFact from a random-init BERT: the library's loops
    against plain ones of the same shapes (their speeds, peak memory and agreement)."""
    work, beir, tok = _retrieval_setup(args)
    rows, pre = _finetune_rows(args, work, beir, tok)
    rows += _encode_and_search_rows(args, work, beir, tok, pre)
    print_table("Retrieval on SciFact (random-init weights: metrics are meaningless)", ["measure", "value", "note"],
                rows)


def _retrieval_setup(args):
    """SciFact (a slice with --quick), a WordPiece trained on it and a random-init BERT saved as
    the "pre-trained" checkpoint: ``(work folder, beir, tokenizer)``."""
    from transformers import BertForMaskedLM

    from condenser_lite.data.beir import corpus_columns, load_beir
    from condenser_lite.data.tokenizer import train_wordpiece

    dev = args.device
    beir = load_beir("scifact")
    ids, titles, texts = corpus_columns(beir.corpus)
    if args.quick:  # smoke test: a small corpus slice, only the queries whose positives are in it
        keep = set(ids[:300])
        beir.corpus = beir.corpus.filter(lambda r: str(r["_id"]) in keep)
        for split in list(beir.qrels):
            beir.qrels[split] = {q: d for q, d in beir.qrels[split].items() if d and set(d) <= keep}
        ids, titles, texts = corpus_columns(beir.corpus)
    work = Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    t = time.perf_counter()
    tok = train_wordpiece(titles + texts, vocab_size=args.vocab, save_dir=work / "init")
    t_tok = time.perf_counter() - t
    torch.manual_seed(0)
    cfg = bert_config(args, len(tok))
    BertForMaskedLM(cfg).save_pretrained(work / "init")  # a random "pre-trained" checkpoint
    print(f"\n[retrieval] SciFact {len(ids):,} passages; WordPiece trained on them in {t_tok:.1f} s, "
          f"{len(tok):,} tokens (asked {args.vocab:,}); BERT {cfg.num_hidden_layers} layers, hidden "
          f"{cfg.hidden_size}, random init, {args.dtype}, device {dev}", flush=True)

    return work, beir, tok


def _finetune_rows(args, work, beir, tok):
    """The fine-tuning rows (the msmarco recipe's batch shape, and the nq recipe's with --nq-steps)
    and the recipe: ``(rows, recipe)``; the model is left in ``work / "ft"``."""
    from condenser_lite.reproduction.configuration.presets import RETRIEVAL_RECIPES
    from condenser_lite.retrieval.biencoder import RetrievalCollator
    from condenser_lite.retrieval.bm25 import to_tevatron
    from condenser_lite.training.finetune import finetune_retriever, round_config

    dev, rows = args.device, []
    # Fine-tuning: msmarco preset batch shape, short run.
    pre = RETRIEVAL_RECIPES["msmarco"]
    t = time.perf_counter()
    train = to_tevatron(beir, "train", n_negatives=pre.n_bm25_negatives)
    t_tev = time.perf_counter() - t
    tc = round_config(pre, 1, len(train), max_steps=args.ft_steps, log_every=1,
                      mixed_precision=args.dtype if args.dtype == "bf16" else "no")
    quiet = dict(progress=False, resume=False)
    # Warm-up run first: padded lengths vary per batch, and every new shape costs first-time kernel
    # selection and allocations; whichever loop ran first in a process looked ~1.4x slower.
    finetune_retriever(work / "init", train, tok, tc, work / "ft_warm", q_max_len=pre.q_max_len,
                       p_max_len=pre.p_max_len, train_n_passages=pre.train_n_passages, **quiet)
    free(dev)
    t = time.perf_counter()
    model = finetune_retriever(work / "init", train, tok, tc, work / "ft", q_max_len=pre.q_max_len,
                               p_max_len=pre.p_max_len, train_n_passages=pre.train_n_passages, **quiet)
    t_ft = time.perf_counter() - t
    ft_mem = peak_mb(dev)
    hist = model.train_result.history
    warm = min(5, len(hist) - 1)
    s_per_step = (hist[-1]["elapsed"] - hist[warm - 1]["elapsed"]) / (hist[-1]["step"] - hist[warm - 1]["step"])
    del model
    free(dev)
    collator = RetrievalCollator(tok, pre.q_max_len, pre.p_max_len, pre.train_n_passages)
    s_plain = plain_finetune_loop(str(work / "init"), train, collator, args.ft_steps, dev, args.dtype, pre.lr)
    plain_mem = peak_mb(dev)
    free(dev)
    s_gpu = plain_finetune_loop(str(work / "init"), train, collator, args.ft_steps, dev, args.dtype, pre.lr,
                                precollate=True)
    s_log = plain_finetune_loop(str(work / "init"), train, collator, args.ft_steps, dev, args.dtype, pre.lr,
                                log_metrics=True)
    free(dev)
    t_read, t_coll = collate_time(train, collator)
    shape = f"{pre.batch_size} q x {pre.train_n_passages} p, {pre.q_max_len}/{pre.p_max_len} tok"
    rows += [
        ["to_tevatron (BM25 negatives, train split)", f"{t_tev:.1f} s", f"{len(train)} queries"],
        [f"finetune_retriever ({shape})", f"{1 / s_per_step:.2f} steps/s",
         f"{s_per_step * 1e3:.0f} ms/step (steps {warm + 1}-{hist[-1]['step']}); total call {t_ft:.1f} s; peak {ft_mem:,.0f} MB"],
        ["plain loop, same batch shape (baseline)", f"{1 / s_plain:.2f} steps/s",
         f"{s_plain * 1e3:.0f} ms/step; peak {plain_mem:,.0f} MB"],
        ["finetune_retriever / plain loop speed", f"{s_plain / s_per_step:.2f}x", ""],
        ["plain loop + loss and grad-norm read back each step", f"{1 / s_log:.2f} steps/s",
         f"{s_log * 1e3:.0f} ms/step; finetune_retriever / this: {s_log / s_per_step:.2f}x"],
        ["plain loop, batches collated before timing", f"{1 / s_gpu:.2f} steps/s", f"{s_gpu * 1e3:.0f} ms/step: the GPU work alone"],
        ["  CPU per batch: read 8 rows from the Dataset", f"{t_read * 1e3:.1f} ms", "rows carry 30 BM25 negatives each"],
        ["  CPU per batch: RetrievalCollator (tokenise)", f"{t_coll * 1e3:.1f} ms",
         f"TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM', '(unset)')}"],
    ]

    if args.nq_steps:  # the nq preset: 128 queries x 2 passages, 256 tokens, untied, gradient cache 32
        nq = RETRIEVAL_RECIPES["nq"]
        nq = dataclasses.replace(nq, batch_size=min(nq.batch_size, len(train)))
        tc2 = round_config(nq, 1, len(train), max_steps=args.nq_steps, log_every=1,
                           mixed_precision=tc.mixed_precision)
        free(dev)
        m2 = finetune_retriever(work / "init", train, tok, tc2, work / "ft_nq", q_max_len=nq.q_max_len,
                                p_max_len=nq.p_max_len, train_n_passages=nq.train_n_passages, untied=nq.untied,
                                chunk_size=nq.chunk_size, progress=False, resume=False)
        h2 = m2.train_result.history
        w2 = min(2, len(h2) - 1)
        s2 = (h2[-1]["elapsed"] - h2[w2 - 1]["elapsed"]) / (h2[-1]["step"] - h2[w2 - 1]["step"])
        rows.append([f"finetune_retriever nq preset ({tc2.batch_size} q x {nq.train_n_passages} p, "
                     f"{nq.p_max_len} tok, untied, cache {nq.chunk_size})", f"{1 / s2:.2f} steps/s",
                     f"{s2 * 1e3:.0f} ms/step; peak {peak_mb(dev):,.0f} MB"])
        del m2
        free(dev)

    return rows, pre


def _encode_and_search_rows(args, work, beir, tok, pre):
    """Encoding the corpus with the fine-tuned model (the library's path against a plain loop),
    FAISS search and evaluate_retriever end to end."""
    from transformers import AutoModel

    from condenser_lite.data.beir import corpus_columns, query_columns
    from condenser_lite.retrieval.biencoder import BiEncoder, passage_strings, token_ids
    from condenser_lite.retrieval.search import encode, encode_corpus, evaluate_retriever, search

    dev, rows = args.device, []
    ids, titles, texts = corpus_columns(beir.corpus)
    # Encoding the corpus with the fine-tuned model (the library's path) vs a plain loop.
    ft_dir = str(work / "ft")
    bi = BiEncoder.from_pretrained(ft_dir).to(dev)
    enc_kw = dict(p_max_len=args.max_len, batch_size=args.batch, device=dev, amp=args.dtype == "bf16")
    encode_corpus(bi, beir.corpus, tok, **enc_kw)  # warm-up
    free(dev)
    t_ours, (p_embs, p_ids) = best_of(args.repeats, lambda: encode_corpus(bi, beir.corpus, tok, **enc_kw), dev)
    enc_mem = peak_mb(dev)
    plain = AutoModel.from_pretrained(ft_dir, add_pooling_layer=False).to(dev)
    strings = passage_strings(tok, titles, texts)
    plain_encode(plain, tok, strings[:256], args.max_len, args.batch, dev, args.dtype)  # warm-up
    t_base, base = best_of(args.repeats, lambda: plain_encode(plain, tok, strings, args.max_len, args.batch, dev, args.dtype), dev)
    cos = (p_embs * base).sum(1) / (np.linalg.norm(p_embs, axis=1) * np.linalg.norm(base, axis=1))
    t = time.perf_counter()
    toks = token_ids(tok, strings, args.max_len)
    t_tokenize = time.perf_counter() - t
    n = len(ids)
    rows += [
        [f"encode_corpus ({n:,} passages, {args.max_len} tok, batch {args.batch})", f"{n / t_ours:,.0f} passages/s",
         f"{t_ours:.2f} s; peak {enc_mem:,.0f} MB; mean {np.mean([len(x) for x in toks]):.0f} tokens"],
        ["plain AutoModel loop, input order (baseline)", f"{n / t_base:,.0f} passages/s", f"{t_base:.2f} s"],
        ["encode_corpus / plain loop speed", f"{t_base / t_ours:.2f}x", f"min cosine(ours, plain) {cos.min():.4f}"],
        ["  of which tokenisation alone (CPU)", f"{n / t_tokenize:,.0f} passages/s", f"{t_tokenize:.2f} s"],
    ]

    # FAISS search and evaluate_retriever end to end.
    qrels = beir.qrels["test"]
    qids, qtexts = query_columns(beir.queries)
    qids = [q for q in qids if q in qrels and qrels[q]]
    qtext = dict(zip(*query_columns(beir.queries)))
    q_embs = encode(bi, [qtext[q] for q in qids], tok, max_len=pre.q_max_len, batch_size=args.batch, device=dev, side="query")
    t_search, run = best_of(5, lambda: search(p_embs, p_ids, q_embs, qids, k=100), "cpu")
    t_eval, res = best_of(1, lambda: evaluate_retriever(ft_dir, beir, "test", tok, q_max_len=pre.q_max_len,
                                                         p_max_len=args.max_len, batch_size=args.batch, device=dev), dev)
    metrics = ", ".join(f"{k} {v:.3f}" for k, v in res["metrics"].items())
    rows += [
        [f"search (FAISS flat IP, {len(qids)} queries, k=100)", f"{t_search * 1e3:.1f} ms",
         f"{t_search / len(qids) * 1e6:.0f} us/query, incl. index build"],
        ["evaluate_retriever end to end (encode+search+score)", f"{t_eval:.2f} s", f"random init: {metrics}"],
    ]
    return rows
