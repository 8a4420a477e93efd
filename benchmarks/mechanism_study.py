"""When does the Condenser head need [CLS]? The mechanism study behind the book's page of that name
(`notebooks/10_mechanism.md`), judged by the rules pre-registered in `reproduction/rules.py` before any of
its runs (the C0 rule: `rules.PRE_REGISTRATION_COMMIT`; the choice of a modified Condenser
among the deviations: `rules.choose_modified`, committed before E3 and E5 ran).

    python benchmarks/mechanism_study.py              # every part, resumable -> results/mechanism.json
    python benchmarks/mechanism_study.py --only e3    # one part (the others stay as the file has them)

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

E3-E5 run as the protocol's `condenser_mod` arm (`Preset.modified_condenser`), so the stage of
the deviation `rules.choose_modified` picks is the very one a later `experiments --preset
small` with that modification reuses. The stages are the protocol's own (`arms.pretrain_arm`,
cached by their settings); two one-thread worker processes run them (`jobs.run_jobs`). Wall
time measured on a 2-core AMD EPYC with bf16 units (other work sharing the cores at times):
stage 1 28-37 minutes (both seeds side by side; skipped when cached), E0's continuations about
15, E3's 11, E4's 5, E5's 19 (the head's copy adds a pass of the early layers), E1 about 40,
E2 (its own stage 1) about an hour.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEEDS = (42, 43)
E1_FACTOR = 4  # E1's Condenser stage and control: four times the preset's (small: 12,000 updates)
E5_HEAD_MLM_PROBABILITY = 0.5  # RetroMAE's decoder masks 50-70%; the lower end
PARTS = {  # part: (what it is, the preset's changes, the Condenser stage's changes: a deviation if any)
    "e0": ("the preset's Condenser stage", lambda p: {}, None),
    "e1": (f"a Condenser stage {E1_FACTOR} times as long", lambda p: {"s2_steps": E1_FACTOR * p.get("s2_steps")},
           None),
    "e2": ("the paper's proportions on a 6-layer backbone: the head reads layer 3 through 2 layers",
           lambda p: {"num_hidden_layers": 6, "skip_from": 3, "n_head_layers": 2}, None),
    "e3": ("no gradient from the head into the early layers (a deviation)", lambda p: {}, {"detach_early": True}),
    "e4": ("the head reading the embeddings (skip_from = 0; a deviation)", lambda p: {}, {"skip_from": 0}),
    "e5": (f"the head reading a copy with {E5_HEAD_MLM_PROBABILITY:.0%} of its tokens masked (a deviation)",
           lambda p: {}, {"head_mlm_probability": E5_HEAD_MLM_PROBABILITY}),
}
GAUGES = ("mlm_loss", "head_loss", "cls_cosine", "cls_swap_gap", "cls_swap_noise", "cls_reliance",
          "cls_reliance_noise", "cls_reliance_mask_spread", "cls_reliance_zero", "cls_reliance_mean",
          "reliance_own_loss", "reliance_ablated_loss", "reliance_zero_loss", "reliance_mean_loss",
          "reliance_late_loss")


def part_preset(part: str, preset):
    """The preset a part runs and the arm that is its Condenser: E1 multiplies the continuation's
    updates, E2 reshapes the model, E3-E5 set ``modified_condenser`` and train ``condenser_mod``
    (whose stage 1 and control are E0's, cached once)."""
    from condenser_lite.reproduction.registry import MODIFIED_ARM

    _, changes, deviation = PARTS[part]
    if deviation is not None:
        return preset.replace(modified_condenser=deviation), MODIFIED_ARM
    return preset.replace(**changes(preset)), "condenser"


def part_jobs(preset, condenser: str, seeds, data_dir):
    """Stage 1, the Condenser and BERT-continued per pre-training seed, as the protocol's jobs."""
    from condenser_lite.reproduction.arms import pretrain_arm
    from condenser_lite.reproduction.jobs import Job, Ref

    jobs = {}
    for s in seeds:
        jobs[("bert", s)] = Job(pretrain_arm, dict(arm="bert", preset=preset, data_dir=data_dir, seed=s), priority=0)
        for arm in (condenser, "bert_cont"):
            jobs[(arm, s)] = Job(pretrain_arm, dict(arm=arm, preset=preset, data_dir=data_dir, seed=s,
                                                    init=Ref(("bert", s), "checkpoint")), priority=1)
    return jobs


def summarise(stage: dict) -> dict:
    """A stage's final held-out gauges, its gauge curve and its cost."""
    heldout = stage["heldout"] or {}
    curve = [{"step": r["step"], **{k[len("eval_"):]: r[k] for k in r if k.startswith("eval_")
                                     and k[len("eval_"):] in GAUGES}}
             for r in stage["log"] if any(k.startswith("eval_") for k in r)]
    return {"checkpoint_key": Path(stage["checkpoint"]).name, "steps": stage["steps"], "precision": stage.get("precision"),
            "final": {k: heldout.get(k) for k in GAUGES if k in heldout}, "curve": curve,
            "cpu_seconds": (stage.get("compute") or {}).get("cpu_seconds"), "wall_seconds": stage.get("wall_time")}


def judge(done: dict, condenser: str, seeds) -> dict:
    """Per seed the stages' summaries (the part's Condenser under ``"condenser"``), and C0 by the
    pre-registered rule over the seeds."""
    from condenser_lite.reproduction.rules import c0_rule, reliance_summary, run_reliance

    per_seed = {str(s): {arm: summarise(done[(stage, s)]) for arm, stage in
                         (("bert", "bert"), ("bert_cont", "bert_cont"), ("condenser", condenser))} for s in seeds}
    cond = [done[(condenser, s)]["heldout"] for s in seeds]
    cont = [done[("bert_cont", s)]["heldout"] for s in seeds]
    reliance = [run_reliance(h) for h in cond]
    c0 = c0_rule([r["reliance"] if r else None for r in reliance], [h["mlm_loss"] for h in cond],
                 [h["mlm_loss"] for h in cont], [h["cls_cosine"] for h in cond], [h["cls_cosine"] for h in cont])
    return {"per_seed": per_seed, "c0": c0, "reliance": reliance_summary([r or {} for r in reliance])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(PARTS), action="append", help="run these parts (default: all)")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="pre-training seeds, comma-separated")
    ap.add_argument("--workers", type=int, default=2, help="one-thread worker processes")
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    ap.add_argument("--preset", default="small", help="the preset whose Condenser is studied")
    ap.add_argument("--out", default=str(ROOT / "results" / "mechanism.json"))
    a = ap.parse_args()

    from condenser_lite.reproduction.jobs import load_average, run_jobs
    from condenser_lite.reproduction.presets import get_preset
    from condenser_lite.reproduction.results import environment, git, machine, now
    from condenser_lite.reproduction.rules import MODIFIED_RULE_COMMIT, PRE_REGISTRATION_COMMIT, choose_modified

    out = Path(a.out)
    study = json.loads(out.read_text()) if out.exists() else {}
    preset = get_preset(a.preset)
    seeds = tuple(int(s) for s in a.seeds.split(","))
    env = environment()
    for part in a.only or list(PARTS):
        started, t0, load_start = now(), time.perf_counter(), load_average()
        part_set, condenser = part_preset(part, preset)
        done = run_jobs(part_jobs(part_set, condenser, seeds, a.data_dir), a.workers,
                        on_done=lambda key, r: print(f"[{part} {time.perf_counter() - t0:7.0f}s] {key}: "
                                                     f"{r['steps']} updates", flush=True))
        # the tree counts as dirty for any change but this file, which the earlier parts rewrote
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){out.resolve()}")
        study[part] = {"what": PARTS[part][0], "seeds": list(seeds), "modified_condenser": PARTS[part][2],
                       **judge(done, condenser, seeds),
                       "provenance": {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status),
                                      "pre_registration_commit": PRE_REGISTRATION_COMMIT,
                                      "command": shlex.join(["python", *sys.argv]), "started": started,
                                      "finished": now(), "wall_seconds": round(time.perf_counter() - t0, 1),
                                      "machine": machine(load_start), "python": env["python"],
                                      "packages": env["packages"]}}
        print(json.dumps({part: {"c0": study[part]["c0"]["status"], "reliance": study[part]["reliance"]}}, indent=1))
        # the pre-registered choice among the deviations measured so far
        study["modified"] = {**choose_modified({p: v["c0"] for p, v in study.items() if p in PARTS}),
                             "rule_commit": MODIFIED_RULE_COMMIT}
        # written after every part, so a later part's failure loses nothing measured before it
        study.update(study="mechanism", preset=preset.name)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(study, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
