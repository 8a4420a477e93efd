"""Command line for long runs that do not belong in a notebook.

    python -m condenser_lite pretrain --method condenser --init runs/bert --set stages.condenser.max_steps=2000
    python -m condenser_lite pretrain --preset paper --method cocondenser --set stages.cocondenser.max_steps=100
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

``--set path=value`` takes a path of the settings tree (``settings_tree.setting_tree``), the same
in every command and in a chapter's ``-p settings "path=value ..."``:

* ``model.<field>``: the encoder (``model.hidden_size``, ``model.skip_from``);
* ``stages.<stage>.<field>``: a pre-training stage, under the name the stage uses
  (``stages.bert.max_steps``, ``stages.condenser.lr``, ``stages.cocondenser.batch_size``); the
  stages are ``bert`` (from scratch), ``condenser`` (continuing a checkpoint) and ``cocondenser``;
* ``finetune.<field>``, ``sts.<field>``: the retrieval recipe, the STS-b recipe;
* a preset's own field by its name (``seeds``, ``task``, ``pretrain_seeds``).

A bare name stands for the one path ending in it (``hidden_size`` is ``model.hidden_size``); one
that several paths end in (``lr``, ``max_steps``) is refused, naming them, except by ``pretrain``,
which trains one stage and reads it (or ``stage.lr``) as that stage's field. A mistyped field is
answered with the nearest one. A path the command
does not read is refused in one line (``cli_settings``): ``finetune`` reads ``finetune.*``;
``experiments`` every path but the seeds of the continuing stages (each arm's stages run on the
arm's seed); ``pretrain`` the fields of its one stage that its method reads (``stages.bert.*``
from scratch, ``stages.condenser.*`` continuing ``--init``, ``stages.cocondenser.*``), the
model's, and coCondenser's ``task``. Run ``... <command> --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

from . import cli_parser
from .cli_settings import absolute, apply_settings, recipe_from_args, refuse_twice, stage_config_from_args
from .data.tevatron import tevatron_name
from .parameters import parse_settings
from .reproduction.configuration.presets import get_preset
from .utils.cli_args import one_line, seed_list
from .utils.errors import ConfigError, UserError

# Each sub-command imports the (torch-heavy) modules it needs inside its handler, so that
# `--help` answers at once instead of after loading torch, transformers and faiss.

def check_writable(flag: str, path: str | os.PathLike | None, folder: bool = False,
                   inputs: str | os.PathLike | None = None) -> None:
    """Refuse, before any work, an output path that cannot be written: a file on the way, no write
    permission, a file where a folder is asked for or the reverse, or one of the command's own
    ``inputs`` (a file, or a folder whose files are read). Root writes anywhere."""
    if path is None:
        return
    target = Path(path).expanduser().absolute()
    if target.exists():
        if folder and not target.is_dir():
            raise ConfigError(f"{flag} {path} is a file, not a folder; give a folder path")
        if not folder and target.is_dir():
            raise ConfigError(f"{flag} {path} is a folder; give a file path inside it")
        source = Path(inputs).expanduser().resolve() if inputs is not None else None
        if source is not None and source.exists() and target.resolve().is_relative_to(source):
            raise ConfigError(f"{flag} {path} is one of this command's input files, which it would overwrite; "
                              "write the output elsewhere")
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


def fit_lengths(args: argparse.Namespace) -> None:
    """Fill in the token lengths not given: the defaults, cut to the model's position limit (a book
    model reads 64 tokens), so only an explicit length is refused."""
    from .utils.loading import check_checkpoint, encoder_config

    check_checkpoint(args.model)  # a missing folder is named as the model's
    limit = None
    for name, default in cli_parser.DEFAULT_LENGTHS.items():
        if hasattr(args, name) and getattr(args, name) is None:
            if limit is None:
                limit = getattr(encoder_config(args.model), "max_position_embeddings", None) or default
            setattr(args, name, min(default, limit))


def _model_tokenizer(model: str, lengths: dict[str, int | None]):
    """The tokenizer of ``model``, once it is known to take these token ``lengths`` and this
    tokenizer's ids: a wrong model is refused before any data are read."""
    from .data.tokenizer import load_tokenizer
    from .utils.loading import check_checkpoint, check_lengths, check_vocabulary, encoder_config

    check_checkpoint(model)  # a missing folder is named as the model's, not as its tokenizer's
    tokenizer = load_tokenizer(model)
    config = encoder_config(model)
    check_lengths(config, model, lengths)
    check_vocabulary(config, tokenizer, model)
    return tokenizer


def _retriever(model: str, pooling: str | None):
    """The retriever of ``model``, pooled as ``--pooling`` says, else as the model declares
    (``pooling.checkpoint_pooling``); a warning when the two differ."""
    from .retrieval.biencoder import BiEncoder
    from .retrieval.pooling import Pooling, checkpoint_pooling
    from .utils.devices import default_device

    own = checkpoint_pooling(model)
    if pooling is not None and Pooling.parse(pooling) != own:
        warnings.warn(f"{model} pools by {own}; encoding by {Pooling.parse(pooling)}, as --pooling asks, reads vectors "
                      "the model was not trained to fill", stacklevel=2)
    return BiEncoder.from_pretrained(model, pooling=pooling).to(default_device())  # where a folder by name loads


