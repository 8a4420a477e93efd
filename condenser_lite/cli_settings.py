"""The command line's ``--set``: which paths of the settings tree each command reads, and the
preset, stage or recipe it builds from them.

``experiments`` reads every path (``settings_tree.check_protocol_reads``); ``pretrain`` the
paths its one stage reads (``pretrain_reads``): ``stages.<its stage>.*`` and ``model.*``, by
what its method reads; ``finetune`` the recipe's ``finetune.*``. A path a command does not read
is refused in one line, rather than ignored. Explained on the page "Running the book"
(``book/running.md``) and in chapter 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from .parameters import parse_settings
from .reproduction.configuration.presets import (ALIASES, PRESETS, PRETRAINED_STAGE_LR, RETRIEVAL_RECIPES,
                                                 finetune_recipe, get_preset, recipe_for, stage_config)
from .reproduction.configuration.settings_tree import Preset, check_protocol_reads
from .training.finetune import FinetuneConfig
from .training.pretraining_config import MODEL_FIELDS, READ_BY, RECIPE_FIELDS, StageConfig, stage_name
from .utils.errors import ConfigError
from .utils.roles import having


def preset_list() -> str:
    """The registry's presets in its order, each with its aliases: ``micro, ..., paper (alias full)``."""
    aliases = {name: [a for a, target in ALIASES.items() if target == name] for name in PRESETS}
    return ", ".join(name + (f" (alias {', '.join(aliases[name])})" if aliases[name] else "") for name in PRESETS)


def apply_settings(preset: Preset, settings: dict[str, Any], where: str = "--set") -> Preset:
    """``preset`` with ``settings`` (``parameters.parse_settings``'s paths) applied: what
    ``experiments --set`` runs; a path the protocol does not read, or a value a config refuses,
    is named. Chapter 4."""
    check_protocol_reads(settings, where)
    try:
        return preset.replace(**settings) if settings else preset
    except ConfigError as err:
        raise ConfigError(f"{where} {' '.join(settings)}: {err}") from None


def pretrain_reads(preset: Preset, method: str, init: str | None) -> set[str]:
    """The paths of the settings tree that the stage ``pretrain --method method`` runs from
    ``init`` reads: its named stage's fields (``pretraining_config.stage_name``) and the model's,
    those its method uses (``StageConfig.unread`` decides), and coCondenser's ``task`` (its
    corpus). Chapter 2."""
    stage = stage_name(method, init)
    return ({f"model.{n}" for n in MODEL_FIELDS if not StageConfig.unread(method, [n])}
            | {f"stages.{stage}.{n}" for n in RECIPE_FIELDS if not StageConfig.unread(method, [n])}
            | ({"task"} if method == "cocondenser" else set()))


def _not_read(path: str, method: str, init: str | None) -> str:
    """One line saying why the ``pretrain`` stage does not read ``path``, and what to do instead."""
    stage = stage_name(method, init)
    part, _, name = path.rpartition(".")
    start = "from scratch" if init is None else "continuing --init"
    if name in READ_BY and part in ("model", f"stages.{stage}"):
        return (f"{' and '.join(READ_BY[name])} stages read it, {method} stages do not (it would "
                "change the cache key and nothing else); leave it out")
    if part.startswith("stages.") and name in READ_BY and method not in READ_BY[name]:
        return (f"only {' and '.join(READ_BY[name])} stages read {name}; the {method} stage {start} "
                f"does not: leave it out, or set {path} for experiments")
    if part.startswith("stages."):
        return (f"the {method} stage {start} trains by stages.{stage}; set stages.{stage}.{name}, or set "
                f"{path} for experiments")
    return ("pretrain runs one pre-training stage, which does not read it; set it for experiments (or finetune), "
            f"or set the stage's own settings, stages.{stage}.* (e.g. stages.{stage}.max_steps)")


