"""When does the Condenser head need [CLS]? The mechanism study behind the book's page of that name
(`notebooks/10_mechanism.md`), judged by the rules pre-registered in `scorecard.py` (commit
`scorecard.PRE_REGISTRATION_COMMIT`) before any of its runs.

    python benchmarks/mechanism_study.py              # every part, resumable -> results/mechanism.json
    python benchmarks/mechanism_study.py --only e1    # one part (the others stay as the file has them)

Part E0: the faithful Condenser of the `small` preset (the committed
run's shape and recipe: 4 layers, the head reading layer `skip_from` = 1 through one layer, 3,000
updates from stage 1) and its equal-step control, BERT-continued, once per pre-training seed.
Each stage logs the pre-registered [CLS]-reliance gauge on held-out general-corpus blocks
(`analysis.cls_reliance_gauge`: the head's loss with its own late [CLS], with another
document's, with a zero and a mean [CLS], against the backbone's late loss on the same masks,
three mask draws, a bootstrap noise over blocks) every `eval_every` updates; the study reads the
final gauges and the curves, and applies `scorecard.c0_rule`. Nothing here looks at retrieval.

Part E1: the same, with a Condenser stage and control four times as long (12,000 updates, the
learning rate decaying over them), from the same stage 1; on the first seed only so far.

Part E4 (a deviation from the paper): the head reads the embeddings (``skip_from = 0``) instead
of layer 1's output, so the early token states carry no context and everything the head knows
about the block's other words must come through its own attention over embeddings or through
the late [CLS]; 3,000 updates from the same stage 1, with its own BERT-continued control (the
same MLM stage: cached once); on the first seed only so far.

The stages are the protocol's own (`arms.pretrain_arm`, cached by their settings), so a later
`experiments --preset small` with these seeds reuses them; two one-thread worker processes run
them (`jobs.run_jobs`). Wall time on a 2-core CPU with bf16 units: stage 1 about 20 minutes per
seed (skipped when cached), the four continuations about 10 minutes each.
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
PARTS = {"e0": "the preset's Condenser stage", "e1": f"a Condenser stage {E1_FACTOR} times as long",
         "e4": "the head reading the embeddings (skip_from = 0; a deviation)"}
GAUGES = ("mlm_loss", "head_loss", "cls_cosine", "cls_swap_gap", "cls_swap_noise", "cls_reliance",
          "cls_reliance_noise", "cls_reliance_mask_spread", "cls_reliance_zero", "cls_reliance_mean",
          "reliance_own_loss", "reliance_ablated_loss", "reliance_zero_loss", "reliance_mean_loss",
          "reliance_late_loss")


def e0_jobs(preset, seeds, data_dir, condenser_preset=None):
    """Stage 1, Condenser and BERT-continued per pre-training seed, as the protocol's jobs.
    ``condenser_preset``: the Condenser stage's own settings where a part changes only the
    Condenser (E4's head), so that stage 1 and the control stay the cached ones of ``preset``
    (an MLM stage's cache key names the model's head fields too, which MLM never reads)."""
    from condenser_lite.arms import pretrain_arm
    from condenser_lite.jobs import Job, Ref

    jobs = {}
    for s in seeds:
        jobs[("bert", s)] = Job(pretrain_arm, dict(arm="bert", preset=preset, data_dir=data_dir, seed=s), priority=0)
        for arm in ("condenser", "bert_cont"):
            arm_preset = condenser_preset if arm == "condenser" and condenser_preset is not None else preset
            jobs[(arm, s)] = Job(pretrain_arm, dict(arm=arm, preset=arm_preset, data_dir=data_dir, seed=s,
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


def part_presets(part: str, preset):
    """The presets a part runs, (all stages, the Condenser stage): E0 the preset itself, E1 with
    a longer Condenser stage and control, E4 with the Condenser's head reading the embeddings
    instead of layer ``skip_from``'s output (stage 1 and the control are E0's)."""
    if part == "e1":
        return preset.replace(s2_steps=E1_FACTOR * preset.pretraining.s2_steps), None
    if part == "e4":
        return preset, preset.replace(skip_from=0)
    return preset, None


def judge(done: dict, seeds) -> dict:
    """Per seed the stages' summaries, and C0 by the pre-registered rule over the seeds."""
    from condenser_lite.scorecard import c0_rule, reliance_summary, run_reliance

    per_seed = {str(s): {arm: summarise(done[(arm, s)]) for arm in ("bert", "bert_cont", "condenser")} for s in seeds}
    cond = [done[("condenser", s)]["heldout"] for s in seeds]
    cont = [done[("bert_cont", s)]["heldout"] for s in seeds]
    reliance = [run_reliance(h) for h in cond]
    c0 = c0_rule([r["reliance"] if r else None for r in reliance], [h["mlm_loss"] for h in cond],
                 [h["mlm_loss"] for h in cont], [h["cls_cosine"] for h in cond], [h["cls_cosine"] for h in cont])
    return {"per_seed": per_seed, "c0": c0, "reliance": reliance_summary([r or {} for r in reliance])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(PARTS), action="append", help="run these parts (default: all)")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="pre-training seeds of E0, comma-separated")
    ap.add_argument("--e1-seeds", default=str(SEEDS[0]), help="pre-training seeds of E1, comma-separated")
    ap.add_argument("--e4-seeds", default=str(SEEDS[0]), help="pre-training seeds of E4, comma-separated")
    ap.add_argument("--workers", type=int, default=2, help="one-thread worker processes")
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    ap.add_argument("--preset", default="small", help="the preset whose Condenser is studied")
    ap.add_argument("--out", default=str(ROOT / "results" / "mechanism.json"))
    a = ap.parse_args()

    from condenser_lite.evidence import environment, git, machine, now
    from condenser_lite.jobs import load_average, run_jobs
    from condenser_lite.presets import get_preset
    from condenser_lite.scorecard import PRE_REGISTRATION_COMMIT

    out = Path(a.out)
    study = json.loads(out.read_text()) if out.exists() else {}
    preset = get_preset(a.preset)
    seeds = {part: tuple(int(s) for s in text.split(",")) for part, text in
             (("e0", a.seeds), ("e1", a.e1_seeds), ("e4", a.e4_seeds))}
    env = environment()
    for part in a.only or sorted(PARTS):
        started, t0, load_start = now(), time.perf_counter(), load_average()
        stages, condenser = part_presets(part, preset)
        done = run_jobs(e0_jobs(stages, seeds[part], a.data_dir, condenser_preset=condenser), a.workers,
                        on_done=lambda key, r: print(f"[{part} {time.perf_counter() - t0:7.0f}s] {key}: "
                                                     f"{r['steps']} updates", flush=True))
        # the tree counts as dirty for any change but this file, which the earlier parts rewrote
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){out.resolve()}")
        study[part] = {"what": PARTS[part], "seeds": list(seeds[part]), **judge(done, seeds[part]),
                       "provenance": {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status),
                                      "pre_registration_commit": PRE_REGISTRATION_COMMIT,
                                      "command": shlex.join(["python", *sys.argv]), "started": started,
                                      "finished": now(), "wall_seconds": round(time.perf_counter() - t0, 1),
                                      "machine": machine(load_start), "python": env["python"],
                                      "packages": env["packages"]}}
        print(json.dumps({part: {"c0": study[part]["c0"]["status"], "reliance": study[part]["reliance"]}}, indent=1))
        # written after every part, so a later part's failure loses nothing measured before it
        study.update(study="mechanism", preset=preset.name)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(study, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
