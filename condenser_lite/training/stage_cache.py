"""A pre-training stage's cache: its key, its folder, whether it is done.

Each finished stage is saved under ``$CONDENSER_LITE_CACHE/checkpoints/<method>-<key>/``, the key
covering every setting and, by content, the starting checkpoint, the tokenizer and the data files
read (``stage_settings``), so chapters and the command line share a stage instead of re-running
it, replacing a file gives a new stage, and an interrupted stage resumes from its last training
checkpoint. Explained in chapter 2 (``notebooks/02_condenser.ipynb``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..data.sources import PRETRAINING_SOURCES, data_id
from ..data.tokenizer import load_tokenizer, tiny_tokenizer, tokenizer_key
from ..utils.cache import cache_dir, settings_hash
from ..utils.devices import resolve_precision
from ..utils.loading import checkpoint_key
from ..utils.roles import having
from .pretraining_config import StageConfig
from .pretraining_data import HEAD_GAUGES, TARGET_CORPORA

DONE_FILE = "pretrain_config.json"  # written last: a stage folder without it is unfinished
# a stage's fields by how they join its key (their key role, utils.roles): never (they change
# neither the weights nor the log), or only where set away from their defaults
BOOKKEEPING = having(StageConfig, "key", "no")
IF_CHANGED = {f.name: f.default for f in dataclasses.fields(StageConfig)
              if f.name in having(StageConfig, "key", "if_changed")}


def stage_data(cfg: StageConfig) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """The data sets a stage reads and which of their files: ``sources.data_id``'s names and roles."""
    if cfg.method == "cocondenser" or cfg.corpus not in ("general", "wikipedia"):
        return (TARGET_CORPORA.get(cfg.corpus, cfg.corpus),), ("corpus",)
    if cfg.corpus == "wikipedia":
        return ("wikipedia-full", "wikitext-103", "news"), None
    return PRETRAINING_SOURCES, None


def stage_settings(cfg: StageConfig, tokenizer=None, data_dir: str | None = None) -> dict:
    """Everything a stage's result depends on, by content (chapter 2): every setting of
    ``StageConfig.settings`` (the model's among them) but the ``BOOKKEEPING`` ones (a field added
    to either config joins by itself), the ``IF_CHANGED`` ones only where set away from their
    defaults (a switch of the paper's design only where the stage turns it on), with
    ``init`` as the starting checkpoint's content key (``loading.checkpoint_key``), ``tokenizer``
    as the vocabulary's (``tokenizer.tokenizer_key``) and ``data`` as the files read
    (``sources.data_id``). Replacing the files at the ``init`` path or in the data mirror gives a
    new key; a missing mirror folder raises instead of reusing a stale stage."""
    tokenizer = tokenizer if tokenizer is not None else get_tokenizer(cfg, data_dir)
    # the switches join only where they deviate, so the paper's Condenser keeps one key whatever
    # switches the book adds beside it (and a stage that turns one on gets a key of its own)
    settings = {k: v for k, v in cfg.settings().items() if k not in BOOKKEEPING and k not in IF_CHANGED}
    settings.update({k: getattr(cfg, k) for k, usual in IF_CHANGED.items() if getattr(cfg, k) != usual})
    names, roles = stage_data(cfg)
    settings.update(init=checkpoint_key(cfg.init), tokenizer=tokenizer_key(tokenizer),
                    data=data_id(names, data_dir, roles),
                    mixed_precision=resolve_precision(cfg.mixed_precision))  # "auto" differs by machine
    if cfg.method != "mlm" and cfg.heldout_fraction is not None:
        settings["gauges"] = HEAD_GAUGES
    return settings


def stage_key(cfg: StageConfig, tokenizer=None, data_dir: str | None = None) -> str:
    """Hash of ``stage_settings``: the stage's cache folder is ``<cache>/checkpoints/<method>-<key>`` (chapter 2)."""
    return settings_hash(stage_settings(cfg, tokenizer, data_dir))


def is_done(path: str | Path) -> bool:
    return (Path(path) / DONE_FILE).exists()


def stage_folder(cfg: StageConfig, data_dir: str | None = None) -> Path:
    """The cache folder ``pretrain(cfg)`` uses: ``<cache>/checkpoints/<method>-<stage_key>``. Chapter 2."""
    return cache_dir("checkpoints") / f"{cfg.method}-{stage_key(cfg, data_dir=data_dir)}"


def stage_done(cfg: StageConfig, output_dir: str | Path | None = None, data_dir: str | None = None) -> bool:
    """Whether ``pretrain(cfg, output_dir)`` would reuse a finished stage instead of training
    (the estimate before long work skips it then). Chapter 2."""
    return is_done(Path(output_dir) if output_dir is not None else stage_folder(cfg, data_dir))



def get_tokenizer(cfg: StageConfig, data_dir: str | None = None):
    """The stage's tokenizer: explicit, else the starting checkpoint's, else the book's WordPiece."""
    if cfg.model.tokenizer is not None:
        return load_tokenizer(cfg.model.tokenizer)
    if cfg.init is not None:
        return load_tokenizer(cfg.init)
    return tiny_tokenizer(vocab_size=cfg.model.vocab_size, data_dir=data_dir)

