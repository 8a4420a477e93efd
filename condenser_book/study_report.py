"""What the sizing study chose, and on what evidence: the table that opens chapter 9
("Choosing the scaled-down world", ``notebooks/09_study.md``), read from ``results/study.json``.

Each row is one choice of the ``small`` preset that the study measured: the alternatives it
compared, what it measured, how much that measurement can be trusted and what was chosen.
Throughput was timed three times per variant, so a speed ratio carries its least and most over
all pairings of the repetitions (``ratio_range``). The held-out losses come from one training
run per setting, so their differences carry no measured noise, and the table says so.

Example::

    >>> import json
    >>> from condenser_lite.reproduction.evidence.results import results_dir
    >>> study = json.loads((results_dir() / "study.json").read_text())  # doctest: +SKIP
    >>> choices(study)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TINY = "4L/128H, 32x64 (tiny)"
ONE_RUN = "one run each: no noise measured"


def ratio_range(slow: Sequence[float], fast: Sequence[float]) -> tuple[float, float]:
    """The speed-up of ``fast`` over ``slow`` (seconds per step, one entry per repetition) at
    its least and most over all pairings of their repetitions: the slowest fast repetition
    against the fastest slow one, and back.

    >>> ratio_range([2.0, 2.2], [1.0, 1.1])
    (1.8181818181818181, 2.2)
    """
    if not slow or not fast:
        raise ValueError("ratio_range needs at least one repetition of each variant")
    return min(slow) / max(fast), max(slow) / min(fast)


def _speedup(slow: Mapping, fast: Mapping) -> tuple[str, str]:
    """``("1.42x", "1.38x to 1.47x over 3 repetitions")`` from two variants' timings."""
    a, b = slow["cpu_per_step_all"], fast["cpu_per_step_all"]
    lo, hi = ratio_range(a, b)
    return (f"{slow['cpu_per_step'] / fast['cpu_per_step']:.2f}x faster",
            f"{lo:.2f}x to {hi:.2f}x over {min(len(a), len(b))} repetitions")


def _below(study: Mapping, name: str) -> float:
    return study["sweep"][name]["below_unigram"]


