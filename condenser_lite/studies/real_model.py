"""Does coCondenser's corpus-aware pre-training help a real retriever? The comparison's design and
its rule, fixed here before any of its runs (chapter 13, `notebooks/13_real_model.md`).

coCondenser's practical claim is that pre-training on the target corpus, before fine-tuning, makes
a better retriever of it. The book's own evidence is on small models it trains from scratch; this
comparison asks it of a real one, all-MiniLM-L6-v2 (``utils.loading.shipped_model``), on SciFact.
Each arm starts from that model and ends with the same fine-tuning (``presets.PRETRAINED_RECIPE``,
both rounds, every arm pooled by ``[CLS]``, the vector coCondenser trains):

* ``none``: fine-tuned as it is;
* ``cocondenser``: a coCondenser stage on SciFact's 5,183 abstracts, then fine-tuned. Its
  contrastive term only (``mlm_weight`` 0, coCondenser table 4's ablation row): the model ships
  with neither an MLM head nor a Condenser head, and a fresh head's MLM loss starts near
  log(30,522) = 10.3 nats, whose gradients through an untrained head would first undo the
  backbone rather than adapt it;
* ``mlm``: the control. MLM on the same abstracts from a fresh MLM head, for as many FLOPs as the
  coCondenser stage (``control_steps``). Without it a gain could not be told from more training
  on the target corpus.

The sizes come from timings on the 2-core Xeon (``pretrain --dry-run``, bf16, two threads): a
coCondenser update of 64 abstracts (two spans of at most 128 tokens each) took 7.3 s, an MLM
update of 32 blocks of 128 tokens 1.1 s. Two passes over the abstracts (162 updates) cost about 20
minutes a seed there.

The rule (``judge``), for nDCG@10 on SciFact test after round 2, the pre-trained model the unit:

* H1, the span contrast against more MLM on the corpus: ``cocondenser`` above ``mlm``, a
  one-sided t-test paired by pre-training seed (``rules.unit_test``) over ``PRETRAIN_SEEDS``;
* H2, corpus-aware pre-training against none: ``cocondenser`` above ``none``, a one-sided Welch
  t-test of ``cocondenser``'s model means against ``none``'s fine-tuning runs (``NONE_SEEDS``:
  ``none`` is one model, so its spread is its fine-tuning's).

Both at 5%, each with its minimum detectable difference (power 0.8), and Benjamini-Hochberg q
over the family of these two tests. A test that does not reject says "not detectable at this
power" when its difference is below its MDD. Round 1, R@100 and ``mlm`` against ``none`` are
reported beside them and judge nothing. H1 separates the span contrast from MLM on the same text
at equal compute; it does not separate it from any other contrastive pre-training.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from scipy import stats as scipy_stats

from condenser_lite.reproduction.statistics.rules import (ALPHA_ONE_SIDED, NOT_DETECTABLE, NOT_SIGNIFICANT, model_means,
                                                          unit_test)

ARMS = ("none", "cocondenser", "mlm")
PRETRAIN_SEEDS = (42, 43, 44)  # one pre-trained model per seed, for cocondenser and mlm each
FINETUNE_SEEDS = (0, 1)  # each pre-trained model fine-tuned twice
NONE_SEEDS = (0, 1, 2, 3)  # none is one model: its fine-tuning's spread stands for its own
POOLING = "cls"  # every arm: the vector coCondenser's contrastive term trains
METRIC, ROUND = "nDCG@10", "round2"
STAGE = {  # the coCondenser stage, as `pretrain --preset small --method cocondenser --set ...` takes it
    "stages.cocondenser.mlm_weight": 0.0, "stages.cocondenser.co_weight": 1.0,
    "stages.cocondenser.head": "random", "stages.cocondenser.batch_size": 64,
    "stages.cocondenser.max_steps": 162, "stages.cocondenser.lr": 1e-4, "model.max_len": 128}
CONTROL = {"stages.condenser.batch_size": 32, "stages.condenser.lr": 1e-4, "model.max_len": 128}
# Published beside it, judging nothing: GPL (Wang et al., NAACL 2022) table 1, SciFact test nDCG@10.
# DistilBERT pre-trained on the target corpus by each method (100K updates of 8 texts), then trained on
# MS MARCO with MarginMSE; no SciFact training queries, one run each; "none" is MS MARCO training alone.
GPL_SCIFACT = {"none": 0.571, "MLM": 0.600, "ICT": 0.583, "Condenser": 0.627, "SimCSE": 0.550, "CT": 0.556,
               "TSDAE": 0.628}


def control_steps(stage_steps: int, stage_flops: float, control_flops: float) -> int:
    """The MLM control's updates: as many as spend the coCondenser stage's FLOPs (``stage_flops``
    and ``control_flops`` per update, from the library's accounting of each stage's first
    updates). Chapter 13."""
    if stage_steps < 1 or not stage_flops > 0 or not control_flops > 0:
        raise ValueError(f"control_steps needs positive steps and FLOPs, got {stage_steps}, {stage_flops}, "
                         f"{control_flops}")
    return max(1, round(stage_steps * stage_flops / control_flops))


def _verdict(test: Mapping) -> str:
    """A one-sided test's reading: better, worse, or why it says neither."""
    if test["verdict"] != NOT_SIGNIFICANT:
        return test["verdict"]
    return NOT_DETECTABLE if test["mdd"] is not None and abs(test["diff"]) < test["mdd"] else NOT_SIGNIFICANT


