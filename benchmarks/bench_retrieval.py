"""Retrieval speed on SciFact, all measured in this run.

Prints
  1. passages/s encoded by `search.encode` (length-sorted batches, no grad, eval mode) and by a
     plain loop over the same checkpoint in input order (tokenise each batch with padding, run
     AutoModel, take the CLS; what a sentence-transformers-style `model.encode` does without its
     length sorting), with their ratio and the largest difference between the two embeddings;
     the same for the 1,409 SciFact claims (short, varied lengths: where sorting pays);
  2. FAISS exact inner-product search latency for the 300 SciFact test queries over the 5,183
     passages (index build, then search; best of a few repeats);
  3. BM25 (bm25s) index and search time and its SciFact test nDCG@10 / R@100.

The model is a tiny *random* BERT (the tiny preset's shape: 4 layers, hidden 128) with a WordPiece
vocabulary trained on the SciFact abstracts: speed does not depend on the weights.

    python benchmarks/bench_retrieval.py [--quick] [--batch 128] [--max-len 128] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def plain_encode(model, tok, strings: list[str], max_len: int, batch: int):
    """The baseline: batches in input order, padded to the batch's longest, CLS of the last layer."""
    import numpy as np
    import torch

    out = []
    model.eval()
    with torch.no_grad():
        for s in range(0, len(strings), batch):
            enc = tok(strings[s:s + batch], padding=True, truncation=True, max_length=max_len,
                      return_tensors="pt", return_token_type_ids=False)
            out.append(model(**enc).last_hidden_state[:, 0].numpy())
    return np.concatenate(out)