def stage_config_from_args(args: argparse.Namespace) -> StageConfig:
    """The stage ``pretrain`` runs: the preset's (``presets.stage_config``), exactly as the
    protocol's arm of that method builds it; at ``paper`` scale the starting checkpoint defaults
    to the preset's published one (bert-base-uncased; Luyu/condenser for coCondenser). ``--set``
    takes the paths this stage reads (``pretrain_reads``), applied to the preset before the stage
    is built, as ``experiments`` applies them; any other path (``finetune.lr``,
    ``stages.condenser.max_steps`` for a stage from scratch, ``stages.condenser.chunk_size`` for a
    Condenser) is refused rather than ignored. Chapter 2.

    A stage continuing a checkpoint this library did not train (``loading.saved_here``: the
    Hub's, a sentence-transformers folder) learns at the papers' rate for a pre-trained model
    (``presets.PRETRAINED_STAGE_LR``), said in one line: the scaled-down presets' rate is for the
    small models they train from scratch, and would undo the checkpoint's pre-training. A rate
    given with ``--set`` is kept."""
    from .utils.loading import saved_here

    preset = get_preset(args.preset)
    init = _init_of(preset, args)
    stage = f"stages.{stage_name(args.method, init)}"
    settings = parse_settings([_of_stage(pair, stage) for pair in args.set])
    refuse_twice(settings, {"--corpus": (f"{stage}.corpus", args.corpus),
                            "--min-span": (f"{stage}.min_span", args.min_span)})
    reads = pretrain_reads(preset, args.method, init)
    for path in settings:
        if path not in reads:
            raise ConfigError(f"--set {path}: {_not_read(path, args.method, init)}")
    rate = {}
    if init is not None and not saved_here(init) and f"{stage}.lr" not in settings:
        rate = {f"{stage}.lr": PRETRAINED_STAGE_LR}
        print(f"pre-training rate: lr {PRETRAINED_STAGE_LR:g}, the papers' for continuing a pre-trained model "
              f"(--init was not trained by this library); --set {stage}.lr=... names another", file=sys.stderr)
    try:
        preset = preset.replace(**settings, **rate) if settings or rate else preset
    except ConfigError as err:
        raise ConfigError(f"--set {' '.join(settings)}: {err}") from None
    start = {"corpus": absolute(args.corpus)} if args.corpus else {}
    if args.min_span is not None:  # 0 too: refused by StageConfig, not ignored
        start["min_span"] = args.min_span
    return stage_config(preset, args.method, init, **start)


def _of_stage(pair: str, stage: str) -> str:
    """``pair`` with a bare stage field (``max_steps=500``) or ``stage.NAME`` read as the one
    stage this command trains (``stages.<stage>.NAME``): unambiguous here, though not in
    ``experiments``, where several stages have a ``max_steps``. Chapter 2."""
    from .training.pretraining_config import StageRecipe

    key, sep, value = pair.partition("=")
    name = key.strip().removeprefix("stage.").replace("-", "_")
    fields = {f.name for f in dataclasses.fields(StageRecipe)}
    if sep and "." not in name and name in fields and (key.strip().startswith("stage.") or "." not in key):
        return f"{stage}.{name}={value}"
    return pair


def refuse_twice(settings: dict[str, Any], flags: dict[str, tuple[str, Any]]) -> None:
    """Refuse a setting given both by its flag and by ``--set`` (``flags``: flag -> (path, the
    flag's value or None)): which one wins is not for a reader to guess."""
    for flag, (path, value) in flags.items():
        if value is not None and path in settings:
            raise ConfigError(f"{flag} and --set {path} both set {path.rsplit('.', 1)[-1]}; give one of them")


def _init_of(preset: Preset, args: argparse.Namespace) -> str | None:
    """The stage's starting checkpoint: ``--init``, else at ``paper`` scale the published one."""
    if args.init is None and preset.pretrained:
        return preset.pretrained["condenser" if args.method == "cocondenser" else "bert"]
    return args.init


def absolute(source: str) -> str:
    """A data path made absolute (so cache keys and worker processes see one name); names stay."""
    from .data.beir import is_path

    return str(Path(source).expanduser().resolve()) if is_path(source) else source


def recipe_from_args(args: argparse.Namespace) -> FinetuneConfig:
    """The fine-tuning recipe: ``--preset`` (a preset or a named recipe), by default
    ``presets.recipe_for``'s, named in one line, with ``--set finetune.*``; any other path is
    refused, naming the command that reads it. Chapter 4."""
    name = args.preset
    if name is None:
        name, why = recipe_for(args.data, args.init)
        lr = finetune_recipe(name).lr
        print(f"fine-tuning recipe: {name} (lr {lr:g}), {why}; --preset names another", file=sys.stderr)
    if name not in PRESETS and name not in ALIASES and name not in RETRIEVAL_RECIPES:
        raise ConfigError(f"--preset {name}: no such preset or recipe; choose one of {preset_list()} or a recipe: "
                          f"{', '.join(RETRIEVAL_RECIPES)}")
    settings = parse_settings(args.set)
    for path in settings:
        if not path.startswith("finetune."):
            hint = " (the fine-tuning's own step limit is finetune.max_steps)" if path.endswith(".max_steps") else ""
            fields = [f.name for f in dataclasses.fields(FinetuneConfig) if f.name not in having(FinetuneConfig, "unread")]
            raise ConfigError(f"--set {path}: finetune runs one recipe and reads only finetune.* "
                              f"({', '.join(fields)}){hint}; {path} "
                              "belongs to " + ("pretrain or experiments" if path.startswith(("stages.", "model."))
                                               else "experiments"))
    return dataclasses.replace(finetune_recipe(name), **{p.removeprefix("finetune."): v for p, v in settings.items()})
