"""Command line for long runs that do not belong in a notebook.

    python -m condenser_lite pretrain --method condenser --init runs/bert --set stage.max_steps=2000
    python -m condenser_lite pretrain --preset paper --method cocondenser --set stage.max_steps=100
    python -m condenser_lite finetune --init runs/condenser --data scifact --set finetune.lr=1e-4 --output-dir ft
    python -m condenser_lite finetune --init Luyu/co-condenser-marco --data msmarco --rounds 2 --output-dir ft
    python -m condenser_lite search --model ft/round2 --data msmarco --split dev --out dev.trec
    python -m condenser_lite evaluate --run dev.trec --data msmarco --split dev --metrics RR@10 R@1000
    python -m condenser_lite experiments --preset tiny
    python -m condenser_lite experiments --preset tiny --task path/to/my_beir_folder
    python -m condenser_lite release results/small.json   # its final models -> results/checkpoints/small/

Your own data: ``--data`` / ``--task`` take a BEIR name or the path of a folder in BEIR's format
(``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``); ``pretrain --corpus`` also takes a
``.jsonl`` of documents or a text file with one document per line (README, "Adapt to your own corpus").

Every sub-command reads the same named presets as the notebooks (``presets.PRESETS``; ``--help``
names them): ``pretrain --preset tiny`` runs the stage the book's arms run
(``presets.stage_config``), ``finetune`` the same recipe through the same two-round function
(``finetune.two_round``), ``experiments --preset`` the whole protocol.

``--set path=value`` takes a path of the settings tree (``presets.setting_tree``), the same in
every command and in a chapter's ``-p settings "path=value ..."``:

* ``model.<field>``: the encoder (``model.hidden_size``, ``model.skip_from``);
* ``pretraining.<field>``: how the preset's stages train (``pretraining.s1_steps``,
  ``pretraining.lr``, ``pretraining.cocondenser_lr``);
* ``finetune.<field>``, ``sts.<field>``: the retrieval recipe, the STS-b recipe;
* a preset's own field by its name (``seeds``, ``task``, ``pretrain_seeds``);
* ``stage.<field>``: the one stage ``pretrain`` runs (``stage.max_steps``, ``stage.lr``,
  ``stage.mlm_probability``), applied after it is built from the preset.

A bare name stands for the one path ending in it (``max_steps`` is ``stage.max_steps``,
``hidden_size`` is ``model.hidden_size``); one that several paths end in (``lr``,
``batch_size``) is refused, naming them. A path the command does not read is refused in one
line: ``finetune`` reads ``finetune.*``; ``experiments`` every path but ``stage.*``; ``pretrain``
the model's and ``pretraining`` fields its stage is built from, coCondenser's ``task``, and the
``stage.*`` fields its method reads (``pretrain_reads``). Run ``... <command> --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

from .data.tevatron import tevatron_name
from .parameters import parse_settings
from .reproduction.presets import ALIASES, PRESETS, RETRIEVAL_RECIPES, Preset, finetune_recipe, get_preset
from .training.finetune import FinetuneConfig
from .training.pretraining_config import MODEL_FIELDS, StageConfig
from .utils.cli_args import one_line, positive_int, seed_list
from .utils.errors import ConfigError, UserError

# Each sub-command imports the (torch-heavy) modules it needs inside its handler, so that
# `--help` answers at once instead of after loading torch, transformers and faiss.

PRESET_NAMES = sorted([*PRESETS, *ALIASES])


def preset_list() -> str:
    """The registry's presets in its order, each with its aliases: ``micro, ..., paper (alias full)``."""
    aliases = {name: [a for a, target in ALIASES.items() if target == name] for name in PRESETS}
    return ", ".join(name + (f" (alias {', '.join(aliases[name])})" if aliases[name] else "") for name in PRESETS)


