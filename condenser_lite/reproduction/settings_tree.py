"""The settings tree: every setting of a preset by one path, and the recorded presets read back.

Every setting has one path: a preset's own field by its name (``seeds``, ``task``), a
component's as ``<component>.<field>`` (``model.hidden_size``, ``finetune.lr``,
``sts.epochs_full``), and a pre-training stage's as ``stages.<stage>.<field>``
(``stages.bert.max_steps``, ``stages.cocondenser.lr``): the field's own name in the stage it
configures. ``--set``, a chapter's ``settings`` and ``Preset.replace`` read paths; a bare name
stands for the one path that ends in it (``hidden_size``), and one that several paths end in
(``lr``) is refused, naming them. The committed results files record their presets in a layout
with one flat ``pretraining`` dict (``s1_steps``, ``cocondenser_lr``, ...): those names are
refused with the paths that hold them (``RECORDED_LAYOUT``), and ``preset_from_record`` reads a
preset recorded in either layout. Explained in chapter 4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..training.finetune import FinetuneConfig
from ..training.pretraining_config import RECIPE_FIELDS, STAGES, ModelConfig, StageRecipe, Stages
from ..training.similarity import STSConfig
from ..utils.errors import ConfigError

COMPONENTS = {"model": ModelConfig, "stages": Stages, "finetune": FinetuneConfig, "sts": STSConfig}

# The recorded layout's ``pretraining`` settings -> (the stages that hold each, its name there):
# what a recorded preset means, and the paths an error names for such a name.
GENERAL = ("bert", "condenser")
RECORDED_LAYOUT: dict[str, tuple[tuple[str, ...], str]] = {
    "s1_steps": (("bert",), "max_steps"), "s2_steps": (("condenser",), "max_steps"),
    "s3_steps": (("cocondenser",), "max_steps"),
    "batch_size": (GENERAL, "batch_size"), "grad_accum": (GENERAL, "grad_accum"), "lr": (GENERAL, "lr"),
    "general_corpus": (GENERAL, "corpus"), "general_limit": (GENERAL, "corpus_limit"),
    "cocondenser_batch": (("cocondenser",), "batch_size"), "cocondenser_lr": (("cocondenser",), "lr"),
    "chunk_size": (("cocondenser",), "chunk_size"), "min_span": (("cocondenser",), "min_span"),
    "cocondenser_head": (("cocondenser",), "head"), "target_limit": (("cocondenser",), "corpus_limit"),
    **{k: (tuple(STAGES), k) for k in ("epochs", "weight_decay", "warmup_ratio", "seed", "mixed_precision",
                                        "save_every", "heldout_fraction", "eval_blocks", "eval_every")},
}


def setting_tree() -> dict[str, tuple[type, str]]:
    """Every path of the settings tree -> ``(the config class that holds it, its field)``. Chapter 4."""
    from .presets import Preset

    tree = {f.name: (Preset, f.name) for f in dataclasses.fields(Preset) if f.name not in COMPONENTS}
    for part, cls in COMPONENTS.items():
        if cls is Stages:
            tree.update({f"stages.{s}.{f}": (StageRecipe, f) for s in STAGES for f in RECIPE_FIELDS})
        else:
            tree.update({f"{part}.{f.name}": (cls, f.name) for f in dataclasses.fields(cls)})
    return tree


def recorded_paths(key: str) -> list[str] | None:
    """The paths that hold what a name of the recorded layout (``pretraining.s1_steps``,
    ``cocondenser_lr``) or a stage field without its stage (``stage.max_steps``) sets; None for
    any other key."""
    root, _, name = key.rpartition(".")
    if root == "stage" and name in RECIPE_FIELDS:
        return [f"stages.<{'|'.join(STAGES)}>.{name}"]
    if root in ("pretraining", "") and name in RECORDED_LAYOUT and (root or name not in RECIPE_FIELDS):
        stages, field = RECORDED_LAYOUT[name]
        return [f"stages.{s}.{field}" for s in stages]
    return None


def setting_path(key: str, tree: Mapping[str, Any] | None = None) -> str:
    """The path ``key`` names: itself, or the one path ending in a bare ``key``; an unknown,
    recorded-layout or ambiguous key raises ``ConfigError`` naming the paths to choose from. Chapter 4."""
    tree = setting_tree() if tree is None else tree
    key = key.strip().replace("-", "_")
    if key in tree:
        return key
    recorded = recorded_paths(key)
    if recorded:
        raise ConfigError(f"{key} is no path of the settings tree: each pre-training stage has its own settings; "
                          "set " + " and ".join(recorded))
    if "." not in key:
        owners = [p for p in tree if p.rpartition(".")[2] == key]
        if len(owners) == 1:
            return owners[0]
        if owners:
            raise ConfigError(f"setting {key!r} is ambiguous: name its path, " + " or ".join(owners))
    part = key.rpartition(".")[0]
    fields = sorted({p.rpartition(".")[2] for p in tree if p.startswith(f"{part}.")})
    known = (f"{part}'s fields: {', '.join(fields)}" if fields else
             f"paths start with {', '.join(COMPONENTS)} (stages.{'|'.join(STAGES)}) or name a preset field")
    raise ConfigError(f"unknown setting {key!r}; {known} (e.g. model.hidden_size, stages.bert.lr, finetune.lr)")


# Paths the protocol does not read: it pre-trains every stage of an arm's chain on the arm's
# pre-training seed (``pretrain_seeds``, else ``stages.bert.seed``); ``pretrain`` reads them.
PROTOCOL_UNREAD = ("stages.condenser.seed", "stages.cocondenser.seed")


def check_protocol_reads(paths, where: str = "--set") -> None:
    """Refuse, in one line, a path the protocol (``experiments``, a chapter's re-run) does not
    read (``PROTOCOL_UNREAD``). Chapter 4."""
    for path in paths:
        if path in PROTOCOL_UNREAD:
            raise ConfigError(f"{where} {path}: the protocol pre-trains each arm's stages on the arm's seed; set "
                              "stages.bert.seed (or pretrain_seeds) for experiments, or this path for pretrain")


# ---- a recorded preset, in either layout ---------------------------------------------------------


def stages_from_pretraining(pretraining: Mapping[str, Any], where: str = "the record") -> Stages:
    """The ``Stages`` that a recorded ``pretraining`` dict stands for: each of its settings in the
    stages that read it (``RECORDED_LAYOUT``), the rest at the ``StageRecipe`` defaults, which the
    stages built from it had too. Chapter 4."""
    unknown = sorted(set(pretraining) - set(RECORDED_LAYOUT))
    if unknown:
        raise ConfigError(f"{where}: its pretraining settings name {', '.join(unknown)}, which no version of "
                          "condenser_lite had; give a results file the protocol wrote")
    changes: dict[str, dict[str, Any]] = {s: {} for s in STAGES}
    for name, value in pretraining.items():
        stages, field = RECORDED_LAYOUT[name]
        for s in stages:
            changes[s][field] = value
    return Stages().with_changes(**changes)


def preset_from_record(record: Mapping[str, Any], where: str = "the record") -> "Preset":
    """The ``Preset`` a results file records (its ``preset``, or ``provenance.settings``), with
    ``stages`` or with the flat ``pretraining`` dict the committed results files hold: the one reader of recorded presets, for ``merge``, the chapters and the tests.
    ``where`` names the file in errors. Chapter 4."""
    from .presets import Preset

    out: dict[str, Any] = {}
    for key, value in record.items():
        if key == "pretraining":
            out["stages"] = stages_from_pretraining(value, where)
        elif key == "stages":
            out["stages"] = Stages(**{s: _built(StageRecipe, v, f"stages.{s}", where) for s, v in value.items()})
        elif key in COMPONENTS:
            out[key] = _built(COMPONENTS[key], value, key, where)
        elif isinstance(value, list):
            out[key] = tuple(value)
        else:
            out[key] = value
    unknown = sorted(set(out) - {f.name for f in dataclasses.fields(Preset)})
    if unknown:
        raise ConfigError(f"{where}: its preset names {', '.join(unknown)}, which this version of condenser_lite "
                          "does not have; read it with the version that wrote it (its provenance.commit)")
    return Preset(**out)


def _built(cls: type, values: Mapping[str, Any], part: str, where: str) -> Any:
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ConfigError(f"{where}: its {part} settings name {', '.join(unknown)}, which this version of "
                          "condenser_lite does not have; merge parts written by this version (re-run them)")
    return cls(**values)
