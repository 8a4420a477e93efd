"""The scaled-down reproduction: every arm through every part, as one cached job graph, and the
results file the chapters read.

One protocol, several presets (``presets.py``): ``tiny`` (the book, a 2-core CPU in under 40
minutes), ``micro`` (the same code path in seconds, for the tests) and ``paper`` / ``full`` (the
papers' checkpoints fine-tuned on MS MARCO with Tevatron's recipe: it cannot run here; it is the
same function with another preset). ``run_protocol`` pre-trains the arms (``arms.pretrain_arm``),
fine-tunes each as a retriever at several training sizes over several seeds (round 1 with BM25
negatives; round 2 with negatives mined by its own round-1 retriever, ``arms.finetune_arm``) and
as an STS-b bi-encoder (``arms.sts_arm``), measures its CLS attention entropy before and after
fine-tuning, and assembles means and spreads over seeds and the scorecard
(``scorecard.scorecard``). The parts run as a graph of jobs (``jobs.run_jobs``), each cached by a
hash of its settings, and so is the whole results JSON, so a second call returns at once.
Explained in chapters 4-8 (``notebooks/04_finetune.ipynb`` ... ``08_scorecard.ipynb``).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import condenser_lite
from .arms import (
    PARENT,
    arm_config,
    entropy_before,
    finetune_arm,
    load_run,
    needed_arms,
    pretrain_arm,
    sts_arm,
)
from .config import cache_dir
from .jobs import (
    Job,
    Ref,
    default_workers,
    load_average,
    num_threads,
    quiet,
    run_jobs,
    settings_hash,
    threads_per_worker,
)
from .metrics import nb_recall
from .presets import MAIN_ARMS, Preset, get_preset
from .pretraining import get_tokenizer
from .scorecard import scorecard, stats
from .tasks import Task, bm25_baseline, data_location, entropy_texts, load_task, sts_data
from .tokenizer import load_tokenizer

RESULTS_VERSION = 2
ONE_SEED = ("one fine-tuning seed: every spread is 0, so a difference between arms is a single run, not a difference "
            "beyond the seed spread; read the verdicts as 'one seed, no spread' (pass 3 or more seeds for verdicts)")
PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "accelerate", "faiss-cpu", "bm25s", "ir_measures",
            "numpy", "scipy")


def results_key(preset: Preset, data_dir: str | None = None) -> str:
    """Hash naming a protocol run: the preset, the data location and the library version. Chapter 4."""
    return settings_hash({"preset": preset.to_dict(), "data": data_location(data_dir),
                          "version": condenser_lite.__version__, "results": RESULTS_VERSION}, 16)


def run_protocol(
    preset: Preset | str | None = "tiny",
    out_path: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    data_dir: str | None = None,
    force: bool = False,
    verbose: bool = True,
    workers: int | None = None,
) -> dict:
    """Run (or load from the cache) the whole protocol and return the results dict; with
    ``out_path`` also write it there as JSON. ``seeds`` overrides ``preset.seeds``; ``force``
    recomputes the results file (pre-trained and fine-tuned models stay cached).

    ``workers``: processes for the independent jobs (default: the number of CPU cores, at most
    2 on a CPU, 1 with a GPU), each with ``cores // workers`` threads (see ``jobs.py`` for why);
    ``workers=1`` runs everything in this process with torch's thread setting.

    The results hold the preset, seeds, package versions, wall time per part, every number per
    seed with mean and standard deviation, the loss curves and entropies for the plots, and the
    scorecard (``results["claims"]``). Explained in chapters 4-8.
    """
    preset = get_preset(preset)
    if seeds is not None:
        preset = preset.replace(seeds=tuple(int(s) for s in seeds))
    if len(preset.seeds) == 1:
        warnings.warn(ONE_SEED, UserWarning, stacklevel=2)
    key = results_key(preset, data_dir)
    cached = cache_dir("experiments") / f"results-{preset.name}-{key}.json"
    if cached.exists() and not force:
        results = json.loads(cached.read_text())
        results["claims"] = scorecard(results)  # verdicts always from the current rules
    else:
        with quiet():
            results = _run(preset, data_dir, verbose, default_workers() if workers is None else int(workers))
        results["key"] = key
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(cached)
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(results, indent=1))
    return results


# ---- the job graph ---------------------------------------------------------------------------------

_MEMO: dict[Any, Any] = {}  # per process: the task and the STS-b pairs, loaded once


def _finetune_job(preset: Preset, data_dir: str | None, **kwargs: Any) -> dict:
    key = ("task", preset.task, preset.finetune.n_bm25_negatives, preset.micro_corpus, preset.micro_train_queries,
           preset.micro_test_queries, data_dir)
    if key not in _MEMO:
        _MEMO[key] = load_task(preset, data_dir)
    return finetune_arm(task=_MEMO[key], preset=preset, **kwargs)


def _sts_job(preset: Preset, data_dir: str | None, **kwargs: Any) -> dict:
    key = ("sts", preset.micro_sts_pairs, data_dir)
    if key not in _MEMO:
        _MEMO[key] = sts_data(preset, data_dir)
    return sts_arm(preset=preset, data=_MEMO[key], **kwargs)


def _size_label(size: int | None, total: int) -> str:
    return str(total if size is None else min(size, total))


def _first_stage_threads(workers: int) -> int | None:
    """Threads for the first pre-training stage, which runs alone in this process: all cores
    on a quiet machine; one when the machine is already busy (1-minute load average above 1)."""
    if workers <= 1:
        return None  # the caller's setting
    load = load_average()
    return 1 if load and load[0] > 1.0 else None


def _describe(key: tuple, result: Any) -> str:
    if key[0] == "finetune":
        metrics = ", ".join(f"{k} {v:.3f}" for k, v in result["metrics"].items())
        return f"{key}: {metrics} ({result['wall_time']['total']:.0f}s)"
    if key[0] == "sts":
        return f"{key}: Spearman {result['spearman']:.3f} ({result['wall_time']:.0f}s)"
    if key[0] == "pretrain":
        return f"{key}: {result['steps']} steps ({result['wall_time'] or 0:.0f}s)"
    return f"{key} done"


def _jobs(preset: Preset, plan: list[str], total: int, sts_total: int, texts: list[str],
          data_dir: str | None) -> dict[tuple, Job]:
    """Every part after the first pre-training stage, keyed ``(kind, arm, ...)``; insertion order is
    seed order, which the results keep."""
    pretrained = dict(preset.pretrained or {})
    full_label = str(total)
    jobs: dict[tuple, Job] = {}

    def checkpoint(arm: str) -> Ref:
        return Ref(("pretrain", arm), "checkpoint")

    for arm in plan[1:]:
        parent = PARENT[arm] if arm not in pretrained else None
        jobs[("pretrain", arm)] = Job(pretrain_arm, dict(arm=arm, preset=preset, data_dir=data_dir,
                                                         init=checkpoint(parent) if parent else None), priority=0)
    for arm in preset.arms:
        if arm in MAIN_ARMS:
            jobs[("entropy", arm)] = Job(entropy_before, dict(checkpoint=checkpoint(arm), texts=texts, preset=preset),
                                         priority=3)
    sizes = {arm: preset.train_sizes if arm in MAIN_ARMS else preset.ablation_sizes for arm in preset.arms}
    for seed in preset.seeds:
        for arm in preset.arms:
            labels = [_size_label(size, total) for size in sizes[arm]]
            for size, label in zip(sizes[arm], labels):
                is_full = label == full_label
                mines = is_full and arm in preset.round2_arms  # round 2 needs this model and its embeddings
                jobs[("finetune", arm, 1, label, seed)] = Job(_finetune_job, dict(
                    preset=preset, data_dir=data_dir, arm=arm, checkpoint=checkpoint(arm), size=size, seed=seed,
                    entropy_texts=texts if is_full and arm in MAIN_ARMS else None, keep_model=mines),
                    priority=1 if mines else 2)
            if arm in preset.round2_arms and full_label in labels:
                round1 = Ref(("finetune", arm, 1, full_label, seed))
                jobs[("finetune", arm, 2, full_label, seed)] = Job(_finetune_job, dict(
                    preset=preset, data_dir=data_dir, arm=arm, checkpoint=checkpoint(arm), size=None, seed=seed,
                    round_number=2, round1=round1, keep_model=False), priority=1)
    for seed in preset.seeds:
        for arm in preset.arms:
            if arm in preset.sts_arms:
                for size in preset.sts_sizes:
                    jobs[("sts", arm, _size_label(size, sts_total), seed)] = Job(_sts_job, dict(
                        preset=preset, data_dir=data_dir, arm=arm, checkpoint=checkpoint(arm), size=size, seed=seed),
                        priority=3)
    return jobs


def _run(preset: Preset, data_dir: str | None, verbose: bool, workers: int) -> dict:
    t0 = time.perf_counter()
    wall: dict[str, Any] = {}
    load_start = load_average()
    pretrained = dict(preset.pretrained or {})
    plan = needed_arms(preset.arms, pretrained)
    first = plan[0]

    def say(message: str) -> None:
        if verbose:
            print(f"[{time.perf_counter() - t0:7.1f}s] {message}", flush=True)

    def lap(part: str, since: float) -> float:
        now = time.perf_counter()
        wall[part] = round(now - since, 2)
        return now

    # Serial head, in this process: tokenizer, task (BM25 negatives), BM25 baseline, the first
    # pre-training stage (nothing else can run before it exists).
    t = time.perf_counter()
    tokenizer = (load_tokenizer(pretrained[first]) if first in pretrained
                 else get_tokenizer(arm_config(first, preset, None), data_dir))
    task = load_task(preset, data_dir)
    bm25 = bm25_baseline(task, preset, tokenizer)
    texts = entropy_texts(preset, data_dir)
    say(f"task {task.name}: {task.info}; BM25 {bm25['full']}")
    t = lap("setup", t)
    threads = _first_stage_threads(workers)
    with num_threads(threads):
        done: dict[tuple, Any] = {("pretrain", first): pretrain_arm(first, preset, None, data_dir)}
    say(_describe(("pretrain", first), done[("pretrain", first)]))
    t = lap("pretrain_first_stage", t)

    # Everything else as a job graph.
    total = len(task.train)
    sts_total = len(sts_data(preset, data_dir)[0])
    jobs = _jobs(preset, plan, total, sts_total, texts, data_dir)
    done = run_jobs(jobs, workers, done, on_done=lambda key, result: say(_describe(key, result)))
    t = lap("jobs", t)

    stages = {arm: done[("pretrain", arm)] for arm in plan}
    entropy = {arm: {"before": done[("entropy", arm)]} for arm in preset.arms if ("entropy", arm) in done}
    r1: dict[str, dict[str, list[dict]]] = {arm: {} for arm in preset.arms}
    r2: dict[str, list[dict]] = {}
    sts: dict[str, dict[str, list[dict]]] = {}
    for key in jobs:  # insertion order of the jobs = seed order
        if key[0] == "finetune" and key[2] == 1:
            r1[key[1]].setdefault(key[3], []).append(done[key])
        elif key[0] == "finetune":
            r2.setdefault(key[1], []).append(done[key])
        elif key[0] == "sts":
            sts.setdefault(key[1], {}).setdefault(key[2], []).append(done[key])
    for group in [*r1.values(), *sts.values()]:
        for runs in group.values():
            runs.sort(key=lambda r: r["seed"])
    for runs in r2.values():
        runs.sort(key=lambda r: r["seed"])

    results = _assemble(preset, stages, task, bm25, entropy, r1, r2, sts, total, sts_total)
    finetunes = [r for k, r in done.items() if k[0] == "finetune"]
    sts_runs = [r for k, r in done.items() if k[0] == "sts"]
    wall["finetune_jobs_seconds"] = round(sum(r["wall_time"]["total"] for r in finetunes), 2)
    wall["sts_jobs_seconds"] = round(sum(r["wall_time"] for r in sts_runs), 2)
    # CPU seconds of the jobs (one-thread workers): the work itself, whatever else ran on the machine
    wall["finetune_cpu_seconds"] = round(sum(r["wall_time"].get("cpu", 0.0) for r in finetunes), 2)
    wall["sts_cpu_seconds"] = round(sum(r.get("cpu_time", 0.0) for r in sts_runs), 2)
    wall["pretrain_stage_seconds"] = {a: stages[a]["wall_time"] for a in plan}
    wall["total"] = round(time.perf_counter() - t0, 2)
    results["wall_time"] = wall
    results["execution"] = {"workers": workers, "first_stage_threads": threads or None,
                            "threads_per_worker": threads_per_worker(workers) if workers > 1 else None,
                            "load_average_start": load_start, "load_average_end": load_average()}
    results["claims"] = scorecard(results)
    say("scorecard: " + ", ".join(f"{c['id']} {c['status']}" for c in results["claims"]))
    return results


# ---- the results file --------------------------------------------------------------------------------


def _environment() -> dict:
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"condenser_lite": condenser_lite.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(), "packages": versions}


def _metric_stats(runs: list[dict], metrics: Sequence[str]) -> dict:
    return {m: stats([r["metrics"][m] for r in runs]) for m in metrics}


def _by_size(d: Mapping[str, Any]) -> dict:
    return {k: d[k] for k in sorted(d, key=int)}


def _assemble(preset: Preset, stages: dict, task: Task, bm25: dict, entropy: dict, r1: dict, r2: dict, sts: dict,
              total: int, sts_total: int) -> dict:
    metrics = list(preset.metrics)
    r1 = {arm: _by_size(v) for arm, v in r1.items()}
    sts = {arm: _by_size(v) for arm, v in sts.items()}
    retrieval: dict[str, dict] = {}
    loss_curves: dict[str, dict] = {}
    pretrain_wall = {}
    for arm in preset.arms:
        retrieval[arm] = {"round1": {label: _metric_stats(runs, metrics) for label, runs in r1[arm].items()}}
        loss_curves[arm] = {label: [r["loss"] for r in runs] for label, runs in r1[arm].items()}
        if arm in r2:
            retrieval[arm]["round2"] = {str(total): _metric_stats(r2[arm], metrics)}
        pretrain_wall[arm] = stages[arm]["wall_time"]
    # nb-recall (coCondenser eq. 17): round-1 top k vs round-2 top n on the evaluation queries.
    nb: dict[str, dict] = {}
    for arm, runs2 in r2.items():
        runs1 = r1[arm][str(total)]
        per_seed = []
        for a, b in zip(runs1, runs2):
            run1, run2 = load_run(a), load_run(b)
            per_seed.append({f"n{n}@k{k}": nb_recall(run1, run2, n=n, k=k) for n in preset.nb_n for k in preset.nb_k})
        nb[arm] = {name: stats([s[name] for s in per_seed]) for name in per_seed[0]}
    # entropy after fine-tuning: the round-1 retrievers at the full training set, per seed.
    for arm, e in entropy.items():
        after = [r["entropy_after"] for r in r1[arm].get(str(total), []) if r.get("entropy_after")]
        if after:
            a = np.asarray(after)
            e["after"] = {"mean": a.mean(0).tolist(), "std": (a.std(0, ddof=1) if len(a) > 1 else 0 * a[0]).tolist(),
                          "values": a.tolist()}
            change = np.abs(a - np.asarray(e["before"])[None]).mean(1)  # mean |after - before| over layers
            e["mean_abs_change"] = stats(change.tolist())
    sts_out = {arm: {label: stats([r["spearman"] for r in runs]) for label, runs in by_size.items()}
               for arm, by_size in sts.items()}
    notes = [
        "Pre-training runs once per arm (seed %d); the seed spread covers fine-tuning only (training-set sample, "
        "data order, negatives, dropout)." % preset.pretraining.seed,
        "Arms 2 (bert_cont) and 3 (condenser) both continue arm 1 with a fresh warm-up and linear decay over "
        "s2_steps; arm 4 and the ablations likewise over s3_steps. Equal compute means equal steps of the same "
        "batch size on the same data order; a Condenser step also runs the 2-layer head (~1.6x the FLOPs).",
        "Spread = sample standard deviation over seeds; a difference counts when |mean_a - mean_b| > std_a + std_b "
        "(the mean +- std intervals do not overlap).",
        "Dense models read the first p_max_len tokens of each document; BM25 'full' reads everything, BM25 "
        "'truncated' reads the same tokens as the dense models.",
        "Ablations (co_contrastive_only, co_mlm_only) are fine-tuned in round 1 only; the paper's table 4 "
        "compares retrievers trained with hard negatives.",
    ]
    if len(preset.seeds) == 1:
        notes.append(ONE_SEED[0].upper() + ONE_SEED[1:] + ".")
    if preset.sts.epochs_full < preset.sts.epochs_low_data or preset.micro_sts_pairs:
        notes.append(f"STS-b 'full' trains on all {sts_total} pairs for {preset.sts.epochs_full:g} epoch(s) (the "
                     f"small sizes for {preset.sts.epochs_low_data:g}); the paper trains 4 epochs: subsampled in time.")
    return {
        "protocol": "condenser_lite.protocol", "version": RESULTS_VERSION, "budget": preset.to_dict(),
        "seeds": list(preset.seeds), "environment": _environment(), "notes": notes,
        "task": {"name": task.name, "split": task.split, **task.info},
        "train_sizes": sorted({int(label) for arm in r1 for label in r1[arm]}),
        "sts_sizes": sorted({int(label) for arm in sts for label in sts[arm]}),
        "arms": {arm: {"checkpoint": stages[arm]["checkpoint"],
                       "parent": None if preset.pretrained and arm in preset.pretrained else PARENT[arm],
                       "pretrain_steps": stages[arm]["steps"], "pretrain_wall_time": pretrain_wall[arm],
                       "pretrain_log": stages[arm]["log"]} for arm in preset.arms},
        "bm25": bm25,
        "retrieval": retrieval,
        "nb_recall": nb,
        "loss_curves": loss_curves,
        "entropy": entropy,
        "sts": sts_out,
        "finetune_wall_time": {arm: {label: [r["wall_time"]["total"] for r in runs] for label, runs in r1[arm].items()}
                               for arm in preset.arms},
    }