METRICS_HELP = ("ir_measures names (nDCG@10 RR@10 R@1000) or Top-k answer accuracy (NQ); default: msmarco RR@10 "
                "R@1000, nq Top-5 Top-20 Top-100, else nDCG@10 RR@10 R@100")


def apply_settings(preset: Preset, settings: dict[str, Any], where: str = "--set") -> Preset:
    """``preset`` with ``settings`` (``parameters.parse_settings``'s paths) applied: what
    ``experiments --set`` runs. A ``stage.*`` path is refused: the protocol builds every stage
    from the preset."""
    for path in settings:
        try:
            preset.locate(path)
        except ConfigError as err:
            raise ConfigError(f"{where} {path}: {err}") from None
    return preset.replace(**settings) if settings else preset


def pretrain_reads(preset: Preset, method: str, init: str | None) -> set[str]:
    """The paths of the settings tree that the stage ``pretrain --method method`` runs from
    ``init`` reads: the model's fields it uses, the ``pretraining`` fields it is built from
    (``presets.stage_sources``), coCondenser's ``task`` (its corpus), and the stage's own fields it
    uses (``StageConfig.unread`` decides, by what the method reads). Chapter 2."""
    from .reproduction.presets import STAGE, STAGE_FLAGS, stage_sources

    stage = [f.name for f in dataclasses.fields(StageConfig) if f.name not in STAGE_FLAGS]
    return ({f"model.{n}" for n in MODEL_FIELDS if not StageConfig.unread(method, [n])}
            | {f"pretraining.{v}" for v in stage_sources(preset, method, init).values()}
            | ({"task"} if method == "cocondenser" else set())
            | {f"{STAGE}.{n}" for n in stage if not StageConfig.unread(method, [n])})


def _not_read(path: str, method: str, init: str | None, reads: set[str]) -> str:
    """One line saying why the ``pretrain`` stage does not read ``path``, and what to do instead."""
    part, _, name = path.rpartition(".")
    if name in StageConfig.READ_ONLY_BY and part in ("model", "stage"):
        return (f"{' and '.join(StageConfig.READ_ONLY_BY[name])} stages read it, {method} stages do not (it would "
                "change the cache key and nothing else); leave it out")
    if part == "pretraining":
        start = "from scratch" if init is None else "continuing --init"
        own = ", ".join(sorted(p for p in reads if p.startswith("pretraining.")))
        return (f"the {method} stage {start} does not read it (it reads {own}); set it for experiments, or "
                "set the stage's own, e.g. stage.max_steps")
    return ("pretrain runs one pre-training stage, which does not read it; set it for experiments (or finetune), "
            "or set the stage's own settings, stage.* (e.g. stage.max_steps, stage.lr)")


def stage_config_from_args(args: argparse.Namespace):
    """The stage ``pretrain`` runs: the preset's (``presets.stage_config``), exactly as the
    protocol's arm of that method builds it; at ``paper`` scale the starting checkpoint defaults
    to the preset's published one (bert-base-uncased; Luyu/condenser for coCondenser). ``--set``
    takes paths of the settings tree: ``model.*`` and the ``pretraining.*`` fields this stage is
    built from, applied to the preset before the stage is built, as ``experiments`` applies them;
    ``stage.*`` (``stage.max_steps=500``) after. A path this stage does not read (``finetune.lr``,
    ``pretraining.s2_steps`` for a stage from scratch, ``stage.chunk_size`` for a Condenser) is
    refused rather than ignored. Chapter 2."""
    from .reproduction.presets import STAGE

    settings = parse_settings(args.set)
    preset = get_preset(args.preset)
    init = _init_of(preset, args)
    reads = pretrain_reads(preset, args.method, init)
    for path in settings:
        if path not in reads:
            raise ConfigError(f"--set {path}: {_not_read(path, args.method, init, reads)}")
    stage = {p.removeprefix(f"{STAGE}."): v for p, v in settings.items() if p.startswith(f"{STAGE}.")}
    preset = apply_settings(preset, {p: v for p, v in settings.items() if not p.startswith(f"{STAGE}.")})
    return _stage_of(preset, args).replace(**stage)