def _rows(study: Mapping) -> list[tuple[str, str, str, str, str]]:
    from condenser_lite.utils.devices import BF16_MIN_SPEEDUP

    tp = study["throughput"]
    variants = tp["variants"][TINY]
    trainer = tp["trainer"]["4L/128H, 32x64"]
    precision = study["precision"]
    native, emulated = precision["native"], precision["emulated AVX2-only"]
    par = tp["parallel"]["4L/128H, 32x64, bf16, eager, dropout 0"]
    one, two = ([1 / r[k] for r in par["repetitions"]]  # seconds per token, as ratio_range takes
                for k in ("one_process_2_threads_tokens_per_s", "two_processes_1_thread_tokens_per_s"))
    splits = [r for r in study["condenser"].values() if r["run"]["method"] == "condenser"]
    path = {r["run"]["skip_from"] + r["run"]["n_head_layers"]: r["final"]["eval_head_loss"] for r in splits}
    gap = max(abs(r["final"]["eval_swap_gap"]) for r in splits)
    gap_words = f"at most {gap:.4f}" if gap >= 1e-4 else "under 0.0001"
    within = all(abs(r["final"]["eval_swap_gap"]) <= 2 * r["final"]["eval_swap_noise"] + 1e-4 for r in splits)
    sdpa, eager = variants["bf16, sdpa, dropout 0.1"], variants["bf16, eager, dropout 0.1"]
    rival = min(("Trainer fp32", "Trainer bf16"), key=lambda k: trainer[k]["cpu_per_step"])  # its faster
    ours, ours_fp32 = trainer["ours bf16, eager, dropout 0"], trainer["ours fp32, sdpa, dropout 0.1"]
    n_bf16, e_bf16 = (r["fp32"]["cpu_per_step"] / r["bf16"]["cpu_per_step"] for r in (native, emulated))
    base = next(iter(study["sweep"]))  # round 1's base: 4 layers of 128, dropout 0.1
    ft_step = {k: v["ft_step_bf16_8x2_P64"] for k, v in tp["finetune"].items()}
    lo, hi = ratio_range(one, two)
    return [
        ("precision", "fp32 or bf16 autocast, on a 2-core CPU with bf16 units and emulating an AVX2-only one",
         f"bf16 {n_bf16:.1f}x faster per update with the units, {1 / e_bf16:.0f}x slower without",
         "one timing of 10 updates each",
         f'mixed_precision="auto": bf16 only where a test matrix product is at least {BF16_MIN_SPEEDUP:g}x faster'),
        ("attention kernel", "fused sdpa or plain (eager), in bf16", "eager " + _speedup(sdpa, eager)[0],
         _speedup(sdpa, eager)[1], "eager"),
        ("training loop", f"ours or the transformers Trainer (its faster, {rival.split()[1]})",
         f"ours {_speedup(trainer[rival], ours)[0]} with its levers; "
         f"{_speedup(trainer['Trainer fp32'], ours_fp32)[0]} like for like in fp32",
         _speedup(trainer[rival], ours)[1] + " (with its levers)",
         "ours (it computes logits at the masked positions only)"),
        ("two cores", "one process with 2 threads or two one-thread processes",
         f"two processes {par['two_processes_1_thread_tokens_per_s'] / par['one_process_2_threads_tokens_per_s']:.2f}x "
         "the tokens", f"{lo:.2f}x to {hi:.2f}x over {len(one)} repetitions", "one-thread jobs, two at a time"),
        ("dropout in pre-training", "0.1 or 0, 200 CPU s each",
         f"{_below(study, 'dropout 0'):.2f} against {_below(study, base):.2f} nats below the unigram entropy",
         ONE_RUN, "0 (none)"),
        ("model shape", "4 layers of 128, 4 of 256, 6 of 256, 200 CPU s each",
         f"{_below(study, base):.2f}, {_below(study, '4L/256H'):.2f} and {_below(study, '6L/256H'):.2f} "
         "nats below the unigram entropy", ONE_RUN,
         f"4 layers of 128: level with 4 of 256, whose fine-tuning step costs "
         f"{ft_step['4L/256H'] / ft_step['4L/128H']:.1f}x as much"),
        ("learning rate and batch", "peak 1e-3, 2e-3 or 4e-3; batch 32 or 128 (at 2e-3), 200 CPU s each",
         f"{_below(study, 'dropout 0'):.2f}, {_below(study, 'dropout 0 + lr 2e-3'):.2f} and "
         f"{_below(study, 'dropout 0 + lr 4e-3'):.2f} nats below the unigram entropy; batch 128: "
         f"{_below(study, 'dropout 0 + batch 128, lr 2e-3'):.2f}", ONE_RUN, "1e-3, batch 32"),
        ("Condenser split", "head paths of 2, 3 and 4 layers, 1,620 updates each",
         f"head MLM loss {path[2]:.2f} (path 2) against {path[4]:.2f} (path 4): the short path's task is "
         f"harder; in no split does the head use [CLS] (swap gap {gap_words} nats)",
         "one run each; the gap " + ("within" if within else "outside") + " twice its measured noise",
         "skip_from=1, n_head_layers=1 (path 2)"),
    ]


def choices(study: Mapping):
    """The table of the ``small`` preset's choices: per choice the alternatives compared, the
    measurement, its uncertainty and what was chosen (``results/study.json``). Chapter 9."""
    import pandas as pd

    rows = _rows(study)
    return pd.DataFrame([r[1:] for r in rows], columns=["compared", "measured", "uncertainty", "chosen"],
                        index=pd.Index([r[0] for r in rows], name="choice"))
