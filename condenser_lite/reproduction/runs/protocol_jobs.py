"""What the protocol's jobs run in a worker process, and the line each finished one prints.

``finetune_job`` and ``sts_job`` fine-tune a pre-trained arm as a retriever or an STS-b
bi-encoder (``arms.finetune_arm``, ``arms.sts_arm``), the task and the STS-b pairs loaded once per
process; ``describe`` is a finished part's progress line, a pre-training stage's with its health
against the committed runs. ``protocol.job_graph`` builds the jobs from them. Explained in
chapter 4, ``notebooks/04_finetune.ipynb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...utils.errors import ConfigError
from .arms import finetune_arm, sts_arm
from ..configuration.settings_tree import Preset
from .tasks import load_task, sts_data

_MEMO: dict[Any, Any] = {}  # per process: the task and the STS-b pairs, loaded once


def finetune_job(preset: Preset, data_dir: str | None, pretrain_seed: int, **kwargs: Any) -> dict:
    """``arms.finetune_arm`` on the preset's task, tagged with the pre-training seed."""
    key = ("task", preset.task, preset.finetune.n_bm25_negatives, preset.micro_corpus, preset.micro_train_queries,
           preset.micro_test_queries, data_dir)
    if key not in _MEMO:
        _MEMO[key] = load_task(preset, data_dir)
    return {**finetune_arm(task=_MEMO[key], preset=preset, **kwargs), "pretrain_seed": pretrain_seed}


def sts_job(preset: Preset, data_dir: str | None, pretrain_seed: int, **kwargs: Any) -> dict:
    """``arms.sts_arm`` on the STS-b pairs, tagged with the pre-training seed."""
    key = ("sts", preset.micro_sts_pairs, data_dir)
    if key not in _MEMO:
        _MEMO[key] = sts_data(preset, data_dir)
    return {**sts_arm(preset=preset, data=_MEMO[key], **kwargs), "pretrain_seed": pretrain_seed}


def size_label(size: int | None, total: int) -> str:
    """A training size's label in the job keys and the results: the size, at most ``total``
    (``check_sizes`` refuses a size above it before any training)."""
    return str(total if size is None else min(size, total))


def check_sizes(setting: str, sizes: Sequence[int | None], total: int, what: str) -> None:
    """Refuse, before any training, a training size larger than the data (``what``: the data in
    words): it would silently train on all of it, under a label that is no longer the size
    asked for, and beside ``None`` it would be the same run twice.

    >>> check_sizes("train_sizes", (100, None), 5000, "training queries")
    >>> check_sizes("train_sizes", (100, None), 60, "training queries")
    Traceback (most recent call last):
    ...
    condenser_lite.utils.errors.ConfigError: train_sizes (100, None): 100 is more than the 60 training queries; give sizes up to 60 (None: all of them), e.g. --set train_sizes='[30,null]'
    """
    over = [s for s in sizes if s is not None and (s > total or (s == total and None in sizes))]
    if over:
        shown = "(" + ", ".join(str(s) for s in sizes) + ")"
        raise ConfigError(f"{setting} {shown}: {over[0]} is {'more than' if over[0] > total else 'all of'} the "
                          f"{total} {what}; give sizes up to {total} (None: all of them), "
                          f"e.g. --set {setting}='[{max(total // 2, 1)},null]'")


def describe(key: tuple, result: Any) -> str:
    """The progress line of the finished part ``key``."""
    if key[0] == "finetune":
        metrics = ", ".join(f"{k} {v:.3f}" for k, v in result["metrics"].items())
        return f"{key}: {metrics} ({result['wall_time']['total']:.0f}s)"
    if key[0] == "sts":
        return f"{key}: Spearman {result['spearman']:.3f} ({result['wall_time']:.0f}s)"
    if key[0] == "pretrain":
        return f"{key}: {result['steps']} steps ({result['wall_time'] or 0:.0f}s){health_note(result.get('health'))}"
    return f"{key} done"


def health_note(summary: Mapping | None) -> str:
    """A stage's held-out evaluations against the committed runs, in a few words."""
    if not summary or not summary["evaluations"] or summary["no_reference"] == summary["evaluations"]:
        return ""
    outside = ", ".join(f"{o['health']} at {o['step']:,}" for o in summary["outside"][:3])
    return (f"; health: {summary['within']} of {summary['evaluations']} evaluations within the committed runs' band"
            + (f" ({outside})" if outside else ""))