def _init_of(preset: Preset, args: argparse.Namespace) -> str | None:
    """The stage's starting checkpoint: ``--init``, else at ``paper`` scale the published one."""
    if args.init is None and preset.pretrained:
        return preset.pretrained["condenser" if args.method == "cocondenser" else "bert"]
    return args.init


def _stage_of(preset: Preset, args: argparse.Namespace):
    """The preset's stage of ``args.method`` with the command line's starting checkpoint, corpus
    and shortest span."""
    from .reproduction.presets import stage_config

    cfg = stage_config(preset, args.method, _init_of(preset, args))
    if args.corpus:
        cfg = cfg.replace(corpus=_absolute(args.corpus))
    if args.min_span is not None:  # 0 too: refused by StageConfig, not ignored
        cfg = cfg.replace(min_span=args.min_span)
    return cfg


def _absolute(source: str) -> str:
    """A data path made absolute (so cache keys and worker processes see one name); names stay."""
    from .data.beir import is_path

    return str(Path(source).expanduser().resolve()) if is_path(source) else source


def check_writable(flag: str, path: str | os.PathLike | None, folder: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written: one whose folder on the way
    is a file, a folder without write permission, a file given where a folder is asked for (or an
    existing file that cannot be replaced). Root writes anywhere, so only the first holds for it."""
    if path is None:
        return
    target = Path(path).expanduser().absolute()
    if target.exists():
        if folder and not target.is_dir():
            raise ConfigError(f"{flag} {path} is a file, not a folder; give a folder path")
        if not os.access(target, os.W_OK):
            raise ConfigError(f"{flag} {path} cannot be written (no write permission); choose a path you can write to")
        return
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: {parent} is a file, not a folder; choose another path, or move that file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: {parent} cannot be written (no write permission); choose a folder you can "
                          "write to")


def _model_tokenizer(model: str, lengths: dict[str, int | None]):
    """The tokenizer of a model folder or Hub id, once the checkpoint is known to be a BERT-family
    encoder that takes these token ``lengths`` and this tokenizer's ids: a wrong model is refused
    before any data are read."""
    from .data.tokenizer import load_tokenizer
    from .utils.loading import check_checkpoint, check_lengths, check_vocabulary, encoder_config

    check_checkpoint(model)  # a missing folder is named as the model's, not as its tokenizer's
    tokenizer = load_tokenizer(model)
    config = encoder_config(model)
    check_lengths(config, model, lengths)
    check_vocabulary(config, tokenizer, model)
    return tokenizer


def _check_head_depth(cfg) -> None:
    """A Condenser head reads layer ``skip_from`` of the backbone: an ``--init`` with fewer layers
    is refused before the estimate (the model would refuse it later, with a traceback)."""
    config = Path(cfg.init or "").expanduser() / "config.json"
    if cfg.method == "mlm" or cfg.init is None or not config.is_file():
        return
    try:
        layers = json.loads(config.read_text(encoding="utf-8")).get("num_hidden_layers")
    except (OSError, ValueError, AttributeError):
        return  # a damaged config: loading the checkpoint names it
    if isinstance(layers, int) and cfg.model.skip_from >= layers:
        raise ConfigError(f"--init {cfg.init} has {layers} layers, but the Condenser head reads layer "
                          f"skip_from={cfg.model.skip_from}; pass --set skip_from={layers - 1} (or lower), or an --init with "
                          "more layers")


def _pretrain(args: argparse.Namespace) -> None:
    from .reproduction.estimate import estimate_stage, format_estimate
    from .reproduction.health import stage_check
    from .training.pretraining import pretrain
    from .training.stage_cache import stage_done

    check_writable("--output-dir", args.output_dir, folder=True)
    cfg = stage_config_from_args(args)
    _check_head_depth(cfg)
    if args.dry_run or (args.restart or not stage_done(cfg, args.output_dir, args.data_dir)):
        print(format_estimate(estimate_stage(cfg, args.data_dir)), flush=True)
        if args.dry_run:
            return
    # documents too short for two coCondenser spans are warned about (one line, on stderr);
    # every held-out evaluation is judged against the committed runs (one line each)
    out = pretrain(cfg, output_dir=args.output_dir, data_dir=args.data_dir, progress=True,
                   restart=args.restart, check=stage_check(cfg))
    print(out)


# ---- retrieval: finetune, encode, search, evaluate ----------------------------------------


def eval_set(name: str, split: str, data_dir: str | None):
    """A BEIR-style evaluation set: a BEIR name (``scifact``), the path of a BEIR-format folder
    (your own data) or a Tevatron task (``msmarco``, ``nq``)."""
    from .data.beir import load_beir
    from .data.tevatron import load_tevatron, load_tevatron_corpus, tevatron_eval_set

    hub = tevatron_name(name)
    if hub is not None:
        return tevatron_eval_set(load_tevatron(hub, split, data_dir), load_tevatron_corpus(hub, data_dir), split=split,
                                 name=name)
    return load_beir(_absolute(name), data_dir=data_dir)


DEFAULT_METRICS = {"msmarco": ("RR@10", "R@1000"), "nq": ("Top-5", "Top-20", "Top-100")}  # what the papers report


def metrics_for(args: argparse.Namespace) -> list[str]:
    """``--metrics``, by default the papers' for the data set (MS MARCO: MRR@10 and R@1000; NQ:
    top-k answer accuracy), else nDCG@10, RR@10, R@100."""
    return list(args.metrics or DEFAULT_METRICS.get(args.data, ("nDCG@10", "RR@10", "R@100")))


def training_set(name: str, data_dir: str | None, n_negatives: int):
    """Training queries in Tevatron's schema: read directly, or built from a BEIR set with BM25 negatives."""
    from .data.tevatron import load_tevatron
    from .retrieval.bm25 import to_tevatron

    hub = tevatron_name(name)
    if hub is not None:
        return load_tevatron(hub, "train", data_dir)
    return to_tevatron(_absolute(name), split="train", n_negatives=n_negatives, data_dir=data_dir)


