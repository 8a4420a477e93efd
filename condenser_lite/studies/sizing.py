"""Choosing the scaled-down world: the pre-training study behind the book's `small` preset
(`notebooks/09_study.md`), which writes `results/study.json` (summarised curves plus provenance):

    python -m condenser_lite sizing                       # every part, resumable
    python -m condenser_lite sizing --only throughput     # or precision, sweep, long, condenser

Parts
  throughput  CPU cost of one MLM training step of our loop per lever (precision, attention
              kernel, dropout, torch.compile, batch shape, threads against processes, the
              transformers Trainer), and the fine-tuning and encoding costs per candidate shape
              (`sizing_throughput`).
  precision   bf16 autocast against fp32 for the recommended run, natively and under an emulated
              AVX2-only CPU, and what `mixed_precision="auto"` picks on each.
  sweep       held-out MLM loss against CPU seconds, one factor at a time from a baseline (the
              `tiny` preset's shape and recipe), every run with the same CPU budget (two 1-thread
              processes in parallel).
  long        longer runs of the combined recipe(s): the stage-1 checkpoints of part `condenser`.
  condenser   Condenser continuations of a long run for several splits (`skip_from`,
              `n_head_layers`), with the [CLS]-swap gap, the [CLS] cosine and both MLM losses
              logged as they train; an MLM-only continuation at the same steps as the control; a
              short coCondenser continuation on SciFact.

Held-out text: `packing.heldout_split` keeps 5% of the general corpus's documents (by a hash of
the document id) out of training; the evaluation set is 512 of their blocks with fixed masks
(`packing.mlm_eval_batches`). Every loss is reported beside the unigram entropy of the same
masked tokens (`gauges.unigram_entropy`). Nothing here looks at retrieval quality.

Every finished run is cached by its settings (`sizing_runs.Run.key`) and resumes from its last
checkpoint, so an interrupted study picks up where it stopped, and a changed setting starts a
new run beside the old one. The runs are the library's pre-training stages
(`pretraining.build_model`) in the protocol's worker processes (`jobs.run_jobs`); FLOPs
(`accounting.stage_flops`) and provenance (`results.machine`, `results.environment`,
`results.git`) come from the library too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: results/ and git live there
PARTS = ("throughput", "parallel", "precision", "sweep", "long", "condenser")
RECOMMENDATION: dict = {
    "preset": "small",
    "model": "4 layers, hidden 128, 4 heads, WordPiece 8192, blocks of 64 tokens (tiny's shape)",
    "pre-training": "bf16 autocast, eager attention, no dropout, batch 32, lr 1e-3 linear decay, 12,000 stage-1 updates",
    "condenser split": "skip_from=1, n_head_layers=1 (head path 2 of 4 layers)",
    "fine-tuning": "tiny's recipe with dropout 0.1 put back",
}


def build_parser() -> argparse.ArgumentParser:
    """The study's options (``python -m condenser_lite sizing --help``). Chapter 9."""
    from condenser_lite.utils.cli_args import positive_float, positive_int

    ap = argparse.ArgumentParser(prog="python -m condenser_lite sizing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=PARTS, action="append",
                    help="parallel: re-measure only one 2-thread process against two 1-thread ones (needs a quiet "
                         "machine; the value in the throughput part can be disturbed by other jobs)")
    ap.add_argument("--budget", type=positive_float, default=200.0, help="CPU seconds per sweep run")
    ap.add_argument("--long-budget", type=positive_float, default=1500.0, help="CPU seconds of each long run")
    ap.add_argument("--condenser-budget", type=positive_float, default=300.0,
                    help="CPU seconds of a Condenser continuation (sets the common step count)")
    ap.add_argument("--extended", action="store_true", help="more sweep runs (see sizing_runs.sweep_runs)")
    ap.add_argument("--workers", type=positive_int, default=2)
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error (a bad input)")
    ap.add_argument("--reps", type=positive_int, default=3, help="interleaved repetitions in the throughput part")
    ap.add_argument("--steps", type=positive_int, default=10, help="steps per throughput measurement")
    ap.add_argument("--long", action="append", default=None,
                    help="JSON of Run fields changed from the sweep's base run for a long run (default: the recommended run)")
    ap.add_argument("--stage1", default="long",
                    help="what the Condenser splits continue: a sweep run's label, or 'long' (the first long run)")
    ap.add_argument("--reference", default="",
                    help="a 4-layer sweep run whose continuation with the tiny preset's split (2 + 2) is measured too ('' for none)")
    ap.add_argument("--out", default=str(ROOT / "results" / "study.json"))
    ap.add_argument("--collect", action="store_true",
                    help="write the results file from the runs finished so far, starting none")
    ap.add_argument("--precision-child", type=int, help=argparse.SUPPRESS)  # see sizing_throughput.precision_costs
    return ap