def timed(repeats: int, fn):
    """(best wall time over `repeats` calls, last result)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 passages for the encoding comparison")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per encoder (default 1 with --quick, else 2)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    args = ap.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModel, BertModel
    from transformers.utils import logging as hf_logging

    from condenser_lite.data.beir import corpus_columns, load_beir
    from condenser_lite.data.tokenizer import train_wordpiece
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.retrieval.biencoder import passage_strings, token_ids
    from condenser_lite.retrieval.bm25 import BM25Index
    from condenser_lite.retrieval.metrics import evaluate_run
    from condenser_lite.retrieval.search import FaissIndex, encode

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    args.repeats = args.repeats or (1 if args.quick else 2)
    if args.threads:
        torch.set_num_threads(args.threads)

    beir = load_beir("scifact", data_dir=args.data_dir)
    ids, titles, texts = corpus_columns(beir.corpus)
    qrels = beir.qrels["test"]
    queries = {q: t for q, t in zip(beir.queries["_id"], beir.queries["text"]) if q in qrels}
    print(f"SciFact: {len(ids):,} passages, {len(queries)} test queries; torch threads {torch.get_num_threads()}")

    rows = []
    # ---- 3. BM25 (first: needs no model) ----------------------------------------------------
    t = time.perf_counter()
    index = BM25Index(beir.corpus)
    t_index = time.perf_counter() - t
    t = time.perf_counter()
    run = index.search(queries, k=100)
    t_search = time.perf_counter() - t
    bm25 = evaluate_run(qrels, run, ("nDCG@10", "R@100"))
    stem = "stemmed (PyStemmer)" if index.stemmer else "unstemmed"

    # ---- 1. encoding ------------------------------------------------------------------------
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        tok = train_wordpiece(titles + texts, vocab_size=8192, save_dir=d)
        t_tok = time.perf_counter() - t
        torch.manual_seed(0)
        BertModel(get_preset("tiny").model.bert_config(tok, max_position_embeddings=128), add_pooling_layer=False).save_pretrained(d)
        model = AutoModel.from_pretrained(d, add_pooling_layer=False).eval()
        n = 1000 if args.quick else len(ids)
        strings = passage_strings(tok, titles[:n], texts[:n])
        lengths = [len(x) for x in token_ids(tok, strings, args.max_len)]
        # warm-up both paths once (first-call allocations), then time
        encode(model, (titles[:64], texts[:64]), tok, max_len=args.max_len, batch_size=args.batch)
        plain_encode(model, tok, strings[:64], args.max_len, args.batch)
        # Interleaved repeats, best time of each: the machine may be shared.
        t_ours, ours = timed(args.repeats, lambda: encode(model, (titles[:n], texts[:n]), tok, max_len=args.max_len, batch_size=args.batch))
        t_base, base = timed(args.repeats, lambda: plain_encode(model, tok, strings, args.max_len, args.batch))
        diff = float(np.abs(ours - base).max())
        # The same comparison on all SciFact claims: short texts of varied length, where sorting
        # by length removes most of the padding (passages above are nearly all cut at max_len).
        claims = [str(x) for x in beir.queries["text"]]
        t_ours_q, ours_q = timed(args.repeats, lambda: encode(model, claims, tok, max_len=64, batch_size=args.batch))
        t_base_q, base_q = timed(args.repeats, lambda: plain_encode(model, tok, claims, 64, args.batch))
        diff_q = float(np.abs(ours_q - base_q).max())

        # ---- 2. FAISS over the whole corpus --------------------------------------------------
        p_embs = ours if n == len(ids) else encode(model, (titles, texts), tok, max_len=args.max_len, batch_size=args.batch)
        q_ids = list(queries)
        q_embs = encode(model, [queries[q] for q in q_ids], tok, max_len=64, batch_size=args.batch)
    builds, searches = [], []
    for _ in range(5):
        t = time.perf_counter()
        fi = FaissIndex(p_embs, ids)
        builds.append(time.perf_counter() - t)
        t = time.perf_counter()
        fi.search(q_embs, q_ids, k=100)
        searches.append(time.perf_counter() - t)

    print(f"(WordPiece vocabulary trained in {t_tok:.1f} s; passages: mean {np.mean(lengths):.0f} tokens, "
          f"{np.mean(np.array(lengths) == args.max_len):.0%} truncated at {args.max_len})\n")
    rows = [
        ("encode: search.encode (length-sorted)", f"{n / t_ours:,.0f} passages/s", f"{t_ours:.1f} s for {n:,}"),
        ("encode: plain AutoModel loop (input order)", f"{n / t_base:,.0f} passages/s", f"{t_base:.1f} s for {n:,}"),
        ("encode: speed-up ours / plain", f"{t_base / t_ours:.2f}x", f"max |emb diff| {diff:.1e}"),
        ("encode claims: search.encode", f"{len(claims) / t_ours_q:,.0f} texts/s", f"{len(claims):,} claims, max_len 64"),
        ("encode claims: plain loop", f"{len(claims) / t_base_q:,.0f} texts/s", ""),
        ("encode claims: speed-up ours / plain", f"{t_base_q / t_ours_q:.2f}x", f"max |emb diff| {diff_q:.1e}"),
        ("FAISS flat IP: build index (5,183 x 128)", f"{min(builds) * 1e3:.2f} ms", "best of 5"),
        ("FAISS flat IP: search 300 queries, k=100", f"{min(searches) * 1e3:.1f} ms",
         f"{min(searches) / len(q_ids) * 1e6:.0f} us/query"),
        (f"BM25 ({stem}): index", f"{t_index:.2f} s", f"{len(ids) / t_index:,.0f} passages/s"),
        ("BM25: search 300 queries, k=100", f"{t_search * 1e3:.0f} ms", f"{t_search / len(queries) * 1e3:.2f} ms/query"),
        ("BM25: SciFact test nDCG@10 / R@100", f"{bm25['nDCG@10']:.4f} / {bm25['R@100']:.4f}", "BEIR paper: 0.665 nDCG@10"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'value':>22}  note")
    for name, value, note in rows:
        print(f"{name:<{w}}  {value:>22}  {note}")


if __name__ == "__main__":
    main()