def _recipe(args: argparse.Namespace) -> FinetuneConfig:
    """The fine-tuning recipe: ``--preset`` (a preset or a data set's recipe), by default the
    data set's at the papers' scale (msmarco, nq) or the scaled-down book's (BEIR sets)."""
    name = args.preset or (args.data if args.data in RETRIEVAL_RECIPES else "tiny")
    if name not in PRESETS and name not in ALIASES and name not in RETRIEVAL_RECIPES:
        raise ConfigError(f"--preset {name}: no such preset or recipe; choose one of {preset_list()} or a data set's "
                          f"recipe: {', '.join(RETRIEVAL_RECIPES)}")
    settings = parse_settings(args.set)
    for path in settings:
        if not path.startswith("finetune."):
            hint = " (the fine-tuning's own step limit is --max-steps)" if path.endswith(".max_steps") else ""
            raise ConfigError(f"--set {path}: finetune runs one recipe and reads only finetune.* "
                              f"({', '.join(f.name for f in dataclasses.fields(FinetuneConfig))}){hint}; {path} "
                              f"belongs to {'pretrain' if path.startswith('stage.') else 'pretrain or experiments'}")
    return dataclasses.replace(finetune_recipe(name), **{p.removeprefix("finetune."): v for p, v in settings.items()})


