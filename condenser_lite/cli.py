"""Command line for long runs that do not belong in a notebook.

    python -m condenser_lite pretrain --method condenser --init runs/bert --set max_steps=2000
    python -m condenser_lite pretrain --preset paper --method cocondenser --set max_steps=100
    python -m condenser_lite finetune --init Luyu/co-condenser-marco --data msmarco --rounds 2 --output-dir ft
    python -m condenser_lite search --model ft/round2 --data msmarco --split dev --out dev.trec
    python -m condenser_lite evaluate --run dev.trec --data msmarco --split dev --metrics RR@10 R@1000
    python -m condenser_lite experiments --budget tiny

Every sub-command reads the same presets as the notebooks; ``--set key=value`` overrides any
field of the preset (``--set lr=1e-4 --set chunk_size=64``). Run ``... <command> --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any


def parse_overrides(obj: Any, pairs: list[str]) -> Any:
    """Apply ``key=value`` strings to a dataclass, converting each value to the field's type."""
    from .config import parse_bool

    fields = {f.name: f for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--set expects key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in fields:
            raise SystemExit(f"unknown setting {key!r}; known: {', '.join(sorted(fields))}")
        current = getattr(obj, key)
        if raw.lower() in ("none", "null"):
            value: Any = None
        elif isinstance(current, bool):
            value = parse_bool(raw, key)
        elif isinstance(current, int):
            value = int(raw)
        elif isinstance(current, float):
            value = float(raw)
        elif isinstance(current, str) or current is None:
            try:  # a None-valued field may be numeric (max_steps, chunk_size)
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw
        else:
            value = json.loads(raw)
        changes[key] = value
    return dataclasses.replace(obj, **changes)


def _pretrain(args: argparse.Namespace) -> None:
    from .pretraining import PretrainConfig, paper_cocondenser, paper_condenser, pretrain

    if args.preset == "paper":
        cfg = paper_cocondenser() if args.method == "cocondenser" else paper_condenser()
        cfg = dataclasses.replace(cfg, method=args.method)
    else:
        cfg = PretrainConfig(method=args.method, corpus="scifact" if args.method == "cocondenser" else "general")
    if args.init:
        cfg = dataclasses.replace(cfg, init=args.init)
    if args.corpus:
        cfg = dataclasses.replace(cfg, corpus=args.corpus)
    cfg = parse_overrides(cfg, args.set)
    out = pretrain(cfg, output_dir=args.output_dir, data_dir=args.data_dir, progress=True)
    print(out)


# ---- retrieval: finetune, encode, search, evaluate ----------------------------------------

TEVATRON_TASKS = {"msmarco": "Tevatron/msmarco-passage", "nq": "Tevatron/wikipedia-nq"}


def eval_set(name: str, split: str, data_dir: str | None):
    """A BEIR-style evaluation set: a BEIR name (``scifact``) or a Tevatron task (``msmarco``, ``nq``)."""
    from .data import load_beir, load_tevatron, load_tevatron_corpus
    from .retrieval import tevatron_eval_set

    if name in TEVATRON_TASKS or name.startswith("Tevatron/"):
        hub = TEVATRON_TASKS.get(name, name)
        return tevatron_eval_set(load_tevatron(hub, split, data_dir), load_tevatron_corpus(hub, data_dir), split=split)
    return load_beir(name, data_dir=data_dir)


def training_set(name: str, data_dir: str | None, n_negatives: int):
    """Training queries in Tevatron's schema: read directly, or built from a BEIR set with BM25 negatives."""
    from .data import load_tevatron
    from .retrieval import to_tevatron

    if name in TEVATRON_TASKS or name.startswith("Tevatron/"):
        return load_tevatron(TEVATRON_TASKS.get(name, name), "train", data_dir)
    return to_tevatron(name, split="train", n_negatives=n_negatives, data_dir=data_dir)


def _preset(args: argparse.Namespace):
    from .retrieval import RETRIEVER_PRESETS

    preset = args.preset or ("scifact" if args.data == "scifact" else args.data)
    if preset not in RETRIEVER_PRESETS:
        raise SystemExit(f"no fine-tuning preset {preset!r}; choose --preset from {sorted(RETRIEVER_PRESETS)}")
    return parse_overrides(RETRIEVER_PRESETS[preset], args.set)


def _finetune(args: argparse.Namespace) -> None:
    from pathlib import Path

    from .retrieval import finetune_retriever, mine_hard_negatives, sample_queries, train_config_from_preset
    from .tokenizer import load_tokenizer

    preset = _preset(args)
    train = training_set(args.data, args.data_dir, preset.n_bm25_negatives)
    if args.train_size:
        train = sample_queries(train, args.train_size, seed=args.seed)
    tok = load_tokenizer(args.init)
    common = dict(q_max_len=preset.q_max_len, p_max_len=preset.p_max_len, train_n_passages=preset.train_n_passages,
                  untied=preset.untied, temperature=preset.temperature, grad_cache_chunk=preset.grad_cache_chunk)
    out = Path(args.output_dir)
    cfg1 = train_config_from_preset(preset, out / "round1" if args.rounds == 2 else out, round=1, seed=args.seed,
                                    max_steps=args.max_steps, progress=True)
    finetune_retriever(args.init, train, tok, cfg1, **common)
    if args.rounds == 2:
        # round 2 restarts from the *pre-trained* checkpoint on BM25 + mined negatives
        corpus = eval_set(args.data, "test" if args.data not in TEVATRON_TASKS else "dev", args.data_dir).corpus
        train2 = mine_hard_negatives(cfg1.output_dir, train, corpus, depth=preset.mine_depth, n=preset.n_mined,
                                     seed=args.seed, q_max_len=preset.q_max_len, p_max_len=preset.p_max_len)
        cfg2 = train_config_from_preset(preset, out / "round2", round=2, seed=args.seed, max_steps=args.max_steps,
                                        progress=True)
        finetune_retriever(args.init, train2, tok, cfg2, **common)
    print(out)


def _encode(args: argparse.Namespace) -> None:
    import numpy as np

    from .retrieval import BiEncoder, encode_corpus
    from .tokenizer import load_tokenizer

    data = eval_set(args.data, args.split, args.data_dir)
    embs, ids = encode_corpus(BiEncoder.from_pretrained(args.model), data.corpus, load_tokenizer(args.model),
                              args.p_max_len, batch_size=args.batch_size)
    np.savez(args.out, embeddings=embs, ids=np.array(ids))
    print(f"{len(ids)} passages x {embs.shape[1]} dims -> {args.out}")


def _search(args: argparse.Namespace) -> None:
    from .metrics import evaluate_run
    from .retrieval import evaluate_retriever, write_trec_run

    data = eval_set(args.data, args.split, args.data_dir)
    result = evaluate_retriever(args.model, data, split=args.split, q_max_len=args.q_max_len,
                                p_max_len=args.p_max_len, k=args.k, batch_size=args.batch_size,
                                index_type=args.index)
    if args.out:
        write_trec_run(result["run"], args.out, tag=str(args.model))
    metrics = evaluate_run(data.qrels[args.split], result["run"], args.metrics)
    print(json.dumps({k: round(v, 4) for k, v in metrics.items()}))


def _evaluate(args: argparse.Namespace) -> None:
    from .metrics import evaluate_run
    from .retrieval import read_trec_run

    data = eval_set(args.data, args.split, args.data_dir)
    metrics = evaluate_run(data.qrels[args.split], read_trec_run(args.run), args.metrics)
    print(json.dumps({k: round(v, 4) for k, v in metrics.items()}))


def _experiments(args: argparse.Namespace) -> None:
    from .experiments import format_scorecard, get_budget, run_protocol

    budget = parse_overrides(get_budget(args.budget), args.set)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
    results = run_protocol(budget, out_path=args.out, seeds=seeds, data_dir=args.data_dir, force=args.force,
                           workers=args.workers)
    print(format_scorecard(results))
    print(f"wall time {results['wall_time']['total']:.0f}s; results: {args.out or 'the cache (pass --out)'}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m condenser_lite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pretrain", help="one MLM / Condenser / coCondenser pre-training stage")
    p.add_argument("--method", choices=["mlm", "condenser", "cocondenser"], default="condenser")
    p.add_argument("--preset", choices=["tiny", "paper"], default="tiny")
    p.add_argument("--init", help="starting checkpoint folder or Hub id (default: the preset's)")
    p.add_argument("--corpus", help="general | wikipedia | scifact | msmarco | wikipedia-nq")
    p.add_argument("--output-dir", help="default: a cache folder named by the settings' hash")
    p.add_argument("--data-dir", help="local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset field")
    p.set_defaults(handler=_pretrain)

    def data_args(p: argparse.ArgumentParser, split: str | None = "test") -> None:
        p.add_argument("--data", default="scifact", help="scifact (or another BEIR name) | msmarco | nq")
        if split is not None:
            p.add_argument("--split", default=split, help="evaluation split (scifact: test; msmarco/nq: dev)")
        p.add_argument("--data-dir", help="local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)")

    metrics = ["nDCG@10", "RR@10", "R@100"]
    p = sub.add_parser("finetune", help="fine-tune a dense retriever (round 1, or both rounds with --rounds 2)")
    p.add_argument("--init", required=True, help="pre-trained checkpoint folder or Hub id")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--preset", help="msmarco | nq | scifact (default: the data set's)")
    p.add_argument("--rounds", type=int, choices=[1, 2], default=1)
    p.add_argument("--train-size", type=int, help="a seeded sample of this many training queries")
    p.add_argument("--max-steps", type=int, help="stop after this many updates (smoke runs)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset field")
    data_args(p, split=None)
    p.set_defaults(handler=_finetune)

    p = sub.add_parser("encode", help="encode a corpus with a retriever into an .npz (embeddings, ids)")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--p-max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=128)
    data_args(p)
    p.set_defaults(handler=_encode)

    p = sub.add_parser("search", help="encode, search with FAISS, write a TREC run and print its metrics")
    p.add_argument("--model", required=True)
    p.add_argument("--out", help="TREC run file to write")
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--q-max-len", type=int, default=32)
    p.add_argument("--p-max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--index", default="flat", help="flat (exact, default) | hnsw | ivf | a faiss factory string")
    p.add_argument("--metrics", nargs="+", default=metrics)
    data_args(p)
    p.set_defaults(handler=_search)

    p = sub.add_parser("evaluate", help="score a TREC run file with ir_measures")
    p.add_argument("--run", required=True)
    p.add_argument("--metrics", nargs="+", default=metrics)
    data_args(p)
    p.set_defaults(handler=_evaluate)

    p = sub.add_parser("experiments", help="the scaled-down reproduction: every arm, seeds, scorecard (JSON)")
    p.add_argument("--budget", choices=["tiny", "micro", "full"], default="tiny")
    p.add_argument("--out", help="write the results JSON here (it is also cached by its settings)")
    p.add_argument("--seeds", help="comma-separated seeds, e.g. 0,1,2 (default: the budget's)")
    p.add_argument("--workers", type=int, help="processes for independent jobs (default: CPU cores, at most 2)")
    p.add_argument("--force", action="store_true", help="recompute the results file (models stay cached)")
    p.add_argument("--data-dir", help="local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a budget field")
    p.set_defaults(handler=_experiments)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.handler(args)


if __name__ == "__main__":
    main(sys.argv[1:])
