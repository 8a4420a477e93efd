"""Command line for long runs that do not belong in a notebook.

    python -m condenser_lite pretrain --method condenser --init runs/bert --set max_steps=2000
    python -m condenser_lite pretrain --preset paper --method cocondenser --set max_steps=100
    python -m condenser_lite finetune --init Luyu/co-condenser-marco --preset msmarco
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
    p.set_defaults(run=_pretrain)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main(sys.argv[1:])