def _finetune(args: argparse.Namespace) -> None:
    from .data.tevatron import sample_queries
    from .training.finetune import finetune_round, two_round

    check_writable("--output-dir", args.output_dir, folder=True)
    recipe = _recipe(args)
    for flag, value in (("--max-steps", args.max_steps), ("--train-size", args.train_size)):
        if value is not None and value < 1:  # 0 must not mean "the recipe's"
            raise ConfigError(f"{flag} {value}: give a count >= 1, or leave {flag} out for the recipe's")
    tok = _model_tokenizer(args.init, {"--set q_max_len": recipe.q_max_len, "--set p_max_len": recipe.p_max_len})
    train = training_set(args.data, args.data_dir, recipe.n_bm25_negatives)
    if args.train_size is not None:
        train = sample_queries(train, args.train_size, seed=args.seed)
    overrides = dict(progress=True, resume=not args.restart)
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    if args.rounds == 2:
        corpus = eval_set(args.data, "dev" if tevatron_name(args.data) else "test", args.data_dir).corpus
        two_round(args.init, train, corpus, tok, recipe, args.output_dir, seed=args.seed, **overrides)
    else:
        finetune_round(args.init, train, tok, recipe, args.output_dir, 1, seed=args.seed, **overrides)
    print(args.output_dir)


def _encode(args: argparse.Namespace) -> None:
    import numpy as np

    from .retrieval.biencoder import BiEncoder
    from .retrieval.search import encode_corpus

    check_writable("--out", args.out)
    tokenizer = _model_tokenizer(args.model, {"--p-max-len": args.p_max_len})
    data = eval_set(args.data, args.split, args.data_dir)
    embs, ids = encode_corpus(BiEncoder.from_pretrained(args.model), data.corpus, tokenizer, args.p_max_len,
                              batch_size=args.batch_size)
    np.savez(args.out, embeddings=embs, ids=np.array(ids))
    print(f"{len(ids)} passages x {embs.shape[1]} dims -> {args.out}")


def _run_tag(args: argparse.Namespace) -> str:
    """The run file's tag: ``--tag``, else the model's short name (a folder's last part, a Hub
    id's name), never a path: a run file shared with others names no machine's folders."""
    if args.tag is not None:
        if not args.tag or any(c.isspace() for c in args.tag):
            raise ConfigError(f"--tag {args.tag!r}: a run tag is one word (the file's sixth field); "
                              "e.g. --tag cocondenser-r2")
        return args.tag
    model = Path(args.model).expanduser()
    name = (model.resolve() if model.is_dir() else model).name  # '.' -> the folder's own name
    return re.sub(r"\s+", "_", name) or "condenser_lite"


def _search(args: argparse.Namespace) -> None:
    from .retrieval.runfiles import write_trec_run
    from .retrieval.search import evaluate_retriever

    _run_tag(args)  # a bad --tag, --out or model is refused before the corpus is encoded
    check_writable("--out", args.out)
    tokenizer = _model_tokenizer(args.model, {"--q-max-len": args.q_max_len, "--p-max-len": args.p_max_len})
    data = eval_set(args.data, args.split, args.data_dir)
    metrics = metrics_for(args)  # the run is as deep as the deepest of them (--k, at least 100)
    result = evaluate_retriever(args.model, data, split=args.split, tokenizer=tokenizer, q_max_len=args.q_max_len,
                                p_max_len=args.p_max_len, k=args.k, metrics=metrics, batch_size=args.batch_size,
                                index_type=args.index)
    if args.out:
        write_trec_run(result["run"], args.out, tag=_run_tag(args))
    print(json.dumps({k: round(v, 4) for k, v in result["metrics"].items()}))


def _evaluate(args: argparse.Namespace) -> None:
    from .data.beir import corpus_columns, query_columns
    from .retrieval.metrics import score_run
    from .retrieval.runfiles import check_run, read_trec_run

    data = eval_set(args.data, args.split, args.data_dir)
    run = read_trec_run(args.run)
    # the checks `search` makes on its own run: labels and run must name this corpus's documents
    check_run(run, data.split_qrels(args.split), corpus_columns(data.corpus, lazy=True)[0],
              query_columns(data.queries)[0], where=args.run)
    metrics = score_run(data, args.split, run, metrics_for(args))  # refuses a too-shallow run
    print(json.dumps({k: round(v, 4) for k, v in metrics.items()}))


