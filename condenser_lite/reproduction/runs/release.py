"""Committed checkpoints: the final models of a protocol run, exported small enough to commit.

A protocol run leaves its pre-trained arms in the cache (``CONDENSER_LITE_CACHE``), where no
reader of the book has them. ``export_checkpoints`` writes the final BERT, Condenser (with its
head), coCondenser and any further Condenser-family arm of a run as Hugging Face
``save_pretrained`` folders with their tokenizer, under ``results/checkpoints/<preset>/<arm>/``:
weights stored in float16 and loaded as float32 (the config's ``dtype``: CPUs train and run in
float32), at most ``MAX_BYTES`` together, each named by its content key (``loading.checkpoint_key``)
so the results' provenance can name them (``record_checkpoints``) and a check can tell a folder
that changed since (``verify_checkpoints``). ``transformers.AutoModel.from_pretrained`` loads each
folder; ``condenser.Condenser.from_pretrained`` loads a Condenser's head too. The chapters' live
demonstrations and readers' own experiments start from them. Explained in page 2b
(``notebooks/02_reliance.ipynb``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from ...data.tokenizer import load_tokenizer
from ...modeling.condenser import BertMLM, Condenser
from ...utils.cache import cache_dir
from ...utils.errors import CheckpointError, ConfigError
from ...retrieval.pooling import write_pooling
from ...utils.loading import checkpoint_key, has_head, mark_saved
from ..configuration.registry import ABLATION_ARMS
from ..evidence.results import REPO_ROOT, RESULTS_DIR

CHECKPOINTS_DIR = RESULTS_DIR / "checkpoints"
MAX_BYTES = 25_000_000  # every exported folder of a run together (25 MB): small enough for the repository
RELEASED_ARMS = ("bert", "condenser", "cocondenser")
STORED_DTYPE = torch.float16


def folder_bytes(path: str | os.PathLike) -> int:
    """Total size of the files under ``path``. Chapter 2."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def released_arms(results: Mapping) -> list[str]:
    """The arms ``export_checkpoints`` writes by default: ``RELEASED_ARMS`` and any further arm
    with a Condenser head that is not one of coCondenser's ablations (a modified Condenser).
    Chapter 2."""
    arms = results.get("arms", {})
    extra = [a for a, e in arms.items() if a not in RELEASED_ARMS and a not in ABLATION_ARMS and a != "bert_cont"
             and (found := located(e.get("checkpoint"))) is not None and has_head(found)]
    return [a for a in RELEASED_ARMS if a in arms] + extra


def export_checkpoint(source: str | os.PathLike, dest: str | os.PathLike) -> dict:
    """One pre-trained checkpoint folder as a float16 ``save_pretrained`` folder with its
    tokenizer: a Condenser with its head (``condenser_head.pt``, ``condenser_config.json``), a BERT
    as a plain ``BertForMaskedLM``; each also a sentence-transformers folder pooled by ``[CLS]``
    (``pooling.write_pooling``). Returns ``{"head", "bytes"}``. Chapter 2."""
    head = has_head(source)
    model = Condenser.from_pretrained(source) if head else BertMLM.from_pretrained(source)
    tokenizer = load_tokenizer(source)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a bar per shard of a 4 MB file says nothing
    try:
        model.to(STORED_DTYPE).save_pretrained(dest)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(dest)
    # stored in float16 (half the bytes), loaded as float32 by default: training and inference on
    # a CPU run in float32, and a reader's `from_pretrained` should not hand them half precision
    config_path = Path(dest) / "config.json"
    config = json.loads(config_path.read_text())
    config["dtype"] = "float32"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_pooling(dest)  # also a sentence-transformers folder, pooled by [CLS] as the book's retrievers
    mark_saved(dest)
    return {"head": head, "bytes": folder_bytes(dest)}