def judge(runs: Mapping[str, Mapping]) -> dict:
    """The two pre-registered tests on ``runs``: for ``cocondenser`` and ``mlm``, {pre-training
    seed: [the metric of each fine-tuning seed]}; for ``none``, {fine-tuning seed: value}. Returns
    ``{"H1", "H2"}``, each ``rules.unit_test``'s record with its ``reading`` and BH ``q`` over
    the two, and ``"family"``: the number of tests and what it means. Chapter 13."""
    missing = [a for a in ARMS if not runs.get(a)]
    if missing:
        raise ValueError(f"judge needs runs of every arm; missing: {missing}")

    def means(arm: str) -> dict:
        seeds = sorted(runs[arm], key=int)
        return model_means([v for s in seeds for v in runs[arm][s]], seeds)

    co, mlm = means("cocondenser"), means("mlm")
    none = {"seeds": [f"fine-tuning {s}" for s in sorted(runs["none"], key=int)],  # unpaired: no seed is shared
            "means": [float(runs["none"][s]) for s in sorted(runs["none"], key=int)]}
    tests = {"H1": unit_test(co, mlm), "H2": unit_test(co, none)}
    p = [t["p"] for t in tests.values()]
    q = scipy_stats.false_discovery_control(p, method="bh") if None not in p else [None] * len(p)
    out = {name: {**t, "reading": _verdict(t), "q": None if qv is None else round(float(qv), 4)}
           for (name, t), qv in zip(tests.items(), q)}
    out["family"] = (f"2 tests at {ALPHA_ONE_SIDED:.0%} one-sided: with no true effect, about "
                     f"{2 * ALPHA_ONE_SIDED:.1f} false calls are expected; q controls their expected share")
    return out


def runs_per_arm() -> dict[str, int]:
    """Fine-tunings (two rounds each) the comparison trains, per arm. Chapter 13."""
    return {"none": len(NONE_SEEDS), "cocondenser": len(PRETRAIN_SEEDS) * len(FINETUNE_SEEDS),
            "mlm": len(PRETRAIN_SEEDS) * len(FINETUNE_SEEDS)}


# ---- running it: python -m condenser_lite real-model ------------------------------------------------

RULE_COMMIT = "c5829bc"  # the commit that fixed the design and rule above, before any run


def finetune_preset():
    """The ``small`` preset with the pretrained recipe pooled by ``POOLING``: every arm's fine-tuning."""
    import dataclasses

    from condenser_lite.reproduction.configuration.presets import PRETRAINED_RECIPE, get_preset

    return get_preset("small").replace(finetune=dataclasses.replace(PRETRAINED_RECIPE, pooling=POOLING))


