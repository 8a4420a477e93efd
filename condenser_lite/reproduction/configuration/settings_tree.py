"""The settings tree: ``Preset``, its root, every setting of it by one path, and the recorded
presets read back.

Every setting has one path: a preset's own field by its name (``seeds``, ``task``), a
component's as ``<component>.<field>`` (``model.hidden_size``, ``finetune.lr``,
``sts.epochs_full``), and a pre-training stage's as ``stages.<stage>.<field>``
(``stages.bert.max_steps``, ``stages.cocondenser.lr``): the field's own name in the stage it
configures. ``--set``, a chapter's ``settings`` and ``Preset.replace`` read paths; a bare name
stands for the one path that ends in it (``hidden_size``), and one that several paths end in
(``lr``) is refused, naming them. ``preset_from_record`` reads a preset a results file records.
Explained in chapter 4.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ...training.finetune import FinetuneConfig
from ...training.pretraining_config import RECIPE_FIELDS, STAGES, ModelConfig, StageRecipe, Stages
from ...training.similarity import STSConfig
from ...utils.errors import ConfigError
from ...utils.roles import having
from .registry import ARMS, CONTROL_ARMS, MAIN_ARMS, MODIFIED_ARM, STANDARD_ARMS

@dataclass(frozen=True)
class Preset:
    """A named set of every setting, and the protocol's own choices.

    ``arms``: the arms to run (``ARMS``; by default ``STANDARD_ARMS``); ``modified_condenser``:
    the changes to the Condenser stage that make the ``condenser_mod`` arm (``MODIFIED_ARM``), a
    deviation from the paper's head that the mechanism page chose, e.g. ``{"skip_from": 0}``; it
    is pre-trained and evaluated like a main arm. ``pretrained`` maps arms to existing checkpoints (Hub
    ids at full scale), which skip pre-training; ``seeds``: fine-tuning seeds (the spread the
    scorecard compares against); ``pretrain_seeds``: pre-training seeds of the main arms (``None``:
    ``stages.bert.seed`` only, for every stage of an arm); with more than one, the main arms are pre-trained
    once per seed, every fine-tuning seed runs on each, and the spread covers both (the ablations
    are pre-trained with the first ``ablation_pretrain_seeds`` of them only). Retrieval: ``task`` (``"scifact"`` or any BEIR name
    or the path of a BEIR-format folder: fine-tuned on its ``train`` split, evaluated on ``test``,
    its corpus coCondenser's target; ``"msmarco"``: Tevatron MS MARCO, dev split), ``train_sizes``
    (``None`` = every training query), round 2 for ``round2_arms`` at the full size, the ablations at ``ablation_sizes``
    only; ``metrics`` (the first one is the headline), nb-recall at ``nb_n`` x ``nb_k``. STS-b:
    ``sts_arms`` at ``sts_sizes`` pairs (``None`` = all 5,749). Attention entropy over
    ``entropy_texts`` texts of at most ``entropy_max_len`` tokens. ``micro_*`` shrink the data for
    the tests (``None`` = no limit). Chapter 4.
    """

    name: str = "tiny"
    model: ModelConfig = ModelConfig()
    stages: Stages = Stages()
    finetune: FinetuneConfig = FinetuneConfig()
    sts: STSConfig = STSConfig()
    arms: tuple[str, ...] = STANDARD_ARMS
    modified_condenser: dict[str, Any] | None = None
    pretrained: dict[str, str] | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    pretrain_seeds: tuple[int, ...] | None = None
    ablation_pretrain_seeds: int = 1
    task: str = "scifact"
    train_sizes: tuple[int | None, ...] = (100, None)
    ablation_sizes: tuple[int | None, ...] = (None,)
    round2_arms: tuple[str, ...] = ("bert", "condenser", "cocondenser")
    metrics: tuple[str, ...] = ("nDCG@10", "RR@10", "R@100")
    nb_n: tuple[int, ...] = (10, 50)
    nb_k: tuple[int, ...] = (10, 50, 100, 200)
    sts_arms: tuple[str, ...] = MAIN_ARMS
    sts_sizes: tuple[int | None, ...] = (500, 1000, None)
    entropy_texts: int = 256
    entropy_max_len: int = 128
    micro_corpus: int | None = None  # target corpus: judged documents + this many others
    micro_train_queries: int | None = None
    micro_test_queries: int | None = None
    micro_sts_pairs: int | None = None  # caps STS train (the "full" size) and test pairs
    components: ClassVar[tuple[str, ...]] = ("model", "stages", "finetune", "sts")

    def __post_init__(self) -> None:
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ConfigError(f"Preset.arms: unknown arm(s) {unknown}; choose from {ARMS}")
        needs = [a for a in (MODIFIED_ARM, *CONTROL_ARMS) if a in self.arms]
        if needs and not self.modified_condenser:
            raise ConfigError(f"Preset.arms names {needs[0]!r} but modified_condenser is not set: give the "
                              "Condenser stage's changes, e.g. modified_condenser={'skip_from': 0}")
        if self.ablation_pretrain_seeds < 1:
            raise ConfigError(f"Preset.ablation_pretrain_seeds={self.ablation_pretrain_seeds!r}: the ablations run on "
                              "at least the first pre-training seed (1)")
        for name in ("seeds", "pretrain_seeds"):  # a seed of 0.5 would fail only after every stage trained
            bad = [s for s in getattr(self, name) or () if isinstance(s, bool) or not isinstance(s, int)]
            if bad:
                raise ConfigError(f"Preset.{name}={getattr(self, name)!r}: seeds are whole numbers, not {bad[0]!r}; "
                                  f"e.g. --set {name}='[0, 1, 2]'")
        if not self.seeds:
            raise ConfigError("Preset.seeds must name at least one seed (the papers' claims need >= 3), e.g. "
                              "--seeds 0,1,2 (--set seeds='[0, 1, 2]')")
        if not isinstance(self.task, str) or not self.task.strip():
            raise ConfigError(f"Preset.task={self.task!r}: use 'scifact' (or another BEIR name), 'msmarco' (full "
                             "scale) or the path of a folder in BEIR's format")
        if not isinstance(self.stages, Stages):
            raise ConfigError(f"Preset.stages={self.stages!r} must be a Stages (one StageRecipe per stage)")
        if self.pretrain_seeds is not None and (not self.pretrain_seeds or len(set(self.pretrain_seeds))
                                                < len(self.pretrain_seeds)):
            raise ConfigError(f"Preset.pretrain_seeds={self.pretrain_seeds!r} must be None (one seed: "
                             "stages.bert.seed) or distinct seeds, e.g. (42, 43)")
        if not self.train_sizes:
            raise ConfigError("Preset.train_sizes must list at least one training size (None = all queries)")

    def locate(self, key: str) -> tuple[str, ...]:
        """The path ``key`` names in the settings tree (``settings_tree.setting_path``), as its
        parts: a field of the preset (``("seeds",)``), a component's (``("finetune", "lr")``), a
        stage's (``("stages", "cocondenser", "lr")``, also by a bare name that one path ends in),
        a whole component (``("model",)``) or a whole stage (``("stages", "bert")``)."""
        parts = tuple(key.strip().split("."))
        if parts[0] in self.components and (len(parts) == 1 or (parts[0] == "stages" and len(parts) == 2
                                                               and parts[1] in STAGES)):
            return parts
        return tuple(setting_path(key).split("."))

    def get(self, key: str) -> Any:
        """The value of ``key`` (see ``locate``)."""
        value: Any = self
        for part in self.locate(key):
            value = getattr(value, part)
        return value

    def replace(self, **changes: Any) -> Preset:
        """A copy with ``changes``: a field (``seeds=(0,)``), a whole component
        (``finetune=FinetuneConfig(...)``), or a setting by its path
        (``**{"stages.cocondenser.lr": 1e-4, "finetune.lr": 1e-4}``) or by a bare name that only
        one path ends in (``tokenizer=...``; ``lr``, ``max_steps``, ... need the path)."""
        return _replaced(self, {self.locate(key): value for key, value in changes.items()})

    @property
    def pretraining_seeds(self) -> tuple[int, ...]:
        """The pre-training seeds of the main arms: ``pretrain_seeds``, else the pre-training
        stage's ``seed`` alone (every stage of an arm's chain runs on the arm's seed). Chapter 4."""
        return tuple(self.pretrain_seeds) if self.pretrain_seeds else (self.stages.bert.seed,)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["pretrained"] = dict(self.pretrained) if self.pretrained else None
        d["modified_condenser"] = dict(self.modified_condenser) if self.modified_condenser else None
        return d


def _replaced(obj: Any, changes: Mapping[tuple[str, ...], Any]) -> Any:
    """``obj`` (a dataclass) with ``changes`` by path parts, nested configs replaced inside."""
    direct = {path[0]: value for path, value in changes.items() if len(path) == 1}
    deeper: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, value in changes.items():
        if len(path) > 1:
            deeper.setdefault(path[0], {})[path[1:]] = value
    for name, inner in deeper.items():
        direct[name] = _replaced(direct.get(name, getattr(obj, name)), inner)
    return dataclasses.replace(obj, **direct)


COMPONENTS = {"model": ModelConfig, "stages": Stages, "finetune": FinetuneConfig, "sts": STSConfig}

def setting_tree() -> dict[str, tuple[type, str]]:
    """Every path of the settings tree -> ``(the config class that holds it, its field)``. Chapter 4."""
    tree = {f.name: (Preset, f.name) for f in dataclasses.fields(Preset) if f.name not in COMPONENTS}
    for part, cls in COMPONENTS.items():
        if cls is Stages:
            tree.update({f"stages.{s}.{f}": (StageRecipe, f) for s in STAGES for f in RECIPE_FIELDS})
        else:
            tree.update({f"{part}.{f.name}": (cls, f.name) for f in dataclasses.fields(cls)
                         if f.name not in having(cls, "unread")})
    return tree


def recorded_paths(key: str) -> list[str] | None:
    """The paths that hold what a stage field without its stage (``stage.max_steps``) sets, in a
    command that trains no one stage; None for any other key."""
    root, _, name = key.rpartition(".")
    if root == "stage" and name in RECIPE_FIELDS:
        return [f"stages.<{'|'.join(STAGES)}>.{name}"]
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
        flat = {p.replace(".", "_"): p for p in tree}  # cocondenser_lr -> stages.cocondenser.lr
        near = difflib.get_close_matches(key, flat, n=1, cutoff=0.75)
        if near:
            raise ConfigError(f"unknown setting {key!r}; did you mean {flat[near[0]]}?")
    part, _, name = key.rpartition(".")
    left = having(COMPONENTS[part], "unread") if part in COMPONENTS else {}
    if name in left:
        raise ConfigError(f"{key} is no setting of {part}: {left[name]}")
    fields = sorted({p.rpartition(".")[2] for p in tree if p.startswith(f"{part}.")})
    near = difflib.get_close_matches(name, fields, n=1) if fields else []
    if near:  # a typo: the nearest field first, then the rest
        raise ConfigError(f"unknown setting {key!r}; did you mean {part}.{near[0]}? ({part}'s fields: "
                          f"{', '.join(fields)})")
    known = (f"{part}'s fields: {', '.join(fields)}" if fields else
             f"paths start with {', '.join(COMPONENTS)} (stages.{'|'.join(STAGES)}) or name a preset field")
    raise ConfigError(f"unknown setting {key!r}; {known} (e.g. model.hidden_size, stages.bert.lr, finetune.lr)")


# Paths the protocol does not read (the stages' protocol_unread role): it pre-trains every stage
# of an arm's chain on the arm's pre-training seed; ``pretrain`` reads them.
PROTOCOL_UNREAD = tuple(f"stages.{stage}.{name}" for stage, names in having(Stages, "protocol_unread").items()
                        for name in names)


def check_protocol_reads(paths, where: str = "--set") -> None:
    """Refuse, in one line, a path the protocol (``experiments``, a chapter's re-run) does not
    read (``PROTOCOL_UNREAD``). Chapter 4."""
    for path in paths:
        if path in PROTOCOL_UNREAD:
            raise ConfigError(f"{where} {path}: the protocol pre-trains each arm's stages on the arm's seed; set "
                              "stages.bert.seed (or pretrain_seeds) for experiments, or this path for pretrain")


# ---- a recorded preset ---------------------------------------------------------------------------


def preset_from_record(record: Mapping[str, Any], where: str = "the record") -> Preset:
    """The ``Preset`` a results file records (its ``preset``, or ``provenance.settings``): the one
    reader of recorded presets, for ``merge``, the chapters and the tests. ``where`` names the
    file in errors. Chapter 4."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key == "stages":
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
