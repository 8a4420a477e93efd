"""When does the Condenser head need [CLS]? The mechanism study behind the book's page of that name
(`notebooks/10_mechanism.md`), judged by the rules pre-registered in `reproduction/statistics/rules.py` before any of
its runs (the C0 rule: `rules.PRE_REGISTRATION_COMMIT`; the choice of a modified Condenser
among the deviations: `mechanism_rules.choose_modified`, committed before E3 and E5 ran).

    python -m condenser_lite mechanism              # every part, resumable -> results/mechanism.json
    python -m condenser_lite mechanism --only e3    # one part (the others stay as the file has them)
    python -m condenser_lite mechanism --merge gpu.json  # add parts run elsewhere (--out gpu.json there)
    python -m condenser_lite mechanism --only l48 --seeds 42  # one seed; 43 and 44 join it later

Every part pre-trains, per pre-training seed, a Condenser stage and its equal-step control
(BERT-continued) from a stage-1 BERT, each logging the pre-registered [CLS]-reliance gauge on
held-out general-corpus blocks (`gauges.cls_reliance_gauge`: the head's loss with its own late
[CLS], with another document's, with a zero and a mean [CLS], against the backbone's late loss on
the same masks, three mask draws, a bootstrap noise over blocks) every `eval_every` updates; the
study reads the final gauges and the curves and applies `rules.c0_rule`. Nothing here looks
at retrieval. The parts (`PARTS`):

* E0: the preset's faithful Condenser (`small`: 4 layers, the head reading layer `skip_from` = 1
  through one layer, 3,000 updates from stage 1).
* E1: the same Condenser and control four times as long (the learning rate decaying over them).
* E2: the paper's proportions on a deeper backbone: 6 layers, the head reading layer 3 (the
  middle, as the paper's layer 6 of 12) through 2 layers; its own stage 1 of the same updates.
* E3 (a deviation): no gradient from the head into the early layers (`detach_early`).
* E4 (a deviation): the head reads the embeddings (`skip_from = 0`), so its token inputs carry
  no context of their own.
* E5 (a deviation): the head reads the early states of a copy of the block with half its tokens
  masked (`head_mlm_probability = 0.5`) and predicts all of them, as RetroMAE's decoder
  (Xiao et al., 2022); the backbone's input and late MLM loss stay the faithful ones.

The scaling part asks of the faithful Condenser when its head starts to read [CLS], by the rules
pre-registered for it (`mechanism_rules.scaling_trend`, `mechanism_rules.SCALING_RULE_COMMIT`), on the pre-training
seeds `mechanism_rules.SCALING_SEEDS`:

* training length: E0 (3,000 updates), E1 (12,000) and L48 (48,000: sixteen times the preset's),
  all from the preset's stage-1 models;
* S1X4: the preset's Condenser stage from a stage 1 four times as long (48,000 updates);
* W256: the preset's shape at hidden size 256 (FFN 1,024), its own stage 1, the preset's stage.

The onset of L48 (``studies/onset.py``, ``onset.ONSET_RULE_COMMIT``): on the pre-training
seeds ``onset.ONSET_SEEDS`` (42-49), when the faithful head's reliance leaves its noise for good,
the share of models that switch on, and where they stand at the stage's end; its new seeds may
run without their control (``--no-control``), which only C0's late-loss half needs:

    python -m condenser_lite mechanism --only l48 --seeds 45,46 --no-control

`--dry-run` times a few updates of every stage a call would train and prints the projection;
a part run on new seeds joins the seeds the file already has for it (each run's provenance
kept), so a point too long for one sitting runs a seed at a time on a machine that keeps
nothing between sittings; a scaling point is judged once it has every seed of
``mechanism_rules.SCALING_SEEDS``. A run on some of a part's seeds and not all is refused.

E3-E5 run as the protocol's `condenser_mod` arm (`Preset.modified_condenser`), so the stage of
the deviation `mechanism_rules.choose_modified` picks is the very one a later `experiments --preset
small` with that modification reuses. The stages are the protocol's own (`arms.pretrain_arm`,
cached by their settings); two one-thread worker processes run them (`jobs.run_jobs`). Wall
time measured on a 2-core AMD EPYC with bf16 units (other work sharing the cores at times):
stage 1 28-37 minutes (both seeds side by side; skipped when cached), E0's continuations about
15, E3's 11, E4's 5, E5's 19 (the head's copy adds a pass of the early layers), E1 about 40,
E2 (its own stage 1) about an hour; one seed of L48 1.7 hours (its stage 1 13-14 minutes of
one thread, then the 48,000-update Condenser stage, 73-75, beside its control, 53-58); one seed
of S1X4 about an hour of one thread (its 48,000-update stage 1 55-56 minutes).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from condenser_lite.studies.mechanism_files import judge, merge, read_study

ROOT = Path(__file__).resolve().parents[2]  # the repository: results/ and git live there

SEEDS = (42, 43)
E1_FACTOR = 4  # E1's Condenser stage and control: four times the preset's (small: 12,000 updates)
E5_HEAD_MLM_PROBABILITY = 0.5  # RetroMAE's decoder masks 50-70%; the lower end
L48_FACTOR = 16  # the longest Condenser stage of the training-length series: 48,000 updates in small
BERT_STEPS, CONDENSER_STEPS = "stages.bert.max_steps", "stages.condenser.max_steps"  # the budgets the parts scale
S1_FACTOR = 4  # S1X4's stage 1: four times the preset's (48,000 updates in small)
W256 = {"hidden_size": 256, "intermediate_size": 1024}  # four heads of 64: the width series' model
SCALING_PARTS = ("e0", "e1", "l48", "s1x4", "w256")  # the points of the scaling figure
PARTS = {  # part: (what it is, the preset's changes, the Condenser stage's changes: a deviation if any)
    "e0": ("the preset's Condenser stage", lambda p: {}, None),
    "e1": (f"a Condenser stage {E1_FACTOR} times as long", lambda p: {CONDENSER_STEPS: E1_FACTOR * p.get(CONDENSER_STEPS)},
           None),
    "e2": ("the paper's proportions on a 6-layer backbone: the head reads layer 3 through 2 layers",
           lambda p: {"num_hidden_layers": 6, "skip_from": 3, "n_head_layers": 2}, None),
    "e3": ("no gradient from the head into the early layers (a deviation)", lambda p: {}, {"detach_early": True}),
    "e4": ("the head reading the embeddings (skip_from = 0; a deviation)", lambda p: {}, {"skip_from": 0}),
    "e5": (f"the head reading a copy with {E5_HEAD_MLM_PROBABILITY:.0%} of its tokens masked (a deviation)",
           lambda p: {}, {"head_mlm_probability": E5_HEAD_MLM_PROBABILITY}),
    "l48": (f"a Condenser stage {L48_FACTOR} times as long", lambda p: {CONDENSER_STEPS: L48_FACTOR * p.get(CONDENSER_STEPS)},
            None),
    "s1x4": (f"the preset's Condenser stage from a stage 1 {S1_FACTOR} times as long",
             lambda p: {BERT_STEPS: S1_FACTOR * p.get(BERT_STEPS)}, None),
    "w256": ("the preset's Condenser stage on a model of hidden size 256 (its own stage 1)", lambda p: dict(W256), None),
}
SERIES = {"training length": ("e0", "e1", "l48"), "stage-1 length": ("s1x4",), "width": ("w256",)}
GAUGES = ("mlm_loss", "head_loss", "cls_cosine", "cls_swap_gap", "cls_swap_noise", "cls_reliance",
          "cls_reliance_noise", "cls_reliance_mask_spread", "cls_reliance_zero", "cls_reliance_mean",
          "reliance_own_loss", "reliance_ablated_loss", "reliance_zero_loss", "reliance_mean_loss",
          "reliance_late_loss")


def part_preset(part: str, preset):
    """The preset a part runs and the arm that is its Condenser: E1 multiplies the continuation's
    updates, E2 reshapes the model, E3-E5 set ``modified_condenser`` and train ``condenser_mod``
    (whose stage 1 and control are E0's, cached once)."""
    from condenser_lite.reproduction.configuration.registry import MODIFIED_ARM

    _, changes, deviation = PARTS[part]
    if deviation is not None:
        return preset.replace(modified_condenser=deviation), MODIFIED_ARM
    return preset.replace(**changes(preset)), "condenser"


def part_jobs(preset, condenser: str, seeds, data_dir, control: bool = True):
    """Stage 1, the Condenser and (with ``control``) BERT-continued per pre-training seed, as the
    protocol's jobs."""
    from condenser_lite.reproduction.runs.arms import pretrain_arm
    from condenser_lite.reproduction.runs.jobs import Job, Ref

    jobs = {}
    for s in seeds:
        jobs[("bert", s)] = Job(pretrain_arm, dict(arm="bert", preset=preset, data_dir=data_dir, seed=s), priority=0)
        for arm in (condenser, "bert_cont")[:1 + control]:
            jobs[(arm, s)] = Job(pretrain_arm, dict(arm=arm, preset=preset, data_dir=data_dir, seed=s,
                                                    init=Ref(("bert", s), "checkpoint")), priority=1)
    return jobs


def check_seeds(part: str, old: dict | None, seeds) -> None:
    """Refuse, before any training, a run of ``part`` on some of the seeds the results file
    already holds for it and not all: its record would replace theirs and drop the others'.
    New seeds join the old ones; the same seeds (or more) re-run the part."""
    from condenser_lite.utils.errors import ConfigError

    held = set(old["seeds"]) if old else set()
    if held & set(seeds) and not held <= set(seeds):
        joined = ",".join(map(str, sorted(held | set(seeds))))
        raise ConfigError(f"part {part} already holds seeds {sorted(held)}; --seeds "
                          f"{','.join(map(str, seeds))} would replace some and drop the others: "
                          f"give only seeds it lacks, or all of them (--seeds {joined})")


def summarise(stage: dict) -> dict:
    """A stage's final held-out gauges, its gauge curve and its cost."""
    heldout = stage["heldout"] or {}
    curve = [{"step": r["step"], **{k[len("eval_"):]: r[k] for k in r if k.startswith("eval_")
                                     and k[len("eval_"):] in GAUGES}}
             for r in stage["log"] if any(k.startswith("eval_") for k in r)]
    compute = stage.get("compute") or {}
    return {"checkpoint_key": Path(stage["checkpoint"]).name, "steps": stage["steps"], "precision": stage.get("precision"),
            "final": {k: heldout.get(k) for k in GAUGES if k in heldout}, "curve": curve,
            "flops": compute.get("flops"), "cpu_seconds": compute.get("cpu_seconds"), "wall_seconds": stage.get("wall_time")}


def per_seed_summaries(done: dict, condenser: str, seeds) -> dict:
    """Per seed the stages' summaries, the part's Condenser under ``"condenser"`` (a seed run
    without its control has no ``"bert_cont"``)."""
    return {str(s): {arm: summarise(done[(stage, s)]) for arm, stage in
                     (("bert", "bert"), ("bert_cont", "bert_cont"), ("condenser", condenser))
                     if (stage, s) in done} for s in seeds}


def reused(old: dict, per_seed: dict) -> bool:
    """Whether a part's new run holds every seed of its ``old`` record with the very stages (the
    same checkpoint keys) that record summarised: they were read back from the cache, not trained."""
    return all(str(s) in per_seed and all(per_seed[str(s)][arm]["checkpoint_key"] == v["checkpoint_key"]
                                          for arm, v in old["per_seed"][str(s)].items())
               for s in old["seeds"])


def scaling(study: dict) -> dict | None:
    """The scaling part's summary by the pre-registered rules: each point's reliance per seed and
    its Condenser stage's FLOPs, whether it reads [CLS] (C0's ``relies``), the training-length
    trend (``mechanism_rules.scaling_trend``; None until the training-length series has its three points on
    the same seeds) and the other series against the training-length point of the same length,
    E0 (``rules.unit_test``, once both are on the same seeds). A point is judged only on all of
    ``mechanism_rules.SCALING_SEEDS`` (rule 1): one run seed by seed, across sessions, has ``reads_cls`` None
    and its ``missing_seeds`` until the last joins, so one seed past 0.2 is not a verdict; its
    ``below_threshold`` seeds say whether the verdict can still be "reads [CLS]"."""
    import math

    from condenser_lite.studies.mechanism_rules import SCALING_SEEDS, scaling_trend
    from condenser_lite.reproduction.evidence.results import run_reliance
    from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD, unit_test

    points = {}
    for part in SCALING_PARTS:
        entry = study.get(part)
        if entry and set(entry["per_seed"]) - {str(s) for s in SCALING_SEEDS}:
            # rule 1 judges a point on SCALING_SEEDS: seeds added for the onset rules stay out of it
            entry = {**entry, **judge({s: v for s, v in entry["per_seed"].items() if int(s) in SCALING_SEEDS})}
        if not entry or any(v["condenser"].get("flops") is None for v in entry["per_seed"].values()):
            continue  # a part summarised before its stages' FLOPs were recorded is re-run for the figure
        ungauged = [seed for seed, v in entry["per_seed"].items() if run_reliance(v["condenser"]["final"]) is None]
        if ungauged:  # an undefined reliance counts as 0 in the trend; a missing gauge must not
            raise ValueError(f"part {part}: seed(s) {', '.join(ungauged)} have no reliance gauges; "
                             f"re-run it (--only {part}) with this version of the study")
        missing = [seed for seed in SCALING_SEEDS if str(seed) not in entry["per_seed"]]
        per_seed = {seed: {"reliance": run_reliance(v["condenser"]["final"])["reliance"],
                           "log_flops": math.log10(v["condenser"]["flops"]), "steps": v["condenser"]["steps"]}
                    for seed, v in entry["per_seed"].items()}
        points[part] = {"series": next(s for s, ps in SERIES.items() if part in ps), "per_seed": per_seed,
                        "reads_cls": None if missing else entry["c0"]["relies"], "missing_seeds": missing,
                        # rule 1 asks the threshold of every seed: one short of it settles "no" already
                        "below_threshold": [seed for seed, v in per_seed.items()
                                            if (v["reliance"] or 0.0) < RELIANCE_THRESHOLD]}
    versus = {}
    for part in ("s1x4", "w256"):
        if part in points and "e0" in points and set(points[part]["per_seed"]) == set(points["e0"]["per_seed"]):
            order = sorted(points[part]["per_seed"], key=int)
            get = lambda p: {"seeds": order, "means": [points[p]["per_seed"][s]["reliance"] or 0.0 for s in order]}
            versus[part] = unit_test(get(part), get("e0"))
    length = [p for p in SERIES["training length"] if p in points]
    seeds = [set(points[p]["per_seed"]) for p in length]
    if len(length) < len(SERIES["training length"]) or any(s != seeds[0] for s in seeds) \
            or any(points[p]["missing_seeds"] for p in length):
        return {"points": points, "trend": None, "versus_e0": versus}
    trend = scaling_trend([{"seed": seed, **v} for p in length for seed, v in points[p]["per_seed"].items()])
    return {"points": points, "trend": trend, "versus_e0": versus}


def estimate(parts: dict, data_dir: str | None, workers: int,
             control: bool = True) -> list[tuple[str, str, int, float]]:
    """``(part, stage, how many, seconds each)`` for every stage the parts would train that the
    cache lacks, each timed for a few updates on the threads the workers run them with
    (``jobs.worker_threads``): the part's stage 1 once, its Condenser and control from the probe's
    checkpoint."""
    import tempfile

    from condenser_lite.reproduction.runs.arms import arm_config
    from condenser_lite.reproduction.runs.estimate import stage_seconds, time_stage
    from condenser_lite.reproduction.runs.jobs import num_threads, quiet, worker_threads
    from condenser_lite.training.stage_cache import stage_done, stage_folder

    rows = []
    threads = num_threads(worker_threads(workers))
    with tempfile.TemporaryDirectory(prefix="mechanism-estimate-") as tmp, quiet(), threads:
        for part, (part_set, condenser, seeds) in parts.items():
            first = arm_config("bert", part_set, None)
            timing = time_stage(first, Path(tmp) / part / "bert", data_dir)
            arms = (condenser, "bert_cont")[:1 + control]
            todo = {arm: 0 for arm in ("bert", *arms)}
            for s in seeds:
                s1 = first.replace(seed=s)
                todo["bert"] += not stage_done(s1, data_dir=data_dir)
                init = str(stage_folder(s1, data_dir)) if stage_done(s1, data_dir=data_dir) else None
                for arm in arms:
                    todo[arm] += init is None or not stage_done(arm_config(arm, part_set, init).replace(seed=s),
                                                                data_dir=data_dir)
            rows.append((part, "stage 1", todo["bert"], stage_seconds(first, timing)))
            for arm in arms:
                cfg = arm_config(arm, part_set, timing["checkpoint"])
                probe = time_stage(cfg, Path(tmp) / part / arm, data_dir)
                rows.append((part, arm, todo[arm], stage_seconds(cfg, probe)))
    return rows


def wall_seconds(rows, workers: int) -> float:
    """The wall time ``estimate``'s rows project on ``workers`` one-thread workers: the parts one
    after another; in each, its stage-1 runs first (``ceil(n / workers)`` rounds), then its
    Condenser stages and controls shared out, no sooner than the longest of them (a stage is not
    split), as in ``estimate.Estimate.total_seconds``."""
    import math

    total = 0.0
    for part in dict.fromkeys(r[0] for r in rows):
        (n1, s1), *rest = [(n, sec) for p, _, n, sec in rows if p == part]
        after = [(n, sec) for n, sec in rest if n]
        total += math.ceil(n1 / workers) * s1 + max(
            [sum(n * sec for n, sec in after) / workers, *(sec for _, sec in after)], default=0.0)
    return total


def main(argv: list[str] | None = None) -> None:
    """The study's command line (``python -m condenser_lite mechanism ...``)."""
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.studies.mechanism_rules import SCALING_SEEDS
    from condenser_lite.utils.cli_args import seed_list

    argv = sys.argv[1:] if argv is None else list(argv)
    a = _parser().parse_args(argv)
    given_seeds = seed_list(a.seeds) if a.seeds is not None else None
    out = Path(a.out)
    preset = get_preset(a.preset)
    study = read_study(out, preset.name, rejudge_only=a.merge == [])
    parts = a.only or list(PARTS)

    def part_seeds(part: str) -> tuple[int, ...]:
        if given_seeds:
            return tuple(given_seeds)
        return SCALING_SEEDS if part in SCALING_PARTS and part not in ("e0", "e1") else SEEDS
    if a.merge is None:
        for part in parts:
            check_seeds(part, study.get(part), part_seeds(part))
    if a.dry_run:
        _dry_run({part: (*part_preset(part, preset), part_seeds(part)) for part in parts}, a)
        return
    if a.merge is not None:
        merge(study, map(Path, a.merge), out, preset.name, PARTS)
        write(study, out, preset)
        return
    for part in parts:
        study[part] = _run_part(part, preset, part_seeds(part), study.get(part), a, argv)
        print(json.dumps({part: {"c0": study[part]["c0"]["status"], "reliance": study[part]["reliance"]}}, indent=1))
        write(study, out, preset)  # after every part, so a later part's failure loses nothing measured before it


def _parser() -> argparse.ArgumentParser:
    from condenser_lite.utils.cli_args import positive_int

    ap = argparse.ArgumentParser(prog="python -m condenser_lite mechanism", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(PARTS), action="append", help="run these parts (default: all)")
    ap.add_argument("--seeds", help="pre-training seeds, comma-separated (default: 42,43; the scaling parts "
                    "L48, S1X4 and W256: mechanism_rules.SCALING_SEEDS)")
    ap.add_argument("--workers", type=positive_int, default=2, help="one-thread worker processes")
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    ap.add_argument("--preset", default="small", help="the preset whose Condenser is studied")
    ap.add_argument("--out", default=str(ROOT / "results" / "mechanism.json"))
    ap.add_argument("--merge", nargs="*", metavar="FILE", help="add the parts of these results files (runs of the study "
                    "on other machines) to --out, a part present in both only if identical, grown from the other by "
                    "new seeds, or grown from a common copy by different seeds (kept whole), then re-judge the "
                    "modified Condenser's choice and the scaling summary; with no FILE, re-judge --out only")
    ap.add_argument("--no-control", action="store_true", help="train no equal-step control (BERT-continued): "
                    "C0 then judges the part on the seeds that have one; the onset rules need none")
    ap.add_argument("--dry-run", action="store_true", help="time a few updates of each stage to train, print the "
                    "projected hours, stop")
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error (a bad input)")
    return ap


def _dry_run(parts: dict, a: argparse.Namespace) -> None:
    """``--dry-run``: time a few updates of every stage ``parts`` would train and print the projection."""
    from condenser_lite.reproduction.runs.estimate import load_warning

    warning = load_warning()  # before the probes add their own load
    rows = estimate(parts, a.data_dir, a.workers, control=not a.no_control)
    for part, stage, n, seconds in rows:
        print(f"  {part + ': ' + stage:<36} {n} x {seconds / 60:6.1f} min")
    total = sum(n * s for *_, n, s in rows)
    print(f"  total: {total / 3600:.1f} h of one-thread work, about {wall_seconds(rows, a.workers) / 3600:.1f} h "
          f"of wall time on {a.workers} worker{'s' * (a.workers > 1)} (the parts in turn; in each, its stage 1 first)")
    if warning:
        print(f"  note: {warning}")


def _run_part(part: str, preset, seeds: tuple[int, ...], old: dict | None, a: argparse.Namespace,
              argv: list[str]) -> dict:
    """Train ``part`` on ``seeds`` and return its record: the gauges judged per seed (joining the
    seeds of ``old``, the part's record so far, where these are new) and the run's provenance."""
    from condenser_lite.reproduction.evidence.results import now
    from condenser_lite.reproduction.runs.jobs import run_jobs
    from condenser_lite.reproduction.statistics.rules import PRE_REGISTRATION_COMMIT
    from condenser_lite.reproduction.evidence.results import study_provenance
    from condenser_lite.utils.devices import load_average

    started, t0, load_start = now(), time.perf_counter(), load_average()
    part_set, condenser = part_preset(part, preset)
    done = run_jobs(part_jobs(part_set, condenser, seeds, a.data_dir, control=not a.no_control), a.workers,
                    on_done=lambda key, r: print(f"[{part} {time.perf_counter() - t0:7.0f}s] {key}: "
                                                 f"{r['steps']} updates", flush=True))
    per_seed, all_seeds, before = per_seed_summaries(done, condenser, seeds), list(seeds), []
    if old and not set(old["seeds"]) & set(seeds):  # new seeds join the part's others, each run's record kept
        per_seed = {**old["per_seed"], **per_seed}
        all_seeds = sorted({*old["seeds"], *seeds})
        before = [*old.get("provenance_of_other_seeds", []), {"seeds": old["seeds"], **old["provenance"]}]
    elif old and reused(old, per_seed):  # the old seeds' stages came back from the cache unchanged:
        # the record of where and when they were trained stays beside this run's
        before = [*old.get("provenance_of_other_seeds", []),
                  {"seeds": old["seeds"], "stages_reread_by_the_run_below": True, **old["provenance"]}]
    # the tree counts as dirty for any change but this file, which the earlier parts rewrote
    command = shlex.join(["python", "-m", "condenser_lite", "mechanism", *argv])
    ran = study_provenance(Path(a.out), command, started, t0, load_start,
                     first={"pre_registration_commit": PRE_REGISTRATION_COMMIT})
    return {"what": PARTS[part][0], "seeds": all_seeds, "modified_condenser": PARTS[part][2],
            **judge(per_seed), "provenance": {**ran, "seeds": list(seeds)},
            **({"provenance_of_other_seeds": before} if before else {})}


def write(study: dict, out: Path, preset) -> None:
    """Judge what ``study`` holds by the pre-registered rules (the modified Condenser's choice
    among the deviations, the scaling summary) and write it to ``out``."""
    from condenser_lite.studies.mechanism_rules import MODIFIED_RULE_COMMIT, SCALING_RULE_COMMIT, choose_modified

    study["modified"] = {**choose_modified({p: v["c0"] for p, v in study.items() if p in PARTS}),
                         "rule_commit": MODIFIED_RULE_COMMIT}
    study["scaling"] = {**scaling(study), "rule_commit": SCALING_RULE_COMMIT}
    if "l48" in study:
        from condenser_lite.studies.onset import study_onset

        study["onset"] = study_onset(study["l48"])
    study.update(study="mechanism", preset=preset.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(study, indent=1) + "\n")
    print(f"wrote {out}")