def _check_init(cfg) -> None:
    """Refuse before the estimate (not later, with a traceback) an ``--init`` with fewer layers
    than ``skip_from`` reads or fewer positions than the stage's blocks (``model.max_len``)."""
    config = Path(cfg.init or "").expanduser() / "config.json"
    if cfg.init is None or not config.is_file():
        return
    try:
        found = json.loads(config.read_text(encoding="utf-8"))
        layers, positions = found.get("num_hidden_layers"), found.get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return  # a damaged config: loading the checkpoint names it
    if isinstance(positions, int) and cfg.model.max_len > positions:
        raise ConfigError(f"model.max_len={cfg.model.max_len} exceeds the position limit of --init {cfg.init} "
                          f"(max_position_embeddings={positions}); use {positions} or less")
    if cfg.method != "mlm" and isinstance(layers, int) and cfg.model.skip_from >= layers:
        raise ConfigError(f"--init {cfg.init} has {layers} layers, but the Condenser head reads layer "
                          f"skip_from={cfg.model.skip_from}; pass --set model.skip_from={layers - 1} (or lower), or an --init with "
                          "more layers")


def _pretrain(args: argparse.Namespace) -> None:
    from .reproduction.runs.estimate import estimate_stage, format_estimate
    from .reproduction.runs.health import stage_check
    from .training.pretraining import pretrain
    from .training.stage_cache import stage_done

    check_writable("--output-dir", args.output_dir, folder=True)
    cfg = stage_config_from_args(args)
    _check_init(cfg)
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
    """An evaluation set: a BEIR name (``scifact``), a BEIR-format folder or a Tevatron task (``msmarco``, ``nq``)."""
    from .data.beir import load_beir
    from .data.tevatron import load_tevatron, load_tevatron_corpus, tevatron_eval_set

    hub = tevatron_name(name)
    if hub is not None:
        return tevatron_eval_set(load_tevatron(hub, split, data_dir), load_tevatron_corpus(hub, data_dir), split=split,
                                 name=name)
    return load_beir(absolute(name), data_dir=data_dir)


DEFAULT_METRICS = {"msmarco": ("RR@10", "R@1000"), "nq": ("Top-5", "Top-20", "Top-100")}  # what the papers report


def metrics_for(args: argparse.Namespace) -> list[str]:
    """``--metrics``, by default the papers' for the data set, else nDCG@10, RR@10, R@100."""
    return list(args.metrics or DEFAULT_METRICS.get(args.data, ("nDCG@10", "RR@10", "R@100")))


def training_set(name: str, data_dir: str | None, n_negatives: int):
    """Training queries in Tevatron's schema: read directly, or built from a BEIR set with BM25 negatives."""
    from .data.tevatron import load_tevatron
    from .retrieval.bm25 import to_tevatron

    hub = tevatron_name(name)
    if hub is not None:
        return load_tevatron(hub, "train", data_dir)
    return to_tevatron(absolute(name), split="train", n_negatives=n_negatives, data_dir=data_dir)


def _finetune(args: argparse.Namespace) -> None:
    from .data.tevatron import sample_queries
    from .training.finetune import finetune_round, two_round

    check_writable("--output-dir", args.output_dir, folder=True)
    recipe = recipe_from_args(args)
    tok = _model_tokenizer(args.init, {"--set q_max_len": recipe.q_max_len, "--set p_max_len": recipe.p_max_len})
    train = training_set(args.data, args.data_dir, recipe.n_bm25_negatives)
    if args.train_size is not None:
        if args.train_size > len(train):  # a larger sample would silently be the whole set
            raise ConfigError(f"--train-size {args.train_size}: {args.data} has {len(train)} training queries; "
                              f"give at most {len(train)}, or leave --train-size out for all")
        train = sample_queries(train, args.train_size, seed=args.seed)
    overrides = dict(progress=True, resume=not args.restart)
    if args.rounds == 2:
        corpus = eval_set(args.data, "dev" if tevatron_name(args.data) else "test", args.data_dir).corpus
        two_round(args.init, train, corpus, tok, recipe, args.output_dir, seed=args.seed, **overrides)
    else:
        finetune_round(args.init, train, tok, recipe, args.output_dir, 1, seed=args.seed, **overrides)
    print(args.output_dir)