def _experiments(args: argparse.Namespace) -> None:
    from .reproduction.protocol import cached_results, check_out_path, run_protocol
    from .reproduction.scorecard import format_scorecard

    preset = apply_settings(get_preset(args.preset), parse_settings(args.set))
    if args.task:
        preset = preset.replace(task=_absolute(args.task))
    seeds = seed_list(args.seeds) if args.seeds is not None else None
    if args.out is not None:  # before the estimate: a wrong --out costs nothing
        check_out_path(args.out, preset.name)
        check_writable("--out", args.out)
    if args.dry_run or not (cached_results(preset, args.data_dir, seeds).exists() and not args.force):
        from .reproduction.estimate import estimate_protocol, format_estimate

        print(format_estimate(estimate_protocol(preset, args.data_dir, args.workers)), flush=True)
        if args.dry_run:
            return
    command = shlex.join(["python", "-m", "condenser_lite", *args.argv])
    results = run_protocol(preset, out_path=args.out, seeds=seeds, data_dir=args.data_dir, force=args.force,
                           workers=args.workers, command=command)
    print(format_scorecard(results))
    print(f"wall time {results['wall_time']['total']:.0f}s; results: {args.out or 'the cache (pass --out)'}")


def _merge(args: argparse.Namespace) -> None:
    from .reproduction.merge import merge_results, read_part
    from .reproduction.protocol import check_out_path
    from .reproduction.scorecard import format_scorecard

    check_writable("--out", args.out)
    parts = [read_part(p) for p in args.parts]
    check_out_path(args.out, (parts[0].get("preset") or {}).get("name"))
    merged = merge_results(parts, names=[str(p) for p in args.parts],
                           command=shlex.join(["python", "-m", "condenser_lite", *args.argv]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(merged, indent=1))
    print(format_scorecard(merged))
    print(f"merged {len(parts)} parts, pre-training seeds {merged['pretraining_seeds']}: {args.out}")


def _release(args: argparse.Namespace) -> None:
    from .reproduction.merge import read_part
    from .reproduction.release import export_checkpoints, record_checkpoints

    check_writable("--out", args.out, folder=True)
    path = Path(args.results)
    results = read_part(path)
    record = export_checkpoints(results, out_dir=args.out, replace=args.replace)
    # the results file gains the record and nothing else; written whole or not at all
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(record_checkpoints(results, record), indent=1))
    tmp.replace(path)
    for arm, rec in record["arms"].items():
        print(f"{arm}: {rec['path']} ({rec['bytes'] / 1e6:.1f} MB, key {rec['key']}, pre-training seed "
              f"{rec['pretraining_seed']})")
    print(f"{record['bytes'] / 1e6:.1f} MB together (limit {record['max_bytes'] / 1e6:g} MB); recorded in {path}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m condenser_lite", description=f"{__doc__}\nPresets: {preset_list()}.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error too, and "
                    "transformers' model-loading bar and load report")
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: `--debug` after the sub-command must not reset the one given before it
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of a known error too (errors print one line otherwise), and "
                        "transformers' model-loading bar and load report")
    sub = ap.add_subparsers(dest="command", required=True)
    restart_help = ("discard the training checkpoint and log in the output folder and train from step 0 "
                    "(without it a folder from a run with other settings is refused)")

    p = sub.add_parser("pretrain", parents=[common], help="one MLM / Condenser / coCondenser pre-training stage")
    p.add_argument("--method", choices=["mlm", "condenser", "cocondenser"], default="condenser")
    p.add_argument("--preset", choices=PRESET_NAMES, default="tiny", help="named settings (presets.PRESETS)")
    p.add_argument("--init", help="starting checkpoint folder or Hub id (default: from scratch; paper: the published one)")
    p.add_argument("--corpus", help="what to pre-train on. MLM/Condenser: general (default) | wikipedia, or your own "
                   "corpus as below (held-out gauges still read the general corpus's held-out set). coCondenser: the "
                   "target corpus, scifact (or another BEIR name) | msmarco | nq | a PATH: a BEIR folder, a "
                   ".jsonl of documents (text, optional title) or a text file with one document per line")
    p.add_argument("--min-span", type=int, help="coCondenser: shortest span in tokens; a document needs 2 x min_span "
                   "tokens or it is skipped (tiny: 16, paper: 8)")
    p.add_argument("--output-dir", help="default: a cache folder named by the settings' hash")
    p.add_argument("--data-dir", help="local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a setting by its path: stage.* (stage.max_steps=500), model.*, or the pretraining.* "
                   "fields this stage is built from (pretraining.lr=5e-4)")
    p.add_argument("--restart", action="store_true", help=restart_help)
    p.add_argument("--dry-run", action="store_true", help="time a few updates, print the projected wall time, stop")
    p.set_defaults(handler=_pretrain)

    def data_args(p: argparse.ArgumentParser, split: str | None = "test") -> None:
        p.add_argument("--data", default="scifact", help="scifact (or another BEIR name) | msmarco | nq | the PATH of "
                       "a BEIR-format folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
        if split is not None:
            p.add_argument("--split", default=split, help="evaluation split (BEIR: test; msmarco/nq: dev)")
        p.add_argument("--data-dir", help="local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)")

    p = sub.add_parser("finetune", parents=[common], help="fine-tune a dense retriever (round 1, or both rounds with --rounds 2)")
    p.add_argument("--init", required=True, help="pre-trained checkpoint folder or Hub id")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--preset", help=f"a preset: {preset_list()}; or a data set's recipe: "
                   f"{', '.join(RETRIEVAL_RECIPES)}. Default: msmarco / nq for those data sets, tiny otherwise")
    p.add_argument("--rounds", type=int, choices=[1, 2], default=1)
    p.add_argument("--train-size", type=int, help="a seeded sample of this many training queries")
    p.add_argument("--max-steps", type=int, help="stop after this many updates (smoke runs)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a field of the recipe by its path: finetune.lr=1e-4, finetune.batch_size=16")
    p.add_argument("--restart", action="store_true", help=restart_help)
    data_args(p, split=None)
    p.set_defaults(handler=_finetune)

    p = sub.add_parser("encode", parents=[common], help="encode a corpus with a retriever into an .npz (embeddings, ids)")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--p-max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=128)
    data_args(p)
    p.set_defaults(handler=_encode)

    p = sub.add_parser("search", parents=[common], help="encode, search with FAISS, write a TREC run and print its metrics")
    p.add_argument("--model", required=True)
    p.add_argument("--out", help="TREC run file to write")
    p.add_argument("--tag", help="the run's name in its last column (default: the model folder's name)")
    p.add_argument("--k", type=int, help="run depth (default: the deepest metric's cutoff, at least 100)")
    p.add_argument("--q-max-len", type=int, default=32)
    p.add_argument("--p-max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--index", default="flat", help="flat (exact, default) | hnsw | ivf | a faiss factory string")
    p.add_argument("--metrics", nargs="+", help=METRICS_HELP)
    data_args(p)
    p.set_defaults(handler=_search)

    p = sub.add_parser("evaluate", parents=[common], help="score a TREC run file with ir_measures")
    p.add_argument("--run", required=True)
    p.add_argument("--metrics", nargs="+", help=METRICS_HELP + "; a cutoff deeper than the run is refused")
    data_args(p)
    p.set_defaults(handler=_evaluate)

    p = sub.add_parser("experiments", parents=[common], help="the scaled-down reproduction: every arm, seeds, scorecard (JSON)")
    p.add_argument("--preset", choices=PRESET_NAMES, default="tiny", help="the preset to run (presets.PRESETS)")
    p.add_argument("--task", help="retrieval task instead of the preset's: scifact (or another BEIR name) | msmarco | "
                   "the PATH of a BEIR-format folder (its corpus for coCondenser, train split for fine-tuning, test "
                   "split for evaluation)")
    p.add_argument("--out", help="write the results JSON here (it is also cached by its settings)")
    p.add_argument("--seeds", help="comma-separated seeds, e.g. 0,1,2 (default: the preset's)")
    p.add_argument("--workers", type=positive_int,
                   help="processes for independent jobs (default: CPU cores, at most 2)")
    p.add_argument("--force", action="store_true", help="recompute the results file (models stay cached)")
    p.add_argument("--dry-run", action="store_true", help="time a few updates of each part, print the projected "
                   "wall time per part and in total, stop")
    p.add_argument("--data-dir", help="local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a setting by its path: model.*, pretraining.*, finetune.*, sts.* or a preset field "
                   "(finetune.lr=1e-4, pretraining.s1_steps=500, seeds='[0, 1]')")
    p.set_defaults(handler=_experiments)

    p = sub.add_parser("release", parents=[common], help="export a run's final models as small committed checkpoints "
                       "and name them in its results file")
    p.add_argument("results", help="the results file of the run (e.g. results/small.json), on the machine whose cache ran it")
    p.add_argument("--out", help="the folder (default: results/checkpoints/<preset>/)")
    p.add_argument("--replace", action="store_true", help="replace the checkpoints already in that folder")
    p.set_defaults(handler=_release)

    p = sub.add_parser("merge", parents=[common], help="one results file from runs of a preset on different "
                       "pre-training seeds (experiments --set pretrain_seeds=[...] --out part.json)")
    p.add_argument("parts", nargs="+", help="the parts' results files")
    p.add_argument("--out", required=True, help="the merged results file (e.g. results/small.json)")
    p.set_defaults(handler=_merge)
    for name, what in STUDIES.items():  # each study parses its own options (--help lists them)
        p = sub.add_parser(name, help=what, add_help=False, prefix_chars="\0")
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.set_defaults(handler=_study)
    return ap