def stage_configs(model: str, seed: int, control_updates: int | None = None) -> dict:
    """The coCondenser stage and the MLM control of one pre-training seed, from ``model``, as
    ``pretrain`` builds them with ``STAGE`` and ``CONTROL``; the control's updates are
    ``control_updates`` (``control_steps``), 2 for a probe when None."""
    from condenser_lite.reproduction.configuration.presets import get_preset, stage_config

    small = get_preset("small")
    co = stage_config(small.replace(**STAGE), "cocondenser", model).replace(seed=seed)
    control = {**CONTROL, "stages.condenser.max_steps": control_updates or 2}
    mlm = stage_config(small.replace(**control), "mlm", model).replace(corpus="scifact", seed=seed)
    return {"cocondenser": co, "mlm": mlm}


def _per_update_flops(folder) -> float:
    record = json.loads((Path(folder) / "pretrain_config.json").read_text())
    return record["compute"]["flops"] / record["compute"]["steps"]


def _key(record: Mapping) -> dict:
    """What every unit of a results file depends on, as JSON stores it: the design, the model and
    the fine-tuning recipe. A resume refuses a file whose key differs."""
    return json.loads(json.dumps({k: record.get(k) for k in ("model", "metric", "round", "design", "recipe")}))


def resumable(prior: Mapping | None, record: Mapping) -> dict:
    """The finished units of ``prior`` (an earlier run's file, or None) that ``record``'s run may
    keep: ``{"none": ..., "42": ...}``, each as that run stored it. Raises ``ConfigError`` naming
    the first setting that differs, since mixing them would judge two designs as one."""
    from condenser_lite.utils.errors import ConfigError

    if not prior:
        return {}
    old, new = _key(prior), _key(record)
    for k in new:
        if old[k] != new[k]:
            raise ConfigError(f"{k} differs from the run that wrote the file ({old[k]!r} there, {new[k]!r} now); "
                              "give another --out, or delete the file to start again")
    return dict(prior.get("units", {}))


def run(data_dir: str | None, out: Path, command: str, prior: Mapping | None = None) -> dict:
    """Every stage and fine-tuning of the comparison, then the rule's reading where all are in.
    The unit is one arm's work that needs no checkpoint after it: ``none``'s fine-tunings, or one
    pre-training seed's two stages and their fine-tunings. ``out`` is written after every unit with
    who ran it, and a second call (``prior``, that file) keeps the finished units: the study
    resumes across machines with nothing but the file. Stages and fine-tunings are also cached."""
    import dataclasses
    import tempfile

    from condenser_lite.reproduction.evidence.results import git, git_state, machine, now
    from condenser_lite.reproduction.runs.arms import finetune_arm
    from condenser_lite.reproduction.runs.tasks import load_task
    from condenser_lite.reproduction.evidence.results import study_provenance
    from condenser_lite.training.pretraining import pretrain
    from condenser_lite.utils.devices import load_average
    from condenser_lite.utils.loading import SHIPPED_MODEL, shipped_model

    started, t0, load_start = now(), time.perf_counter(), load_average()
    model, preset = shipped_model(), finetune_preset()
    task = load_task(preset, data_dir)
    record = {"study": "real-model", "model": SHIPPED_MODEL, "metric": METRIC, "round": ROUND,
              "design": {"pretrain_seeds": PRETRAIN_SEEDS, "finetune_seeds": FINETUNE_SEEDS, "none_seeds": NONE_SEEDS,
                         "pooling": POOLING, "stage": STAGE, "control": CONTROL},
              "recipe": dataclasses.asdict(preset.finetune)}
    record["units"] = resumable(prior, record)
    if record["units"]:
        print(f"resuming: {', '.join(record['units'])} already in {out}", flush=True)

    def save() -> None:
        in_history = git("merge-base", "--is-ancestor", RULE_COMMIT, "HEAD") is not None
        rule = {"commit": RULE_COMMIT, "in_history": in_history}
        record["provenance"] = study_provenance(out, command, started, t0, load_start, before_versions={"rule": rule})
        out.write_text(json.dumps(record, indent=1) + "\n")

    def finish(unit: str, content: dict, unit_t0: float) -> None:
        state = git_state(exclude=out)
        record["units"][unit] = {**content, "ran": {"commit": state.get("commit"), "dirty": state.get("dirty"),
                                                    "finished": now(), "machine": machine(load_start),
                                                    "wall_seconds": round(time.perf_counter() - unit_t0, 1)}}
        save()

    def finetune(arm: str, checkpoint: str, seed: int) -> dict:
        r1 = finetune_arm(f"real-{arm}", checkpoint, task, preset, seed=seed, round_number=1)
        r2 = finetune_arm(f"real-{arm}", checkpoint, task, preset, seed=seed, round_number=2, round1=r1)
        return {"round1": r1["metrics"], "round2": r2["metrics"], "steps": [r1["steps"], r2["steps"]],
                "seconds": [r1["wall_time"]["total"], r2["wall_time"]["total"]]}

    if "none" not in record["units"]:
        t = time.perf_counter()
        finish("none", {"finetunes": {str(s): finetune("none", model, s) for s in NONE_SEEDS}}, t)
    for seed in PRETRAIN_SEEDS:
        if str(seed) in record["units"]:
            continue
        t = time.perf_counter()
        co_cfg = stage_configs(model, seed)["cocondenser"]
        co = pretrain(co_cfg, data_dir=data_dir)
        with tempfile.TemporaryDirectory() as probe:  # the control's FLOPs per update, from two updates
            per_mlm = _per_update_flops(pretrain(stage_configs(model, seed)["mlm"], output_dir=probe, data_dir=data_dir))
        updates = control_steps(co_cfg.max_steps, _per_update_flops(co), per_mlm)
        mlm = pretrain(stage_configs(model, seed, updates)["mlm"], data_dir=data_dir)
        finish(str(seed), {arm: {"stage": json.loads((Path(folder) / "pretrain_config.json").read_text())["compute"],
                                 "finetunes": {str(f): finetune(arm, str(folder), f) for f in FINETUNE_SEEDS}}
                           for arm, folder in (("cocondenser", co), ("mlm", mlm))}, t)
    record["judged"] = judge(values(record))
    save()
    return record


