"""A reader's short pre-training runs judged against the committed ones: the figure and the rates of
the page "Is my pre-training healthy?" (`notebooks/11_health.md`) read the file this
writes.

    python -m condenser_lite health-runs              # -> results/health.json (32 min on a shared 2-core CPU)
    python -m condenser_lite health-runs --rejudge    # the same runs judged again by the check as it is (seconds)

Short stage-1 runs of the `small` preset's BERT (MLM from scratch, the preset's `stages.bert`), all
on pre-training seed 47, which none of the band's runs used (so each is one more seed), and so all see
the same batches:

* `schedule`: the preset's settings, stopped after 1,500 of its 12,000 updates, as a reader
  checks the first evaluations of a full run (Ctrl-C); the run that should pass;
* `short`: the preset's settings with 1,500 updates in all (`--set stages.bert.max_steps=1500`:
  its schedule warms up and decays over them, so it is not the committed schedule);
* three broken runs of the committed schedule, each stopped after 1,500 updates, whose settings
  read exactly as the preset's (the bug is outside them, so only the loss can show it):
  `lr_x100` (a learning rate 100 times the preset's: this one does show in the settings),
  `mask_5pct` (the training batches masked at 5% instead of 15%; the held-out set keeps its
  masks) and `leak` (the 256 held-out blocks copied into the training blocks, one block in 16).

Each run's stage is the preset's with its settings set by their paths (`stages.bert.seed`, ...),
as `pretrain --set` sets them, and runs through `pretraining.pretrain` with `health.stage_check`,
as the command line does, in its own folder (not the cache). The file keeps each run's held-out
evaluations and, for each, the verdict and the line the check gives, the settings that differ
from the committed stage, and the provenance (commit, command, wall time, machine, versions).
`--rejudge` re-reads the losses and writes the verdicts and lines again (when the committed curves
or the check change); the chapter recomputes every verdict from the committed curves and checks
the file with it.

The file also holds `committed_curves`: held-out curves of committed stages that the results
files lack, each with its source, which `health.reference_curves` adds to the band (a run of
this study keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: results/ and git live there
STEPS = 1500
SEED = 47  # a pre-training seed outside the committed run's (42-46)
MASK_RATE = 0.05
LEAK_SHARE = 1 / 16
# name: (what changes, whether the run keeps the committed schedule and stops after --steps)
RUNS = {"schedule": ({}, True), "short": ({}, False), "lr_x100": ({"lr_factor": 100}, True),
        "mask_5pct": ({"mask_rate": MASK_RATE}, True), "leak": ({"leak_share": LEAK_SHARE}, True)}
METHOD = "mlm"  # stage 1: MLM from scratch, trained by the preset's stages.bert


class Stopped(KeyboardInterrupt):
    """Raised after the last evaluation wanted: the training loop saves and stops, as on Ctrl-C."""


class Recorder:
    """A health check that keeps every verdict it gives and stops the stage after ``stop`` updates.
    Chapter 11."""

    def __init__(self, check, stop: int | None):
        self.check, self.stop, self.seen = check, stop, []

    def check_heldout(self, info) -> None:
        self.check.check_heldout(info)

    def __call__(self, step, gauges):
        out = self.check(step, gauges)
        self.seen.append({"step": step, "mlm_loss": gauges["mlm_loss"], **out})
        if out.get("line"):
            print(out["line"], flush=True)
        if self.stop is not None and step >= self.stop:
            raise Stopped
        return out


@contextlib.contextmanager
def broken(change: dict):
    """The pre-training module with a bug the stage's settings do not show: its training batches
    masked at ``mask_rate``, or the held-out blocks in its training blocks at ``leak_share``.
    Chapter 11."""
    import condenser_lite.training.pretraining as pt
    from condenser_lite.training.pretraining_data import heldout_set

    saved = pt.stage_training, pt.general_blocks
    if "mask_rate" in change:
        def stage_training(cfg, tokenizer, mlm_collator, *args, **kw):
            wrong = pt.MLMCollator(tokenizer, mlm_probability=change["mask_rate"])
            return saved[0](cfg, tokenizer, wrong, *args, **kw)
        pt.stage_training = stage_training
    if "leak_share" in change:
        def general_blocks(cfg, tokenizer, data_dir=None, corpus=None):
            import torch
            from datasets import Dataset, concatenate_datasets

            blocks = saved[1](cfg, tokenizer, data_dir, corpus)
            if cfg.heldout_fraction is None:  # no held-out set to leak
                return blocks
            rows = []
            for b in heldout_set(cfg, tokenizer, data_dir, corpus)["batches"]:
                ids = torch.where(b["labels"] != -100, b["labels"], b["input_ids"])  # the unmasked text
                rows += [r[m.bool()].tolist() for r, m in zip(ids, b["attention_mask"])]
            copies = max(1, round(change["leak_share"] / (1 - change["leak_share"]) * len(blocks) / len(rows)))
            leak = Dataset.from_dict({"input_ids": rows * copies, "doc_index": [-1] * (len(rows) * copies)})
            return concatenate_datasets([blocks, leak.cast(blocks.features)])
        pt.general_blocks = general_blocks
    try:
        yield
    finally:
        pt.stage_training, pt.general_blocks = saved


def stage_of(preset, settings: dict):
    """The stage-1 ``StageConfig`` of ``preset`` with ``settings`` (``seed``, ``lr``, ...) set by
    their paths in its named stage (``stages.bert.max_steps``), as ``pretrain --method mlm --set``
    sets them. Chapter 11."""
    from condenser_lite.reproduction.configuration.presets import stage_config
    from condenser_lite.training.pretraining_config import stage_name

    stage = stage_name(METHOD, None)
    return stage_config(preset.replace(**{f"stages.{stage}.{k}": v for k, v in settings.items()}), METHOD)


def run_settings(preset, change: dict, keep_schedule: bool, steps: int) -> dict:
    """A run's settings that differ from the preset's stage: seed ``SEED``, the learning rate
    scaled, and either the committed schedule (evaluated at least every ``steps`` updates, so a
    short smoke run still stops) or ``steps`` updates in all. Chapter 11."""
    base = stage_of(preset, {})
    settings = {"seed": SEED, "lr": base.lr * change.get("lr_factor", 1), "max_steps": base.max_steps,
                "eval_every": min(base.eval_every or steps, steps)}
    if not keep_schedule:
        settings.update(max_steps=steps, eval_every=base.eval_every)
    return settings


def judge(run: dict, cfg) -> None:
    """``run``'s evaluations judged again from the committed curves, as a fresh run would be.
    Chapter 11."""
    from condenser_lite.reproduction.runs.health import stage_check

    check = stage_check(cfg)
    run.update(reference_arm=check.arm, suspects=check.suspects, alarm_level=getattr(check, "level", None))
    for e in run["evaluations"]:
        e.update({"health": None, "health_excess": None, "health_p": None})
        e.update(check(e["step"], {"mlm_loss": e["mlm_loss"]}))


def build_parser() -> argparse.ArgumentParser:
    """The study's options (``python -m condenser_lite health-runs --help``). Chapter 11."""
    from condenser_lite.utils.cli_args import positive_int

    ap = argparse.ArgumentParser(prog="python -m condenser_lite health-runs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=positive_int, default=STEPS, help=f"updates per run (default {STEPS})")
    ap.add_argument("--preset", default="small", help="the preset whose first stage runs (default small: the one "
                    "the committed runs are the reference of)")
    ap.add_argument("--runs", default=",".join(RUNS),
                    help=f"which runs, comma-separated (default all: {','.join(RUNS)})")
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    ap.add_argument("--out", default=str(ROOT / "results" / "health.json"))
    ap.add_argument("--rejudge", action="store_true", help="train nothing: judge the runs in --out again")
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error (a bad input)")
    return ap


def run_names(given: str) -> list[str]:
    """``--runs``' names, each one of ``RUNS``."""
    from condenser_lite.utils.errors import ConfigError

    names = given.split(",")
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise ConfigError(f"--runs {given!r}: unknown run(s) {unknown}; give some of {','.join(RUNS)}, comma-separated")
    return names


def rejudge(out: Path, command: str) -> None:
    """The runs in ``out`` judged again by the check as it is, their verdicts and lines rewritten.
    Chapter 11."""
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.evidence.results import check_out, git, now
    from condenser_lite.utils.errors import ConfigError

    result = check_out(out, "health", "--rejudge --out")  # a file of another kind is refused, not rejudged
    if not isinstance(result, dict) or not isinstance(result.get("runs"), dict) or \
            not isinstance(result.get("preset"), str):
        raise ConfigError(f"--rejudge --out {out}: not a health-runs results file that can be read (its 'preset' "
                          "and 'runs'); give results/health.json")
    preset = get_preset(result["preset"])
    for name, run in result["runs"].items():
        judge(run, stage_of(preset, run["settings"]))
        for e in run["evaluations"]:
            print(f"{name}: {e['line']}" if e["line"] else f"{name}: update {e['step']:,}", flush=True)
    result["provenance"]["judged"] = {"commit": git("rev-parse", "HEAD"), "finished": now(), "command": command}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


def train_run(name: str, preset, steps: int, data_dir: str | None) -> dict:
    """One run of ``RUNS``: its stage trained in a temporary folder, stopped after ``steps``
    updates where it keeps the committed schedule, its evaluations judged. Chapter 11."""
    from condenser_lite.reproduction.runs.health import stage_check
    from condenser_lite.training.loop import read_log
    from condenser_lite.training.pretraining import pretrain
    from condenser_lite.utils.errors import DivergedError

    change, keep_schedule = RUNS[name]
    settings = run_settings(preset, change, keep_schedule, steps)
    cfg = stage_of(preset, settings)
    recorder = Recorder(stage_check(cfg), steps if keep_schedule else None)
    t, stopped, diverged = time.perf_counter(), False, None
    print(f"{name}: lr {cfg.lr:g}, {cfg.max_steps:,}-update schedule"
          + (f", stopped after {steps:,}" if keep_schedule else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix=f"health-{name}-") as tmp, broken(change):
        try:
            pretrain(cfg, output_dir=Path(tmp) / name, data_dir=data_dir, progress=False, check=recorder)
        except Stopped:
            stopped = True
        except DivergedError as e:  # a broken run may stop on its own: the file says where
            diverged = str(e)
        log = read_log(Path(tmp) / name / "train")
    run = {"settings": settings, "bug": {k: v for k, v in change.items() if k != "lr_factor"} or None,
           "stopped_after": steps if stopped else None, "diverged": diverged,
           "evaluations": [{"step": e["step"], "mlm_loss": e["mlm_loss"]} for e in recorder.seen],
           "train_loss": [{"step": r["step"], "loss": r["loss"]} for r in log
                          if r["step"] % 25 == 0 and math.isfinite(r["loss"])],
           "wall_seconds": round(time.perf_counter() - t, 1)}
    judge(run, cfg)
    return run


def main(argv: list[str] | None = None) -> None:
    """The study's command line (``python -m condenser_lite health-runs ...``). Chapter 11."""
    from condenser_lite.utils.devices import load_average
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.evidence.results import check_out, now, study_provenance

    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    out, command = Path(a.out), shlex.join(["python", "-m", "condenser_lite", "health-runs", *argv])
    if a.rejudge:
        rejudge(out, command)
        return
    previous = check_out(out, "health") or {}  # before training: a file of another kind stays as it is
    preset, names = get_preset(a.preset), run_names(a.runs)
    started, t0, load_start = now(), time.perf_counter(), load_average()
    runs = {name: train_run(name, preset, a.steps, a.data_dir) for name in names}
    result = {"study": "health", "preset": preset.name, "steps": a.steps, "seed": SEED, "runs": runs,
              "provenance": study_provenance(out, command, started, t0, load_start)}
    if "committed_curves" in previous:  # curves of the committed run this file adds to the band
        result["committed_curves"] = previous["committed_curves"]
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