class _StderrHandler(logging.Handler):
    """The library's progress messages (reused, resumed, waiting for a lock), one line each on
    whatever ``sys.stderr`` is at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {one_line(message)}", file=sys.stderr)


STUDIES = {"mechanism": "when the Condenser head needs [CLS]: the mechanism study (results/mechanism.json)",
           "sizing": "the pre-training study that sized the small preset (results/study.json)"}


def _study(args: argparse.Namespace) -> None:
    import importlib

    importlib.import_module(f"condenser_lite.studies.{args.command}").main(args.args)


def main(argv: list[str] | None = None) -> None:
    """Run one sub-command. A known error (``errors.UserError``: data, schema, settings,
    checkpoints) is printed as one line ``error: ...`` with exit status 1 (``--debug``: with its
    traceback); any other exception is a bug and keeps its traceback. Warnings and the library's
    progress messages are one line each. Ctrl-C exits with status 130."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.command in STUDIES:  # a study parses its own options; --debug among them shows tracebacks
        args.debug = args.debug or "--debug" in args.args
    args.argv = argv  # the command line as given, for the results' provenance
    log, handler = logging.getLogger("condenser_lite"), _StderrHandler()
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if args.debug else logging.INFO)  # DEBUG: transformers' loading bars too
    try:
        with warnings.catch_warnings():
            if not args.debug:
                warnings.showwarning = _show_warning
            args.handler(args)
    except UserError as err:
        if args.debug:
            raise
        print(f"error: {one_line(err)}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


if __name__ == "__main__":
    main(sys.argv[1:])