def _shown(path: Path) -> str:
    """A folder as the provenance names it: relative to the repository where it lies inside it."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def located(source: str | None) -> Path | None:
    """Where a checkpoint the results file recorded at ``source`` is: that folder, else the folder
    of the same name (its settings' key) in this machine's cache, ``$CONDENSER_LITE_CACHE/checkpoints``,
    so a cache copied or moved to another path still exports; None where neither is. Chapter 2."""
    if not source:
        return None
    for path in (Path(source), cache_dir("checkpoints") / Path(source).name):
        if path.is_dir():
            return path
    return None


def found_checkpoint(arm: str, source: str | None) -> Path:
    """``arm``'s checkpoint (``located``), or a ``CheckpointError`` saying where it was looked for."""
    path = located(source)
    if path is None:
        raise CheckpointError(f"{arm}'s checkpoint {source} is not here, nor under this cache's checkpoints/: export "
                              "on the machine whose cache ran the protocol, point CONDENSER_LITE_CACHE at a copy of "
                              "that cache, or re-run the protocol with this one")
    return path


def export_checkpoints(results: Mapping, out_dir: str | os.PathLike | None = None, arms: Sequence[str] | None = None,
                       max_bytes: int = MAX_BYTES, replace: bool = False) -> dict:
    """Export a protocol run's final pre-trained models (its first pre-training seed's, the
    ``results["arms"][arm]["checkpoint"]`` folders of the cache that ran it) with
    ``export_checkpoint`` into ``out_dir/<arm>/`` (default ``results/checkpoints/<preset>/``).

    ``arms``: default ``released_arms(results)``. Everything is written to a temporary folder
    first: beyond ``max_bytes`` together it is removed and ``ConfigError`` raised, so nothing is
    half-exported; an existing ``out_dir`` is replaced only with ``replace=True``. Returns the
    record for the results' provenance (``record_checkpoints``); per arm, ``key`` is the exported
    folder's ``loading.checkpoint_key``, ``source_key`` the cache folder's. Explained in page 2b
    (``notebooks/02_reliance.ipynb``).
    """
    preset = (results.get("preset") or {}).get("name") or "run"
    out = Path(out_dir) if out_dir is not None else CHECKPOINTS_DIR / preset
    arms = list(arms) if arms is not None else released_arms(results)
    entries = results.get("arms", {})
    unknown = [a for a in arms if a not in entries]
    if unknown:
        raise ConfigError(f"arms {unknown} are not in these results (arms: {list(entries)}): name arms the run trained")
    sources = {arm: found_checkpoint(arm, entries[arm].get("checkpoint")) for arm in arms}
    if out.exists() and not replace:
        raise CheckpointError(f"{out} exists: pass replace=True (release --replace) to replace the checkpoints there, "
                              "or another out_dir")
    foreign = sorted(p.name for p in out.iterdir() if not (p / "config.json").is_file()) if out.is_dir() else []
    if foreign or out.is_file():  # replacing deletes the folder: only one of exported checkpoints
        raise CheckpointError(f"{out} {'is a file' if out.is_file() else f'holds {foreign[0]!r}, which is no checkpoint'}"
                              " that release writes, and replacing would delete it; nothing was replaced: give "
                              "another folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        records = {}
        for arm in arms:
            done = export_checkpoint(sources[arm], tmp / arm)
            records[arm] = {**done, "source_key": checkpoint_key(sources[arm]),
                            "pretraining_seed": entries[arm].get("seed")}
        total = folder_bytes(tmp)
        if total > max_bytes:
            raise ConfigError(f"the checkpoints of {arms} take {total / 1e6:.1f} MB, more than {max_bytes / 1e6:g} MB: "
                              "export fewer arms (arms=...) or a smaller model")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for arm, rec in records.items():
        rec.update(path=_shown(out / arm), key=checkpoint_key(out / arm))
    return {"dir": _shown(out), "bytes": total, "max_bytes": max_bytes, "dtype": str(STORED_DTYPE).removeprefix("torch."),
            "arms": records}


def record_checkpoints(results: dict, export: Mapping) -> dict:
    """Name the exported checkpoints in the results' provenance (``provenance["checkpoints"]``,
    ``export_checkpoints``' record) and return ``results``. Chapter 2."""
    results.setdefault("provenance", {})["checkpoints"] = dict(export)
    return results


def verify_checkpoints(export: Mapping, root: str | os.PathLike = REPO_ROOT) -> list[str]:
    """What disagrees between an export record (``provenance["checkpoints"]``) and the folders
    (relative paths under ``root``): a folder missing, or its content key changed since. Empty
    when they agree. Chapter 2."""
    problems = []
    for arm, rec in export.get("arms", {}).items():
        path = Path(rec["path"]) if Path(rec["path"]).is_absolute() else Path(root) / rec["path"]
        if not (path / "config.json").is_file():
            problems.append(f"{arm}: {path} is missing")
        elif checkpoint_key(path) != rec["key"]:
            problems.append(f"{arm}: {path} changed since its export (key {checkpoint_key(path)}, recorded {rec['key']})")
    return problems