def _encode(args: argparse.Namespace) -> None:
    import numpy as np

    from .retrieval.search import encode_corpus

    check_writable("--out", args.out, inputs=args.data)  # a folder given as --out is named as such
    out = args.out if args.out.endswith(".npz") else args.out + ".npz"  # the name np.savez writes
    check_writable("--out", out, inputs=args.data)
    fit_lengths(args)
    tokenizer = _model_tokenizer(args.model, {"--p-max-len": args.p_max_len})
    data = eval_set(args.data, args.split, args.data_dir)
    embs, ids = encode_corpus(_retriever(args.model, args.pooling), data.corpus, tokenizer, args.p_max_len,
                              batch_size=args.batch_size)
    np.savez(out, embeddings=embs, ids=np.array(ids))
    print(f"{len(ids)} passages x {embs.shape[1]} dims -> {out}")


def _run_tag(args: argparse.Namespace) -> str:
    """``--tag``, else the model's short name, never a path: a shared run file names no machine's folders."""
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
    check_writable("--out", args.out, inputs=args.data)
    fit_lengths(args)
    tokenizer = _model_tokenizer(args.model, {"--q-max-len": args.q_max_len, "--p-max-len": args.p_max_len})
    data = eval_set(args.data, args.split, args.data_dir)
    metrics = metrics_for(args)  # the run is as deep as the deepest of them (--k, at least 100)
    result = evaluate_retriever(_retriever(args.model, args.pooling), data, split=args.split, tokenizer=tokenizer,
                                q_max_len=args.q_max_len, p_max_len=args.p_max_len, k=args.k, metrics=metrics,
                                batch_size=args.batch_size, index_type=args.index)
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
    from .reproduction.runs.protocol import cached_results, check_out_path, run_protocol
    from .reproduction.claims.scorecard import format_scorecard

    settings = parse_settings(args.set)
    refuse_twice(settings, {"--task": ("task", args.task), "--seeds": ("seeds", args.seeds)})
    preset = apply_settings(get_preset(args.preset), settings)
    if args.task:
        preset = preset.replace(task=absolute(args.task))
    seeds = seed_list(args.seeds) if args.seeds is not None else None
    if seeds is not None:  # the estimate, the cache and the run all read the same seeds
        preset = preset.replace(seeds=tuple(seeds))
    if args.out is not None:  # before the estimate: a wrong --out costs nothing
        check_out_path(args.out, preset.name)
        check_writable("--out", args.out)
    if args.dry_run or not (cached_results(preset, args.data_dir, seeds).exists() and not args.force):
        from .reproduction.runs.estimate import estimate_protocol, format_estimate

        print(format_estimate(estimate_protocol(preset, args.data_dir, args.workers)), flush=True)
        if args.dry_run:
            return
    results = run_protocol(preset, out_path=args.out, seeds=seeds, data_dir=args.data_dir, force=args.force,
                           workers=args.workers, command=args.command_line)
    print(format_scorecard(results))
    print(f"wall time {results['wall_time']['total']:.0f}s; results: {args.out or 'the cache (pass --out)'}")


def _merge(args: argparse.Namespace) -> None:
    from .reproduction.runs.merge import merge_results, read_part
    from .reproduction.runs.protocol import check_out_path
    from .reproduction.claims.scorecard import format_scorecard

    check_writable("--out", args.out)
    parts = [read_part(p) for p in args.parts]
    check_out_path(args.out, (parts[0].get("preset") or {}).get("name"))
    merged = merge_results(parts, names=[str(p) for p in args.parts], command=args.command_line)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(merged, indent=1))
    print(format_scorecard(merged))
    print(f"merged {len(parts)} parts, pre-training seeds {merged['pretraining_seeds']}: {args.out}")


def _release(args: argparse.Namespace) -> None:
    from .reproduction.runs.merge import read_part
    from .reproduction.runs.release import export_checkpoints, record_checkpoints

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


class _StderrHandler(logging.Handler):
    """The library's progress messages, one line each on whatever ``sys.stderr`` is at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {one_line(message)}", file=sys.stderr)


def _study(args: argparse.Namespace) -> None:
    import importlib

    # a study's command is its module's name, words joined by "-" (health-runs: studies/health_runs.py)
    importlib.import_module(f"condenser_lite.studies.{args.command.replace('-', '_')}").main(args.args)


HANDLERS = {"pretrain": _pretrain, "finetune": _finetune, "encode": _encode, "search": _search,
            "evaluate": _evaluate, "experiments": _experiments, "release": _release, "merge": _merge, "study": _study}


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m condenser_lite`` (``cli_parser``), each sub-command with its handler."""
    return cli_parser.build_parser(__doc__, HANDLERS)


def main(argv: list[str] | None = None) -> None:
    """Run one sub-command. A known error (``errors.UserError``) prints one line ``error: ...`` and
    exits 1 (``--debug``: with its traceback); any other exception is a bug and keeps its traceback.
    Warnings and progress messages are one line each. Ctrl-C exits 130."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.command in cli_parser.STUDIES:  # a study parses its own options; --debug among them shows tracebacks
        args.debug = args.debug or "--debug" in args.args
    args.command_line = shlex.join(["python", "-m", "condenser_lite", *argv])  # for the results' provenance
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