def values(record: Mapping) -> dict:
    """``judge``'s input from a finished file's units: the rule's metric after the rule's round."""
    units = record["units"]
    return {"none": {s: r[ROUND][METRIC] for s, r in units["none"]["finetunes"].items()},
            **{arm: {seed: [r[ROUND][METRIC] for r in units[seed][arm]["finetunes"].values()]
                     for seed in units if seed != "none"} for arm in ("cocondenser", "mlm")}}


def main(argv: list[str] | None = None) -> None:
    """The comparison's command line (``python -m condenser_lite real-model``). Chapter 13."""
    import argparse
    import shlex
    import sys

    from condenser_lite.reproduction.evidence.results import check_out

    ap = argparse.ArgumentParser(prog="python -m condenser_lite real-model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "results" / "real_model.json"))
    ap.add_argument("--data-dir", default=None, help="data mirror (default: $CONDENSER_LITE_DATA or the Hub)")
    ap.add_argument("--dry-run", action="store_true", help="time the two stages on this machine and stop")
    ap.add_argument("--debug", action="store_true", help="show the traceback of a known error")
    a = ap.parse_args(sys.argv[1:] if argv is None else list(argv))
    out = Path(a.out)
    prior = check_out(out, "real-model")  # before any work: another file stays as it is
    if a.dry_run:
        from condenser_lite.reproduction.runs.estimate import estimate_stage, format_estimate
        from condenser_lite.utils.loading import shipped_model

        for cfg in stage_configs(shipped_model(), PRETRAIN_SEEDS[0], 1075).values():
            print(format_estimate(estimate_stage(cfg, a.data_dir)), flush=True)
        n = runs_per_arm()
        print(f"then {sum(n.values())} two-round fine-tunings ({n}), each about 2 x 202 updates", flush=True)
        return
    command = shlex.join(["python", "-m", "condenser_lite", "real-model", *(sys.argv[1:] if argv is None else argv)])
    run(a.data_dir, out, command, prior)
    print(f"wrote {out}")