def condenser_part(a: argparse.Namespace, study: dict) -> None:
    """The Condenser splits continuing the stage-1 run ``a.stage1`` (and a coCondenser look at
    the clearest one), with their MLM controls, into ``study["condenser"]``. Chapter 9."""
    from condenser_lite.studies.sizing_runs import Run, cls_ablation, condenser_runs, run_many, sweep_runs
    from condenser_lite.utils.errors import ConfigError

    sweep = sweep_runs(a.budget, True)
    if a.stage1 != "long" and a.stage1 not in sweep:
        raise ConfigError(f"--stage1 {a.stage1!r}: not a sweep run's label; give 'long' or one of {sorted(sweep)}")
    if a.stage1 == "long":
        if not study.get("long") and a.collect:  # what has finished is written; this part waits
            print("[condenser] not collected: its stage 1, the long run, has not finished in this cache", flush=True)
            return
        if not study.get("long"):
            raise ConfigError("--stage1 long: the long run has not finished in this cache; run "
                              "`python -m condenser_lite sizing --only long` first, or give --stage1 a sweep run")
        stage1 = next(iter(study["long"].values()))
    else:  # a finished sweep run (cached: returns at once)
        found = run_many("sweep", {a.stage1: sweep[a.stage1]}, 1, a.collect)
        if a.stage1 not in found:
            raise ConfigError(f"--stage1 {a.stage1!r} has not finished in this cache; run it first (drop --collect)")
        stage1 = found[a.stage1]
    study["condenser_stage1"] = {"label": stage1["label"], "key": stage1["key"], "steps": stage1["steps"],
                                 "final": stage1["final"]}
    runs, control = condenser_runs(stage1, a.condenser_budget)
    controls = {f"{Run(**stage1['run']).shape}: control, MLM continuation (same steps)": control}
    if a.reference:  # the tiny preset's split (2 + 2 of 4 layers) on a 4-layer sweep model, for comparison
        ref = run_many("sweep", {a.reference: sweep[a.reference]}, 1, a.collect)[a.reference]
        ref_runs, ref_control = condenser_runs(ref, a.condenser_budget, splits=[(2, 2), (1, 1)])
        runs.update(ref_runs)
        controls[f"{Run(**ref['run']).shape}: control, MLM continuation (same steps)"] = ref_control
    res = run_many("condenser", {**runs, **controls}, a.workers, a.collect)
    # coCondenser continues the split with the clearest gap (gap / noise) on SciFact, for
    # half the steps (a look at the gauges under the contrastive loss, not a full stage).
    main_runs = [n for n in runs if n.startswith(Run(**stage1["run"]).shape) and n in res]
    if main_runs:
        clear = max(main_runs, key=lambda n: res[n]["final"]["eval_swap_gap"]
                    / max(res[n]["final"]["eval_swap_noise"], 1e-9))
        extra = {f"coCondenser on SciFact, continuing [{clear}]": runs[clear].replace(
            method="cocondenser", init=res[clear]["checkpoint"], steps=max(20, runs[clear].steps // 2), seed=2)}
        res.update(run_many("condenser", extra, a.workers, a.collect))
    for r in res.values():
        if r["run"]["method"] == "condenser":
            r["cls_ablation"] = cls_ablation(r)
    study["condenser"] = res
    for name, r in res.items():
        f = r["final"]
        print(f"[condenser] {name:60s} late {f['eval_mlm_loss']:.3f} head {f.get('eval_head_loss', float('nan')):.3f} "
              f"gap {f.get('eval_swap_gap', float('nan')):.3f} +- {f.get('eval_swap_noise', float('nan')):.3f} "
              f"cos {f['eval_cls_cosine']:.3f}", flush=True)


def machine() -> dict:
    """``results.machine`` in the study's keys (the study page reads ``cpu_model``), with the CPU's
    bf16/AMX flags, which the precision part is about. Chapter 9."""
    from condenser_lite.reproduction.evidence.results import machine as library_machine

    m = library_machine(None)
    return {"cpu_model": m["cpu"] or "?", "cores": m["cores"], "platform": m["platform"],
            "matrix_flags": m["matrix_flags"], "memory_gb": m["ram_gib"]}


def versions() -> dict:
    """``results.environment``'s versions in the study's keys, and whether oneDNN is there. Chapter 9."""
    import torch

    from condenser_lite.reproduction.evidence.results import environment

    env = environment()
    names = ("torch", "transformers", "tokenizers", "datasets", "accelerate")
    return {"python": env["python"], **{k: env["packages"][k] for k in names}, "onednn": torch.backends.mkldnn.is_available()}


def git_commit() -> str:
    """The commit (``+dirty`` where tracked files differ from it), or ``unknown``. Chapter 9."""
    from condenser_lite.reproduction.evidence.results import git_state

    state = git_state()
    return "unknown" if None in (state["commit"], state["dirty"]) else state["commit"] + ("+dirty" if state["dirty"] else "")


def provenance(parts: list[str], command: str, start: dict, t0: float, cpu0: float, study: dict) -> dict:
    """The study's provenance: this call's commit, command, times and machine, the runs' CPU
    seconds and the held-out sets' sizes. Chapter 9."""
    # taken before git_commit() and the data, so the times leave out their imports
    finished, wall, cpu = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter() - t0, sum(os.times()[:4]) - cpu0
    from condenser_lite.studies.sizing_runs import EVAL_BLOCKS, HELDOUT_FRACTION, study_data

    runs = [r for p in ("sweep", "long", "condenser") for r in study.get(p, {}).values()]
    combos = sorted({(r["run"]["vocab"], r["run"]["max_len"]) for r in runs})
    fields = ("heldout_sections", "train_sections", "heldout_blocks", "eval_masked_tokens", "train_tokens",
              "unigram_entropy")
    return {
        "commit": git_commit(), "command": command, "parts_run_now": parts,
        "started": start["time"], "finished": finished,
        "wall_seconds_this_call": round(wall, 1), "cpu_seconds_this_call": round(cpu, 1),
        "cpu_seconds_all_runs": round(sum(r["cpu_seconds"] for r in runs), 1),
        "loadavg_start": [round(x, 2) for x in start["loadavg"]],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "machine": machine(), "versions": versions(),
        "heldout": {"fraction_of_documents": HELDOUT_FRACTION, "eval_blocks": EVAL_BLOCKS, "mask_seed": 0,
                    **{f"V{v}_T{t}": {k: study_data(v, t)[k] for k in fields} for v, t in combos}},
    }


def sizing(study: dict) -> dict:
    """The measured per-item CPU costs the `small` budget is sized from (one thread each). Chapter 9."""
    out: dict = {}
    t = study.get("throughput", {})
    for shape, variants in t.get("variants", {}).items():
        out[f"mlm_step_cpu_s {shape}"] = {v: variants[v]["cpu_per_step"] for v in variants}
    if t.get("finetune"):
        out["finetune_and_encode (cpu s per step; passages per cpu s)"] = t["finetune"]
    for name, r in study.get("condenser", {}).items():
        out[f"{r['run']['method']} step cpu s ({name})"] = {
            "cpu_per_step": r["cpu_per_step"], "batch": r["run"]["batch"], "max_len": r["run"]["max_len"],
            "shape": f"{r['run']['layers']}L/{r['run']['hidden']}H", "steps": r["steps"]}
    return out


def cost_parts(a: argparse.Namespace, parts: list[str], study: dict, command: str) -> None:
    """Parts throughput, parallel and precision, each cached in one file under the study's
    cache folder (``--collect``: read only what is there). Chapter 9."""
    from condenser_lite.studies.sizing_runs import RECOMMENDED
    from condenser_lite.studies.sizing_throughput import parallel, precision_costs, throughput
    from condenser_lite.utils.cache import cache_dir, compute_once

    tp_dir = cache_dir("study") / "throughput"
    # "-v1": the tag the cached measurements are stored under, so they are found
    cached = tp_dir / f"reps{a.reps}-steps{a.steps}-v1.json"
    # threads vs processes, re-measured on its own on a quiet machine (--only parallel): it
    # replaces the throughput part's own measurement, which other jobs can disturb
    parallel_cached = tp_dir / f"parallel-reps{a.reps}-steps{a.steps}-v1.json"
    if "parallel" in parts and not a.collect:
        compute_once(parallel_cached, lambda: parallel(a.reps, a.steps))
    if "throughput" in parts and (cached.exists() or not a.collect):
        study["throughput"] = compute_once(cached, lambda: throughput(a.reps, a.steps))
    if parallel_cached.exists() and "throughput" in study:
        study["throughput"]["parallel"] = json.loads(parallel_cached.read_text())
    precision_cached = tp_dir / f"precision-steps{a.steps}-v1.json"
    if "precision" in parts and not a.collect:
        compute_once(precision_cached, lambda: {"run": dataclasses.asdict(RECOMMENDED), "steps": a.steps,
                                              "commit": git_commit(), "command": command,
                                              "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
                                              "loadavg_before": os.getloadavg()[0],
                                              **precision_costs(a.steps),
                                              "loadavg_after": os.getloadavg()[0],
                                              "machine": machine()})
    if precision_cached.exists():
        study["precision"] = json.loads(precision_cached.read_text())


def training_parts(a: argparse.Namespace, parts: list[str], study: dict) -> None:
    """Parts sweep, long and condenser: the training runs (``sizing_runs``). Chapter 9."""
    from condenser_lite.studies.sizing_runs import BASE, RECOMMENDED, run_many, sweep_runs
    from condenser_lite.utils.errors import ConfigError

    if "sweep" in parts:
        res = run_many("sweep", sweep_runs(a.budget, a.extended), a.workers, a.collect)
        study["sweep"] = res
        for name, r in res.items():
            print(f"[sweep] {name:48s} steps {r['steps']:5d} cpu {r['cpu_seconds']:6.0f}s "
                  f"loss {r['final']['eval_mlm_loss']:.3f} unigram {r['unigram_entropy']:.3f} "
                  f"below {r['below_unigram']:.3f}", flush=True)
    try:
        specs = [BASE.replace(**json.loads(spec)) for spec in a.long] if a.long else [RECOMMENDED]
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--long: {e}; give a JSON object of Run fields, e.g. --long '{{\"hidden\": 256}}'") from None
    long_specs = {f"long: {r.shape}, T{r.max_len}, B{r.batch}, lr {r.lr:g}, dropout {r.dropout:g}":
                  r.replace(cpu_budget=a.long_budget) for r in specs}
    if "long" in parts or ("condenser" in parts and a.stage1 == "long"):
        res = run_many("long", long_specs, a.workers, a.collect)
        study["long"] = res
        for name, r in res.items():
            print(f"[long] {name}: steps {r['steps']} cpu {r['cpu_seconds']}s loss {r['final']['eval_mlm_loss']:.3f} "
                  f"unigram {r['unigram_entropy']:.3f}", flush=True)
    if "condenser" in parts:
        condenser_part(a, study)


def main(argv: list[str] | None = None) -> None:
    """The study's command line (``python -m condenser_lite sizing ...``). Chapter 9."""
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    if a.precision_child:
        from condenser_lite.studies.sizing_throughput import precision_child

        print(json.dumps(precision_child(a.precision_child)))
        return
    parts = a.only or ["throughput", "precision", "sweep", "long", "condenser"]
    command = shlex.join(["python", "-m", "condenser_lite", "sizing", *argv])
    from condenser_lite.reproduction.evidence.results import check_out

    out_path = Path(a.out)
    # before any measuring: a file of another kind (or a user's) is refused and stays as it is
    study = check_out(out_path, "sizing") or {"study": "sizing"}
    # local time, as in every results file of this study (the library's `results.now` is UTC ISO)
    start = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg": os.getloadavg()}
    # user + system seconds of this process and its finished workers, taken before the library's
    # imports (torch) so that every call counts the same work
    t0, cpu0 = time.perf_counter(), sum(os.times()[:4])
    before = dict(study)
    cost_parts(a, parts, study, command)
    training_parts(a, parts, study)
    for part in ("sweep", "long", "condenser"):  # --collect in a cache without a part's runs keeps the file's
        if a.collect and before.get(part) and not study.get(part):
            study[part] = before[part]
            print(f"[{part}] no finished run in this cache: the part in {out_path} is kept", flush=True)
    if set(parts) <= {"precision"} and "provenance" in study:
        # the part carries its own commit, command and machine; the rest keeps its provenance
        out_path.write_text(json.dumps(study, indent=1) + "\n")
        print(f"wrote {out_path}")
        return
    study["provenance"] = provenance(parts, command, start, t0, cpu0, study)
    study["recommendation"] = {**RECOMMENDATION, "measured_costs": sizing(study)}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(study, indent=1) + "\n")
    print(f"wrote {out_path}")
