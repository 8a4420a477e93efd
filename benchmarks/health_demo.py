"""A reader's short pre-training runs judged against the committed ones: the figure of chapter 2's
section "Is my pre-training healthy?" (`notebooks/02_condenser.md`) reads the file this writes.

    python benchmarks/health_demo.py            # -> results/health.json (about 10 minutes on 2 cores)

Two short stage-1 runs of the `small` preset's BERT (MLM from scratch), as a reader would start
one with `pretrain --preset small --method mlm --set max_steps=1500`:

* `healthy`: the preset's settings with 1,500 updates (its schedule warms up and decays over them);
* `lr_x100`: the same with a learning rate 100 times the preset's, the broken setting the check
  must flag.

Each runs through `pretraining.pretrain` with `health.stage_check`, as the command line does, in
its own folder (not the cache); the file keeps each run's held-out evaluations, the verdict and
the line printed at each, the settings that differ from the committed stage, and the provenance
(commit, command, wall time, machine, versions). Nothing here is compared digit for digit: the
chapter recomputes each verdict from the committed curves and checks the file's verdicts with it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS = 1500
RUNS = {"healthy": {}, "lr_x100": {"lr_factor": 100}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=STEPS, help=f"updates per run (default {STEPS})")
    ap.add_argument("--preset", default="small", help="the preset whose first stage runs (default small: the one "
                    "the committed runs are the reference of)")
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    ap.add_argument("--out", default=str(ROOT / "results" / "health.json"))
    a = ap.parse_args()

    from condenser_lite.reproduction.health import stage_check
    from condenser_lite.reproduction.jobs import load_average
    from condenser_lite.reproduction.presets import get_preset, stage_config
    from condenser_lite.reproduction.results import environment, git, machine, now
    from condenser_lite.training.pretraining import pretrain, read_log
    from condenser_lite.utils.errors import DivergedError

    preset = get_preset(a.preset)
    base = stage_config(preset, "mlm")
    started, t0, load_start = now(), time.perf_counter(), load_average()
    runs = {}
    for name, change in RUNS.items():
        cfg = base.replace(max_steps=a.steps, lr=base.lr * change.get("lr_factor", 1))
        check = stage_check(cfg)
        t = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"health-{name}-") as tmp:
            diverged = None
            try:
                out = pretrain(cfg, output_dir=Path(tmp) / name, data_dir=a.data_dir, progress=False, check=check)
                log = read_log(out)
            except DivergedError as e:  # a broken run may stop: the file says where
                diverged, log = str(e), read_log(Path(tmp) / name / "train")
        lines = stage_check(cfg)  # a fresh check: its lines as a reader's run printed them
        evaluations = [{"step": r["step"], "mlm_loss": r["eval_mlm_loss"], "health": r.get("health"),
                        "health_excess": r.get("health_excess"),
                        "line": lines(r["step"], {"mlm_loss": r["eval_mlm_loss"]})["line"]}
                       for r in log if "eval_mlm_loss" in r]
        for e in evaluations:
            if e["line"]:
                print(e["line"], flush=True)
        runs[name] = {"lr": cfg.lr, "max_steps": cfg.max_steps, "reference_arm": check.arm,
                      "suspects": check.suspects, "evaluations": evaluations, "diverged": diverged,
                      "train_loss": [{"step": r["step"], "loss": r["loss"]} for r in log if r["step"] % 25 == 0],
                      "wall_seconds": round(time.perf_counter() - t, 1)}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){Path(a.out).resolve()}")
    env = environment()
    result = {"study": "health", "preset": preset.name, "steps": a.steps, "runs": runs,
              "provenance": {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status),
                             "command": shlex.join(["python", *sys.argv]), "started": started, "finished": now(),
                             "wall_seconds": round(time.perf_counter() - t0, 1), "machine": machine(load_start),
                             "python": env["python"], "packages": env["packages"]}}
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
