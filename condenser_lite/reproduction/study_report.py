"""What the sizing study chose, and on what evidence: the table that opens chapter 9
("Choosing the scaled-down world", ``notebooks/09_study.md``), read from ``results/study.json``.

Each row is one choice of the ``small`` preset: the alternatives the study compared, what it
measured, how much that measurement can be trusted and what was chosen. Throughput was timed
three times per variant, so a speed ratio carries the range its repetitions allow. The held-out
losses come from one training run per setting, so their differences carry no measured noise,
and the table says so.

Example::

    >>> from condenser_lite.reproduction.results import results_dir
    >>> study = json.loads((results_dir() / "study.json").read_text())  # doctest: +SKIP
    >>> choices(study)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TINY = "4L/128H, 32x64 (tiny)"
ONE_RUN = "one run each: no noise measured"


def ratio_range(slow: Sequence[float], fast: Sequence[float]) -> tuple[float, float]:
    """The speed-up of ``fast`` over ``slow`` (seconds per step, one entry per repetition) at
    its least and most: the slowest fast repetition against the fastest slow one, and back.

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
    tp = study["throughput"]
    variants = tp["variants"][TINY]
    trainer = tp["trainer"]["4L/128H, 32x64"]
    native, emulated = study["precision"]["native"], study["precision"]["emulated AVX2-only"]
    par = tp["parallel"]["4L/128H, 32x64, bf16, eager, dropout 0"]
    twos = [r["two_processes_1_thread_tokens_per_s"] / r["one_process_2_threads_tokens_per_s"]
            for r in par["repetitions"]]
    splits = {r["run"]["skip_from"] + r["run"]["n_head_layers"]: r["final"]["eval_head_loss"]
              for r in study["condenser"].values() if r["run"]["method"] == "condenser"}
    sdpa, eager = variants["bf16, sdpa, dropout 0.1"], variants["bf16, eager, dropout 0.1"]
    ours = trainer["ours bf16, eager, dropout 0"]
    rival = min(("Trainer fp32", "Trainer bf16"), key=lambda k: trainer[k]["cpu_per_step"])  # its faster
    n_bf16, e_bf16 = (r["fp32"]["cpu_per_step"] / r["bf16"]["cpu_per_step"] for r in (native, emulated))
    base = next(iter(study["sweep"]))  # round 1's base: 4 layers of 128, dropout 0.1
    ft = tp["finetune"]
    encode = ft["4L/128H"]["encode_bf16_P64_per_s"] / ft["4L/256H"]["encode_bf16_P64_per_s"]
    return [
        ("precision", "fp32 or bf16 autocast, on a CPU with bf16 units and on an emulated AVX2-only one",
         f"bf16 {n_bf16:.1f}x faster with the units, {1 / e_bf16:.0f}x slower without", "one timing each",
         'mixed_precision="auto": bf16 only where it times faster'),
        ("attention kernel", "fused sdpa or plain (eager), in bf16", "eager " + _speedup(sdpa, eager)[0],
         _speedup(sdpa, eager)[1], "eager"),
        ("training loop", f"ours or the transformers Trainer (its faster, {rival.split()[1]})",
         "ours " + _speedup(trainer[rival], ours)[0], _speedup(trainer[rival], ours)[1],
         "ours (logits at masked positions only)"),
        ("two cores", "one process with 2 threads or two one-thread processes",
         f"two processes {par['two_processes_1_thread_tokens_per_s'] / par['one_process_2_threads_tokens_per_s']:.2f}x "
         "the tokens", f"{min(twos):.2f}x to {max(twos):.2f}x over {len(twos)} repetitions",
         "one-thread jobs, two at a time"),
        ("dropout in pre-training", "0.1 or 0, 200 CPU s each",
         f"{_below(study, 'dropout 0'):.2f} against {_below(study, base):.2f} nats below the unigram entropy",
         ONE_RUN, "0 (none)"),
        ("model shape", "4 layers of 128, 4 of 256, 6 of 256, 200 CPU s each",
         f"{_below(study, base):.2f}, {_below(study, '4L/256H'):.2f} and {_below(study, '6L/256H'):.2f} "
         "nats below the unigram entropy", ONE_RUN,
         f"4 layers of 128: level with 4 of 256, and it encodes {encode:.1f}x as fast"),
        ("Condenser split", "head paths of 2, 3 and 4 layers, 1,620 updates each",
         f"head MLM loss {splits[2]:.2f} (path 2) against {splits[4]:.2f} (path 4): the short path's task "
         "is harder", ONE_RUN,
         "skip_from=1, n_head_layers=1 (path 2)"),
    ]


def choices(study: Mapping):
    """The table of the ``small`` preset's choices: per choice the alternatives compared, the
    measurement, its uncertainty and what was chosen (``results/study.json``). Chapter 9."""
    import pandas as pd

    rows = _rows(study)
    return pd.DataFrame([r[1:] for r in rows], columns=["compared", "measured", "uncertainty", "chosen"],
                        index=pd.Index([r[0] for r in rows], name="choice"))
