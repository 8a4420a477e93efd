"""The command line's parser: one helper per sub-command, each adding its flags.

``build_parser(doc, handlers)`` builds it; ``cli.build_parser`` passes the command line's
description and a handler per sub-command (``cli.HANDLERS``). Explained on the page "Running
the book" (``book/running.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from .cli_settings import preset_list
from .reproduction.configuration.presets import ALIASES, PRESETS, RETRIEVAL_RECIPES
from .utils.cli_args import positive_int, token_length

PRESET_NAMES = sorted([*PRESETS, *ALIASES])
METRICS_HELP = ("ir_measures names (nDCG@10 RR@10 R@1000) or Top-k answer accuracy (NQ); default: msmarco RR@10 "
                "R@1000, nq Top-5 Top-20 Top-100, else nDCG@10 RR@10 R@100")
RESTART_HELP = ("discard the training checkpoint and log in the output folder and train from step 0 "
                "(without it a folder from a run with other settings is refused)")
DATA_DIR_HELP = "local data mirror (default: $CONDENSER_LITE_DATA, else the Hub)"
POOLING_HELP = ("how a text's token vectors become one: cls | mean | cls+norm | mean+norm (+norm: unit length). "
                "Default: the model's own (a sentence-transformers folder's; else cls, the papers')")
DEFAULT_LENGTHS = {"q_max_len": 32, "p_max_len": 128}  # search's and encode's, as in the chapters (cli.fit_lengths)
LENGTH_HELP = "tokens per text (default: {}, or the model's position limit where that is lower)"
STUDIES = {"mechanism": "when the Condenser head needs [CLS]: the mechanism study (results/mechanism.json)",
           "sizing": "the pre-training study that sized the small preset (results/study.json)",
           "health-runs": "short stage-1 runs, healthy and broken, judged by the health check (results/health.json)",
           "real-model": "does coCondenser's pre-training on SciFact help all-MiniLM-L6-v2? (results/real_model.json)"}


def _data_args(p: argparse.ArgumentParser, split: str | None = "test") -> None:
    p.add_argument("--data", default="scifact", help="scifact (or another BEIR name) | msmarco | nq | the PATH of "
                   "a BEIR-format folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    if split is not None:
        p.add_argument("--split", default=split, help="evaluation split (BEIR: test; msmarco/nq: dev)")
    p.add_argument("--data-dir", help=DATA_DIR_HELP)


def _pretrain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["mlm", "condenser", "cocondenser"], default="condenser")
    p.add_argument("--preset", choices=PRESET_NAMES, default="tiny", help="named settings (presets.PRESETS)")
    p.add_argument("--init", help="starting checkpoint folder or Hub id (default: from scratch; paper: the published one)")
    p.add_argument("--corpus", help="what to pre-train on. MLM/Condenser: general (default) | wikipedia, or your own "
                   "corpus as below (held-out gauges still read the general corpus's held-out set). coCondenser: the "
                   "target corpus, scifact (or another BEIR name) | msmarco | nq | a PATH: a BEIR folder, a "
                   ".jsonl of documents (text, optional title) or a text file with one document per line")
    p.add_argument("--min-span", type=positive_int, help="coCondenser: shortest span in tokens; a document needs 2 x min_span "
                   "tokens or it is skipped (tiny: 16, paper: 8)")
    p.add_argument("--output-dir", help="default: a cache folder named by the settings' hash")
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a setting of this stage by its path: stages.<stage>.* (stages.condenser.max_steps=500; "
                   "the stage: bert from scratch, condenser continuing --init, cocondenser) or model.*")
    p.add_argument("--restart", action="store_true", help=RESTART_HELP)
    p.add_argument("--dry-run", action="store_true", help="time a few updates, print the projected wall time, stop")


def _finetune(p: argparse.ArgumentParser) -> None:
    p.add_argument("--init", required=True, help="pre-trained checkpoint folder or Hub id")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--preset", help=f"a preset: {preset_list()}; or a recipe: "
                   f"{', '.join(RETRIEVAL_RECIPES)}. Default: msmarco / nq for those data sets; else tiny for a model "
                   "this library trained, pretrained for any other (the Hub's, a sentence-transformers folder)")
    p.add_argument("--rounds", type=int, choices=[1, 2], default=1)
    p.add_argument("--train-size", type=positive_int, help="a seeded sample of this many training queries")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a field of the recipe by its path: finetune.lr=1e-4, finetune.batch_size=16")
    p.add_argument("--restart", action="store_true", help=RESTART_HELP)
    _data_args(p, split=None)


def _encode(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--pooling", help=POOLING_HELP)
    p.add_argument("--p-max-len", type=token_length, help=LENGTH_HELP.format(DEFAULT_LENGTHS["p_max_len"]))
    p.add_argument("--batch-size", type=positive_int, default=128)
    _data_args(p)


def _search(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--out", help="TREC run file to write")
    p.add_argument("--tag", help="the run's name in its last column (default: the model folder's name)")
    p.add_argument("--k", type=positive_int, help="run depth (default: the deepest metric's cutoff, at least 100)")
    p.add_argument("--q-max-len", type=token_length, help=LENGTH_HELP.format(DEFAULT_LENGTHS["q_max_len"]))
    p.add_argument("--p-max-len", type=token_length, help=LENGTH_HELP.format(DEFAULT_LENGTHS["p_max_len"]))
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--index", default="flat", help="flat (exact, default) | hnsw | ivf | a faiss factory string")
    p.add_argument("--pooling", help=POOLING_HELP)
    p.add_argument("--metrics", nargs="+", help=METRICS_HELP)
    _data_args(p)


def _evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True)
    p.add_argument("--metrics", nargs="+", help=METRICS_HELP + "; a cutoff deeper than the run is refused")
    _data_args(p)


def _experiments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a setting by its path: model.*, stages.<bert|condenser|cocondenser>.*, finetune.*, sts.* or "
                   "a preset field (finetune.lr=1e-4, stages.bert.max_steps=500, seeds='[0, 1]')")


def _release(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", help="the results file of the run (e.g. results/small.json), on the machine whose cache ran it")
    p.add_argument("--out", help="the folder (default: results/checkpoints/<preset>/)")
    p.add_argument("--replace", action="store_true", help="replace the checkpoints already in that folder")


def _merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("parts", nargs="+", help="the parts' results files")
    p.add_argument("--out", required=True, help="the merged results file (e.g. results/small.json)")


# sub-command: (its help, the helper that adds its flags)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "pretrain": ("one MLM / Condenser / coCondenser pre-training stage", _pretrain),
    "finetune": ("fine-tune a dense retriever (round 1, or both rounds with --rounds 2)", _finetune),
    "encode": ("encode a corpus with a retriever into an .npz (embeddings, ids)", _encode),
    "search": ("encode, search with FAISS, write a TREC run and print its metrics", _search),
    "evaluate": ("score a TREC run file with ir_measures", _evaluate),
    "experiments": ("the scaled-down reproduction: every arm, seeds, scorecard (JSON)", _experiments),
    "release": ("export a run's final models as small committed checkpoints and name them in its results file",
                _release),
    "merge": ("one results file from runs of a preset on different pre-training seeds "
              "(experiments --set pretrain_seeds=[...] --out part.json)", _merge),
}


def build_parser(doc: str, handlers: Mapping[str, Callable[[argparse.Namespace], None]]) -> argparse.ArgumentParser:
    """The parser of ``python -m condenser_lite``: ``doc`` its description, ``handlers`` the
    function each sub-command runs (a study's under ``"study"``)."""
    ap = argparse.ArgumentParser(prog="python -m condenser_lite", description=f"{doc}\nPresets: {preset_list()}.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error too, and "
                    "transformers' model-loading bar and load report")
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: `--debug` after the sub-command must not reset the one given before it
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of a known error too (errors print one line otherwise), and "
                        "transformers' model-loading bar and load report")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (what, add_flags) in COMMANDS.items():
        p = sub.add_parser(name, parents=[common], help=what)
        add_flags(p)
        p.set_defaults(handler=handlers[name])
    for name, what in STUDIES.items():  # each study parses its own options (--help lists them)
        p = sub.add_parser(name, help=what, add_help=False, prefix_chars="\0")
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.set_defaults(handler=handlers["study"])
    return ap
