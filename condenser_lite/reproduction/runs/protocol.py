"""The scaled-down reproduction: every arm through every part, as one cached job graph, and the
results file the chapters read.

One protocol, several presets (``reproduction/configuration/presets.py``): ``small`` (the book's committed run, about 50
minutes on a 2-core CPU), ``tiny`` (a smaller recipe, about 40), ``micro`` (the same code path
in seconds, for the tests) and ``paper`` / ``full`` (the
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

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import condenser_lite

from ...data.tokenizer import load_tokenizer
from ...retrieval.metrics import nb_recall
from ...training.accounting import cumulative
from ...training.stage_cache import get_tokenizer
from ...utils.cache import cache_dir, settings_hash
from ...utils.errors import ConfigError
from .arms import arm_config, entropy_before, load_run, needed_arms, pretrain_arm
from .health import stage_check
from .jobs import Job, Ref, default_workers, first_stage_threads, num_threads, quiet, run_jobs
from ..configuration.presets import get_preset
from ..configuration.settings_tree import Preset
from .protocol_jobs import check_sizes, describe, finetune_job, size_label, sts_job
from ..configuration.registry import ABLATION_ARMS, PARENT
from ..evidence.results import RESULTS_VERSION, check_out, environment, headline
from ..statistics.rules import ONE_SEED, stats
from .run_record import RunClock, precisions, record_run
from ..claims.scorecard import scorecard
from .tasks import Task, bm25_baseline, data_location, entropy_texts, load_task, sts_data

ONE_SEED_WARNING = ("one fine-tuning seed: every spread is 0, so a difference between arms is a single run, not a "
                    f"difference beyond the seed spread; the scorecard calls each such comparison {ONE_SEED!r} "
                    "(pass 3 or more seeds for verdicts)")


def results_key(preset: Preset, data_dir: str | None = None) -> str:
    """Hash naming a protocol run: the preset, the data (by content, the task's included) and the
    library version. Chapter 4."""
    return settings_hash({"preset": preset.to_dict(), "data": data_location(data_dir, preset.task),
                          "version": condenser_lite.__version__, "results": RESULTS_VERSION,
                          "precision": precisions(preset)}, 16)


def cached_results(preset: Preset | str | None, data_dir: str | None = None,
                   seeds: Sequence[int] | None = None) -> Path:
    """Where ``run_protocol`` caches the results of ``preset`` (the file may not exist yet). Chapter 4."""
    preset = get_preset(preset)
    if seeds is not None:
        preset = preset.replace(seeds=tuple(int(s) for s in seeds))
    return cache_dir("experiments") / f"results-{preset.name}-{results_key(preset, data_dir)}.json"


def run_protocol(
    preset: Preset | str | None = "tiny",
    out_path: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    data_dir: str | None = None,
    force: bool = False,
    verbose: bool = True,
    workers: int | None = None,
    command: str | None = None,
) -> dict:
    """Run (or load from the cache) the whole protocol and return the results dict; with
    ``out_path`` also write it there as JSON. ``seeds`` overrides ``preset.seeds``; ``force``
    recomputes the results file (pre-trained and fine-tuned models stay cached). ``command``:
    the command line to record in the provenance (default: this process's arguments).

    Every part is cached as soon as it is done (a stage also checkpoints every ``save_every``
    steps), so a call after an interruption, with the same cache, resumes where it stopped.

    ``workers``: processes for the independent jobs (default ``jobs.default_workers``), each with
    ``cores // workers`` threads (``jobs.py`` says why); 1 runs everything in this process.

    The results hold the preset, seeds, versions, wall time per part, every number per seed with
    mean and spread, the curves and entropies for the plots, each arm's held-out gauges and
    compute (``results["arms"]``), the ``provenance``, the ``headline`` and the scorecard
    (``results["claims"]``). Explained in chapters 4-8.
    """
    preset = get_preset(preset)
    if seeds is not None:
        preset = preset.replace(seeds=tuple(int(s) for s in seeds))
    if out_path is not None:
        check_out_path(out_path, preset.name)
    if _single_seed(preset):
        warnings.warn(ONE_SEED_WARNING, UserWarning, stacklevel=2)
    key, cached = results_key(preset, data_dir), cached_results(preset, data_dir)
    if cached.exists() and not force:
        results = json.loads(cached.read_text())
        results["claims"] = scorecard(results)  # verdicts always from the current rules
        results["headline"] = headline(results)
    else:
        with quiet():
            results = _run(preset, data_dir, verbose, default_workers() if workers is None else int(workers),
                           command)
        results["key"] = key
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(cached)
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(results, indent=1))
    return results


def check_out_path(out_path: str | os.PathLike, preset: str) -> None:
    """Refuse, before hours of computing, an ``out_path`` that is a folder or a file other than a
    results file of the same preset (which is regenerated): nothing of the user's is overwritten
    and the results are not lost to a failed write (``results.check_out``). Chapter 4."""
    if Path(out_path).is_dir():
        raise ConfigError(f"--out {out_path} is a folder; give a file path, e.g. {Path(out_path) / f'{preset}.json'}")
    old = check_out(out_path, "protocol")
    name = ((old or {}).get("preset") or {}).get("name", preset)
    if name != preset:
        path = Path(out_path)
        raise ConfigError(f"--out {path} holds the {name!r} preset's results, not {preset!r}'s; nothing was written: "
                          f"choose another path, or delete {path} first (e.g. --out {path.with_name(f'{preset}.json')})")


# ---- the job graph ---------------------------------------------------------------------------------

def _single_seed(preset: Preset) -> bool:
    """Whether every arm's numbers come from one run (one fine-tuning and one pre-training seed)."""
    return len(preset.seeds) == 1 and len(preset.pretraining_seeds) == 1


def arm_pretrain_seeds(preset: Preset, arm: str) -> tuple[int, ...]:
    """The pre-training seeds ``arm`` runs with: every one of ``preset.pretraining_seeds`` for a
    main arm (the modified Condenser and its controls too), the first
    ``preset.ablation_pretrain_seeds`` for an ablation, the first only for a published
    checkpoint. Chapter 4."""
    seeds = preset.pretraining_seeds
    if arm in (preset.pretrained or {}):
        return seeds[:1]
    return seeds[:preset.ablation_pretrain_seeds] if arm in ABLATION_ARMS else seeds


def job_graph(preset: Preset, plan: list[str], total: int, sts_total: int, texts: list[str],
          data_dir: str | None) -> dict[tuple, Job]:
    """Every part after the first pre-training stage, keyed ``(kind, arm, ..., pretraining seed)``;
    insertion order is seed order, which the results keep (``estimate.estimate_protocol`` counts
    its parts from it too). Chapter 4."""
    pretrained = dict(preset.pretrained or {})
    full_label = str(total)
    jobs: dict[tuple, Job] = {}

    def checkpoint(arm: str, ps: int) -> Ref:
        return Ref(("pretrain", arm, ps), "checkpoint")

    for arm in plan:
        for ps in arm_pretrain_seeds(preset, arm):
            if arm == plan[0] and ps == preset.pretraining_seeds[0]:
                continue  # the first stage, run before the graph
            parent = PARENT[arm] if arm not in pretrained else None
            jobs[("pretrain", arm, ps)] = Job(pretrain_arm, dict(
                arm=arm, preset=preset, data_dir=data_dir, init=checkpoint(parent, ps) if parent else None, seed=ps,
                check=stage_check), priority=0)
    for arm in preset.arms:
        if arm not in ABLATION_ARMS:
            for ps in arm_pretrain_seeds(preset, arm):
                jobs[("entropy", arm, ps)] = Job(entropy_before, dict(checkpoint=checkpoint(arm, ps), texts=texts,
                                                                      preset=preset), priority=3)
    sizes = {arm: preset.ablation_sizes if arm in ABLATION_ARMS else preset.train_sizes for arm in preset.arms}
    for ps in preset.pretraining_seeds:
        for seed in preset.seeds:
            for arm in preset.arms:
                if ps not in arm_pretrain_seeds(preset, arm):
                    continue
                labels = [size_label(size, total) for size in sizes[arm]]
                common = dict(preset=preset, data_dir=data_dir, pretrain_seed=ps, arm=arm,
                              checkpoint=checkpoint(arm, ps), seed=seed)
                for size, label in zip(sizes[arm], labels):
                    is_full = label == full_label
                    mines = is_full and arm in preset.round2_arms  # round 2 needs this model and its embeddings
                    jobs[("finetune", arm, 1, label, seed, ps)] = Job(finetune_job, dict(
                        common, size=size, entropy_texts=texts if is_full and arm not in ABLATION_ARMS else None,
                        keep_model=mines), priority=1 if mines else 2)
                if arm in preset.round2_arms and full_label in labels:
                    round1 = Ref(("finetune", arm, 1, full_label, seed, ps))
                    jobs[("finetune", arm, 2, full_label, seed, ps)] = Job(finetune_job, dict(
                        common, size=None, round_number=2, round1=round1, keep_model=False), priority=1)
    for ps in preset.pretraining_seeds:
        for seed in preset.seeds:
            for arm in preset.arms:
                if arm in preset.sts_arms and ps in arm_pretrain_seeds(preset, arm):
                    for size in preset.sts_sizes:
                        jobs[("sts", arm, size_label(size, sts_total), seed, ps)] = Job(sts_job, dict(
                            preset=preset, data_dir=data_dir, pretrain_seed=ps, arm=arm,
                            checkpoint=checkpoint(arm, ps), size=size, seed=seed), priority=3)
    return jobs


def _run(preset: Preset, data_dir: str | None, verbose: bool, workers: int, command: str | None) -> dict:
    """The protocol's parts computed (or found cached) and assembled into the results: the serial
    head in this process (tokenizer, task, BM25, the first pre-training stage, which everything
    else needs), then the rest as a job graph."""
    clock = RunClock()
    pretrained = dict(preset.pretrained or {})
    plan = needed_arms(preset.arms, pretrained)
    first, ps0 = plan[0], preset.pretraining_seeds[0]

    def say(message: str) -> None:
        if verbose:
            print(f"[{clock.elapsed():7.1f}s] {message}", flush=True)

    tokenizer = (load_tokenizer(pretrained[first]) if first in pretrained
                 else get_tokenizer(arm_config(first, preset, None), data_dir))
    task = load_task(preset, data_dir)
    total, sts_total = len(task.train), len(sts_data(preset, data_dir)[0])
    check_sizes("train_sizes", preset.train_sizes, total, f"training queries of {task.name}")
    if any(arm in ABLATION_ARMS for arm in preset.arms):
        check_sizes("ablation_sizes", preset.ablation_sizes, total, f"training queries of {task.name}")
    if preset.sts_arms:
        check_sizes("sts_sizes", preset.sts_sizes, sts_total, "STS-b training pairs")
    bm25 = bm25_baseline(task, preset, tokenizer)
    texts = entropy_texts(preset, data_dir)
    say(f"task {task.name}: {task.info}; BM25 {bm25['full']}")
    clock.lap("setup")
    threads = first_stage_threads(workers)
    with num_threads(threads):
        done: dict[tuple, Any] = {("pretrain", first, ps0): pretrain_arm(first, preset, None, data_dir, ps0,
                                                                         check=stage_check)}
    say(describe(("pretrain", first, ps0), done[("pretrain", first, ps0)]))
    clock.lap("pretrain_first_stage")

    jobs = job_graph(preset, plan, total, sts_total, texts, data_dir)
    done = run_jobs(jobs, workers, done, on_done=lambda key, result: say(describe(key, result)))
    clock.lap("jobs")

    stages = {(k[1], k[2]): v for k, v in done.items() if k[0] == "pretrain"}
    before = {(k[1], k[2]): v for k, v in done.items() if k[0] == "entropy"}
    r1, r2, sts = _runs_by_arm(preset, jobs, done)
    results = _assemble(preset, stages, task, bm25, before, r1, r2, sts, total, sts_total)
    record_run(results, preset, command, clock, stages, done, workers, threads)
    results["claims"] = scorecard(results)
    results["headline"] = headline(results)
    say("scorecard: " + ", ".join(f"{c['id']} {c['status']}" for c in results["claims"]))
    return results


def _runs_by_arm(preset: Preset, jobs: Mapping[tuple, Job], done: Mapping[tuple, Any]) -> tuple[dict, dict, dict]:
    """The fine-tuning runs grouped for the results: round 1 by arm and training size, round 2 by
    arm, STS-b by arm and size; each group in seed order (pre-training seed, then fine-tuning)."""
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
    for runs in [*r2.values(), *(runs for group in [*r1.values(), *sts.values()] for runs in group.values())]:
        runs.sort(key=lambda r: (r["pretrain_seed"], r["seed"]))
    return r1, r2, sts


# ---- the results file --------------------------------------------------------------------------------


def _metric_stats(runs: list[dict], metrics: Sequence[str]) -> dict:
    return {m: stats([r["metrics"][m] for r in runs]) for m in metrics}


def _by_size(d: Mapping[str, Any]) -> dict:
    return {k: d[k] for k in sorted(d, key=int)}


LOG_ROWS = 500  # per stage in the results file; the full per-step log stays in the stage's cache folder


def binned_log(log: Sequence[Mapping[str, float]], max_rows: int = LOG_ROWS) -> list[dict]:
    """A pre-training log short enough for a committed results file: every row with a held-out
    evaluation (``eval_*``) kept as it is, the steps between them averaged in bins of
    ``ceil(len / max_rows)`` (a bin's row carries its last ``step``). A log of at most
    ``max_rows`` steps is returned as it is. Chapter 4."""
    size = max(1, -(-len(log) // max_rows))
    out: list[dict] = []
    pending: list[Mapping[str, float]] = []

    def flush() -> None:
        for k in range(0, len(pending), size):
            rows = pending[k:k + size]
            out.append({"step": rows[-1]["step"], **{key: float(np.mean([r[key] for r in rows if key in r]))
                                                     for key in rows[-1] if key != "step"}})
        pending.clear()

    for row in log:
        if size == 1 or any(k.startswith("eval_") for k in row):
            flush()
            out.append(dict(row))
        else:
            pending.append(row)
    flush()
    return out


def layer_stats(values: Sequence[Sequence[float]]) -> dict:
    """Runs' per-layer numbers as ``{"mean", "std", "values"}`` per layer (``std`` 0 for one run). Chapter 5."""
    a = np.asarray(values)
    return {"mean": a.mean(0).tolist(), "std": (a.std(0, ddof=1) if len(a) > 1 else 0 * a[0]).tolist(),
            "values": a.tolist()}


def heldout_curve(log: Sequence[Mapping]) -> list[dict]:
    """The held-out evaluations of a stage's log: ``step`` and the ``eval_*`` gauges of each row
    that has them."""
    return [{k: v for k, v in r.items() if k == "step" or k.startswith("eval_")}
            for r in log if any(k.startswith("eval_") for k in r)]


def _arm_entry(preset: Preset, stages: Mapping[tuple, dict], arm: str, ps: int, with_log: bool) -> dict:
    """One pre-training run of ``arm`` for the results: its checkpoint, steps, wall time, final
    held-out gauges, and its compute, own stage and cumulative with the stages it continues."""
    stage = stages[(arm, ps)]
    chain, a = [], arm
    while a is not None:  # the arm, its parent, ... (a published checkpoint has none)
        chain.append(stages[(a, ps)])
        a = None if preset.pretrained and a in preset.pretrained else PARENT[a]
    entry = {"seed": stage["seed"], "checkpoint": stage["checkpoint"], "pretrain_steps": stage["steps"],
             "pretrain_wall_time": stage["wall_time"], "heldout": stage.get("heldout"),
             "compute": {"stage": stage.get("compute"), "cumulative": cumulative([s.get("compute") for s in chain])},
             # every held-out evaluation of every seed: the reference band of health.stage_check
             "heldout_curve": heldout_curve(stage["log"]),
             "health": stage.get("health")}
    if with_log:
        entry["pretrain_log"] = binned_log(stage["log"])
    return entry


def _assemble(preset: Preset, stages: dict, task: Task, bm25: dict, before: dict, r1: dict, r2: dict, sts: dict,
              total: int, sts_total: int) -> dict:
    metrics = list(preset.metrics)
    r1 = {arm: _by_size(v) for arm, v in r1.items()}
    sts = {arm: _by_size(v) for arm, v in sts.items()}
    ps0 = preset.pretraining_seeds[0]
    retrieval: dict[str, dict] = {}
    loss_curves: dict[str, dict] = {}
    for arm in preset.arms:
        retrieval[arm] = {"round1": {label: _metric_stats(runs, metrics) for label, runs in r1[arm].items()}}
        loss_curves[arm] = {label: [r["loss"] for r in runs] for label, runs in r1[arm].items()}
        if arm in r2:
            retrieval[arm]["round2"] = {str(total): _metric_stats(r2[arm], metrics)}
    # nb-recall (coCondenser eq. 17): round-1 top k vs round-2 top n on the evaluation queries.
    nb: dict[str, dict] = {}
    for arm, runs2 in r2.items():
        runs1 = r1[arm][str(total)]
        per_seed = []
        for a, b in zip(runs1, runs2):
            run1, run2 = load_run(a), load_run(b)
            per_seed.append({f"n{n}@k{k}": nb_recall(run1, run2, n=n, k=k) for n in preset.nb_n for k in preset.nb_k})
        nb[arm] = {name: stats([s[name] for s in per_seed]) for name in per_seed[0]}
    # CLS attention entropy before fine-tuning (per pre-training seed; the mean over them) and after:
    # the round-1 retrievers at the full training set, each compared with its own checkpoint.
    entropy: dict[str, dict] = {}
    for arm in preset.arms:
        seeds = [ps for ps in arm_pretrain_seeds(preset, arm) if (arm, ps) in before]
        if not seeds:
            continue
        e = entropy[arm] = {"before": np.mean([before[(arm, ps)] for ps in seeds], axis=0).tolist()}
        if len(seeds) > 1:
            e["before_by_pretraining_seed"] = {str(ps): before[(arm, ps)] for ps in seeds}
        runs = [r for r in r1[arm].get(str(total), []) if r.get("entropy_after")]
        if runs:
            a = np.asarray([r["entropy_after"] for r in runs])
            e["after"] = layer_stats(a)
            own = np.asarray([before[(arm, r["pretrain_seed"])] for r in runs])
            e["mean_abs_change"] = stats(np.abs(a - own).mean(1).tolist())  # mean |after - before| over layers
    sts_out = {arm: {label: stats([r["spearman"] for r in runs]) for label, runs in by_size.items()}
               for arm, by_size in sts.items()}
    arms = {}
    for arm in preset.arms:
        arms[arm] = {**_arm_entry(preset, stages, arm, ps0, with_log=True),
                     "parent": None if preset.pretrained and arm in preset.pretrained else PARENT[arm]}
        others = [_arm_entry(preset, stages, arm, ps, with_log=False) for ps in arm_pretrain_seeds(preset, arm)[1:]]
        if others:
            arms[arm]["other_pretraining_seeds"] = others
    heldout_set = stages[(needed_arms(preset.arms, dict(preset.pretrained or {}))[0], ps0)].get("heldout_set")
    return {
        "protocol": "condenser_lite.protocol", "version": RESULTS_VERSION, "preset": preset.to_dict(),
        "seeds": list(preset.seeds), "pretraining_seeds": list(preset.pretraining_seeds), "environment": environment(),
        "notes": notes(preset, arms, heldout_set, sts_total),
        "task": {"name": task.name, "split": task.split, **task.info},
        "train_sizes": sorted({int(label) for arm in r1 for label in r1[arm]}),
        "sts_sizes": sorted({int(label) for arm in sts for label in sts[arm]}),
        "heldout": heldout_set,
        "arms": arms,
        "bm25": bm25,
        "retrieval": retrieval,
        "nb_recall": nb,
        "loss_curves": loss_curves,
        "entropy": entropy,
        "sts": sts_out,
        "finetune_wall_time": {arm: {label: [r["wall_time"]["total"] for r in runs] for label, runs in r1[arm].items()}
                               for arm in preset.arms},
    }


def notes(preset: Preset, arms: Mapping[str, dict], heldout_set: Mapping | None, sts_total: int) -> list[str]:
    """The results file's notes on what its numbers mean: the spread, the arms' steps and compute,
    the rules, what the dense models and BM25 read, the held-out gauges. Chapter 8."""
    pseeds, ps0 = preset.pretraining_seeds, preset.pretraining_seeds[0]
    spread = ("fine-tuning seeds only (training-set sample, data order, negatives, dropout): every arm is "
              "pre-trained once, with seed %d" % ps0 if len(pseeds) == 1 else
              "fine-tuning seeds and, for the main arms (%s), pre-training seeds %s (every fine-tuning seed "
              "on every pre-trained checkpoint); the ablations are pre-trained with seeds %s"
              % (", ".join(a for a in preset.arms if a not in ABLATION_ARMS), ", ".join(map(str, pseeds)),
                 ", ".join(map(str, pseeds[:preset.ablation_pretrain_seeds]))))
    out = [
        f"The seed spread covers {spread}.",
        "Arms 2 (bert_cont) and 3 (condenser) both continue arm 1 with a fresh warm-up and linear decay over "
        "stages.condenser.max_steps; arm 4 and the ablations likewise over stages.cocondenser.max_steps. "
        "The arms take equal steps of the same batch size on the same data order: equal steps, not equal "
        "compute. " + _compute_note(arms),
        "Spread = sample standard deviation over every run (pre-training and fine-tuning seeds). Verdicts "
        "(rules version 2): each pre-trained model's fine-tuning runs are averaged into one number, and two arms "
        "are compared by a one-sided paired t-test at 5% over pre-training seeds; where an arm has one "
        "pre-trained model there is no spread to test, and no difference is called.",
        "Dense models read the first p_max_len tokens of each document; BM25 'full' reads everything, BM25 "
        "'truncated' reads the same tokens as the dense models.",
        "Ablations (co_contrastive_only, co_mlm_only) are fine-tuned in round 1 only; the paper's table 4 "
        "compares retrievers trained with hard negatives.",
    ]
    if _single_seed(preset):
        out.append(ONE_SEED_WARNING[0].upper() + ONE_SEED_WARNING[1:] + ".")
    if heldout_set:
        out.append(
            f"Held-out gauges: pre-training never sees {preset.stages.bert.heldout_fraction:.0%} of the general "
            f"corpus's documents; every stage is scored on the same {heldout_set['n_blocks']} masked blocks of them "
            f"({heldout_set['n_masked']} masked tokens; for coCondenser stages too). The unigram entropy of those "
            f"tokens is {heldout_set['unigram_entropy']:.2f} nats.")
    if preset.sts.epochs_full < preset.sts.epochs_low_data or preset.micro_sts_pairs:
        out.append(f"STS-b 'full' trains on all {sts_total} pairs for {preset.sts.epochs_full:g} epoch{'' if preset.sts.epochs_full == 1 else 's'} (the "
                     f"small sizes for {preset.sts.epochs_low_data:g}); the paper trains 4 epochs: subsampled in time.")
    return out


def _compute_note(arms: Mapping[str, dict]) -> str:
    """What a step of each method cost here, per step, relative to an MLM step (FLOPs and CPU seconds)."""
    def per_step(arm: str) -> tuple[float, float] | None:
        c = (arms.get(arm) or {}).get("compute", {}).get("stage")
        if not c or not c["steps"]:
            return None
        return c["flops"] / c["steps"], c["cpu_seconds"] / c["steps"]

    base = per_step("bert_cont") or per_step("bert")
    if base is None:
        return ""
    parts = []
    for arm, name in (("condenser", "a Condenser step"), ("cocondenser", "a coCondenser step")):
        step = per_step(arm)
        if step:
            parts.append(f"{name} costs {step[0] / base[0]:.2f}x an MLM step in FLOPs "
                         f"({step[1] / base[1]:.2f}x in CPU seconds)" if base[1] else
                         f"{name} costs {step[0] / base[0]:.2f}x an MLM step in FLOPs")
    return ("Here " + " and ".join(parts) + "; arms[...]['compute'] has each arm's tokens, steps, FLOPs and CPU "
            "seconds, its own stage and cumulative with the stages it continues.") if parts else ""
