"""Does coCondenser's corpus-aware pre-training help a real retriever? The comparison's design and
its rule, fixed here before any of its runs (chapter 4, "A real pre-trained retriever").

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

from collections.abc import Mapping, Sequence

from scipy import stats as scipy_stats

from condenser_lite.reproduction.rules import ALPHA_ONE_SIDED, NOT_DETECTABLE, NOT_SIGNIFICANT, model_means, unit_test

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


def control_steps(stage_steps: int, stage_flops: float, control_flops: float) -> int:
    """The MLM control's updates: as many as spend the coCondenser stage's FLOPs (``stage_flops``
    and ``control_flops`` per update, from the library's accounting of each stage's first
    updates). Chapter 4."""
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
    the two, and ``"family"``: the number of tests and what it means. Chapter 4."""
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
    """Fine-tunings (two rounds each) the comparison trains, per arm. Chapter 4."""
    return {"none": len(NONE_SEEDS), "cocondenser": len(PRETRAIN_SEEDS) * len(FINETUNE_SEEDS),
            "mlm": len(PRETRAIN_SEEDS) * len(FINETUNE_SEEDS)}


def seeds_of(arm: str) -> Sequence[int]:
    """The pre-training seeds of ``arm`` (none for ``none``). Chapter 4."""
    return () if arm == "none" else PRETRAIN_SEEDS
