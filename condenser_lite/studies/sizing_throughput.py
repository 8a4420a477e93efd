"""The sizing study's cost measurements (``python -m condenser_lite sizing --only throughput``,
``--only precision``, ``--only parallel``; chapter 9, `notebooks/09_study.ipynb`).

* throughput: CPU cost of one MLM training step of our loop (``condenser.BertMLM``, masked-only
  logits, ``loop.train``) for precision (fp32 / bf16 autocast through oneDNN), attention kernel
  (sdpa / eager), dropout, ``torch.compile``, batch shape at equal tokens, one process with 2
  threads against two with 1, and the transformers ``Trainer`` with ``BertForMaskedLM`` +
  ``DataCollatorForLanguageModeling`` on the same blocks; plus a retrieval fine-tuning step and
  encoding throughput per candidate shape (to size the budget). Variants are interleaved and
  repeated; CPU seconds per step are the measure (robust to other load), wall seconds are kept too.
* precision: what bf16 autocast is worth on this CPU and what it costs on one without bf16 units:
  the recommended run's update (one thread) in fp32 and bf16, and the choice of
  ``mixed_precision="auto"`` (``devices.cpu_precision``), natively and under an emulated AVX2-only
  CPU, each in a process of its own (the variables are read when torch starts).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from condenser_lite.studies.sizing_runs import BASE, RECOMMENDED, Run, bert_config, build_model, full_blocks, study_data

EMULATIONS = {"native": {}, "emulated AVX2-only": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
THROUGHPUT_VARIANTS = {
    "fp32, sdpa, dropout 0.1 (tiny preset)": dict(precision="no", attn="sdpa", dropout=0.1),
    "bf16, sdpa, dropout 0.1": dict(precision="bf16", attn="sdpa", dropout=0.1),
    "bf16, eager, dropout 0.1": dict(precision="bf16", attn="eager", dropout=0.1),
    "fp32, eager, dropout 0": dict(precision="no", attn="eager", dropout=0.0),
    "bf16, eager, dropout 0": dict(precision="bf16", attn="eager", dropout=0.0),
}
THROUGHPUT_SHAPES = {
    "4L/128H, 32x64 (tiny)": BASE,
    "4L/256H, 32x64": BASE.replace(hidden=256),
    "6L/256H, 32x128": BASE.replace(layers=6, hidden=256, max_len=128),
}


def loop_cost(run: Run, steps: int, compile_: bool = False, threads: int = 1, batch_shape=None) -> dict:
    """CPU and wall seconds per step of ``loop.train`` for this run's model and recipe. Steps 3..N
    are timed (start-up, first-step allocation and compilation excluded); the compile time is
    the extra cost of the first two steps. Chapter 9."""
    import torch

    from condenser_lite.training.loop import TrainConfig, train

    torch.set_num_threads(threads)
    r = run if batch_shape is None else run.replace(batch=batch_shape[0], max_len=batch_shape[1])
    data = study_data(r.vocab, r.max_len)
    full = full_blocks(r.vocab, r.max_len)
    model = build_model(r.replace(init=None, method="mlm"), data["tokenizer"])
    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(max_steps=steps, batch_size=r.batch, lr=r.lr, mixed_precision=r.precision,
                          compile=compile_, seed=0)
        t0 = time.perf_counter()
        hist = train(model, full, cfg, output_dir=d, collate_fn=data["collator"], progress=False).history
        total_wall = time.perf_counter() - t0
    n = len(hist) - 2
    cpu = (hist[-1]["cpu"] - hist[1]["cpu"]) / n
    wall = (hist[-1]["elapsed"] - hist[1]["elapsed"]) / n
    first_two = hist[1]["cpu"]
    return {"cpu_per_step": cpu, "wall_per_step": wall, "tokens_per_step": r.batch * r.max_len,
            "first_two_steps_cpu": first_two, "startup_overhead_cpu": max(0.0, first_two - 2 * cpu),
            "total_wall": total_wall}


def precision_child(steps: int) -> dict:
    """In a process started with an emulation's variables: the kernels torch uses, what
    ``"auto"`` picks and why, and the recommended run's update cost in fp32 and in bf16. Chapter 9."""
    import torch

    from condenser_lite.utils.devices import cpu_precision

    out = {"capability": torch.backends.cpu.get_cpu_capability(), "auto": cpu_precision().to_dict()}
    for precision in ("no", "bf16"):
        out["fp32" if precision == "no" else "bf16"] = loop_cost(RECOMMENDED.replace(precision=precision), steps)
    return out


def precision_costs(steps: int) -> dict:
    """``precision_child`` natively and under the emulated AVX2-only CPU (part ``precision``). Chapter 9."""
    import condenser_lite

    package_root = str(Path(condenser_lite.__file__).resolve().parents[1])
    out = {}
    for name, env in EMULATIONS.items():
        child_env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                                                         "CONDENSER_LITE_CPU_BF16",
                                                                         "_CONDENSER_LITE_CPU_PRECISION")}
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, child_env.get("PYTHONPATH")]))
        run = subprocess.run([sys.executable, "-m", "condenser_lite", "sizing", "--precision-child", str(steps)],
                             env={**child_env, **env}, capture_output=True, text=True, check=True)
        out[name] = {"environment": env, **json.loads(run.stdout.strip().splitlines()[-1])}
        r = out[name]
        print(f"[precision] {name}: kernels {r['capability']}, auto -> {'bf16' if r['auto']['bf16'] else 'fp32'}; "
              f"fp32 {r['fp32']['cpu_per_step']:.3f} s/update, bf16 {r['bf16']['cpu_per_step']:.3f} "
              f"({r['fp32']['cpu_per_step'] / r['bf16']['cpu_per_step']:.2f}x)", flush=True)
    return out


def hf_trainer_cost(run: Run, steps: int, bf16: bool = False) -> dict:
    """The baseline most users reach for: ``BertForMaskedLM`` (logits at every position) with the
    transformers ``Trainer`` and ``DataCollatorForLanguageModeling``, on the same full-length
    blocks. Chapter 9."""
    import torch
    from transformers import (
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    torch.set_num_threads(1)
    data = study_data(run.vocab, run.max_len)
    full = full_blocks(run.vocab, run.max_len)
    stamps: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append((time.process_time(), time.perf_counter()))

    torch.manual_seed(0)
    model = BertForMaskedLM(bert_config(run, data["tokenizer"]))
    with tempfile.TemporaryDirectory() as d:
        args = TrainingArguments(output_dir=d, max_steps=steps, per_device_train_batch_size=run.batch,
                                 learning_rate=run.lr, use_cpu=True, bf16=bf16, report_to=[],
                                 logging_strategy="no", save_strategy="no", disable_tqdm=True,
                                 dataloader_num_workers=0)
        collator = DataCollatorForLanguageModeling(data["tokenizer"], mlm_probability=0.15)
        Trainer(model=model, args=args, train_dataset=full, data_collator=collator, callbacks=[Clock()]).train()
    n = len(stamps) - 2
    return {"cpu_per_step": (stamps[-1][0] - stamps[1][0]) / n, "wall_per_step": (stamps[-1][1] - stamps[1][1]) / n,
            "tokens_per_step": run.batch * run.max_len}


def finetune_costs(run: Run, reps: int = 6) -> dict:
    """Retrieval fine-tuning step (8 queries x n passages) and passage encoding, one thread, fp32
    vs bf16. Chapter 9."""
    import torch
    from transformers import BertModel

    from condenser_lite.retrieval.biencoder import BiEncoder

    torch.set_num_threads(1)
    config = bert_config(run.replace(max_len=128), study_data(run.vocab, 64)["tokenizer"])
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1  # fine-tuning keeps BERT's dropout
    out = {}
    for precision in ("no", "bf16"):
        torch.manual_seed(0)
        enc = BertModel(config, add_pooling_layer=False)
        enc.set_attn_implementation(run.attn)
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
        for n_passages in (2, 4):
            for p_len in (64, 128):
                model = BiEncoder(enc, train_n_passages=n_passages)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                q = torch.randint(5, config.vocab_size, (8, 48))
                p = torch.randint(5, config.vocab_size, (8 * n_passages, p_len))

                def step():
                    with ctx():
                        loss = model(q, torch.ones_like(q), p, torch.ones_like(p)).loss
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad()

                step()
                c0 = time.process_time()
                for _ in range(reps):
                    step()
                out[f"ft_step_{precision}_8x{n_passages}_P{p_len}"] = round((time.process_time() - c0) / reps, 4)
        enc.eval()
        for p_len in (64, 128):
            x = torch.randint(5, config.vocab_size, (256, p_len))
            with torch.no_grad(), ctx():
                enc(input_ids=x, attention_mask=torch.ones_like(x))
                c0 = time.process_time()
                for _ in range(3):
                    enc(input_ids=x, attention_mask=torch.ones_like(x))
            out[f"encode_{precision}_P{p_len}_per_s"] = round(3 * 256 / (time.process_time() - c0), 1)
    return out


def parallel_cost(run: Run, steps: int) -> dict:
    """Aggregate tokens/s: one process with 2 threads, against two 1-thread processes at once. Chapter 9."""
    one = loop_cost(run, steps, threads=2)
    with mp.get_context("spawn").Pool(2) as pool:
        t0 = time.perf_counter()
        two = pool.starmap(loop_cost, [(run, steps), (run, steps)])
        wall = time.perf_counter() - t0
    tok = run.batch * run.max_len
    return {"one_process_2_threads_tokens_per_s": tok / one["wall_per_step"],
            "two_processes_1_thread_tokens_per_s": sum(tok / t["wall_per_step"] for t in two),
            "two_processes_wall_per_step": [t["wall_per_step"] for t in two],
            "one_process_wall_per_step": one["wall_per_step"], "two_processes_total_wall": wall}


def parallel(reps: int, steps: int) -> dict:
    """Part ``parallel``: ``parallel_cost`` repeated, medians, and the load around it. Chapter 9."""
    loads = [os.getloadavg()[0]]
    rows = [parallel_cost(BASE.replace(dropout=0.0), 3 * steps) for _ in range(reps)]
    loads.append(os.getloadavg()[0])
    keys = ("one_process_2_threads_tokens_per_s", "two_processes_1_thread_tokens_per_s")
    return {"4L/128H, 32x64, bf16, eager, dropout 0": {
        **{k: sorted(r[k] for r in rows)[len(rows) // 2] for k in keys},
        "repetitions": rows, "loadavg_before_after": loads, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}}


def throughput(reps: int, steps: int) -> dict:
    """Part ``throughput``: every lever, shape, the compiled loop, batch shapes, the transformers
    ``Trainer`` and the fine-tuning costs, interleaved ``reps`` times. Chapter 9."""
    out: dict = {"variants": {}, "compile": {}, "batch_shape": {}, "trainer": {}, "parallel": {}, "finetune": {}}
    for shape, run in THROUGHPUT_SHAPES.items():
        out["variants"][shape] = interleaved(reps, {v: partial(loop_cost, run.replace(**change), steps)
                                                    for v, change in THROUGHPUT_VARIANTS.items()})
        print(f"[throughput] {shape}: " + ", ".join(f"{v}: {s['cpu_per_step']:.3f}"
                                                    for v, s in out["variants"][shape].items()), flush=True)
    best = dict(precision="bf16", attn="eager", dropout=0.0)
    fast, plain = BASE.replace(**best), BASE.replace(precision="no", attn="sdpa")
    out["compile"]["4L/128H, 32x64, bf16, eager, dropout 0"] = interleaved(reps, {
        "eager": partial(loop_cost, fast, steps), "compiled": partial(loop_cost, fast, steps, compile_=True)})
    shapes = {"32x64": (32, 64), "64x32": (64, 32), "16x128": (16, 128)}
    out["batch_shape"]["4L/128H, bf16, eager, dropout 0 (2,048 tokens per step)"] = interleaved(
        reps, {k: partial(loop_cost, fast, steps, batch_shape=bs) for k, bs in shapes.items()})
    out["trainer"]["4L/128H, 32x64"] = interleaved(reps, {
        "Trainer fp32": partial(hf_trainer_cost, plain, steps),
        "Trainer bf16": partial(hf_trainer_cost, plain, steps, bf16=True),
        "ours fp32, sdpa, dropout 0.1": partial(loop_cost, plain, steps),
        "ours bf16, eager, dropout 0": partial(loop_cost, fast, steps)})
    print("[throughput] trainer: " + json.dumps({k: round(v["cpu_per_step"], 3)
                                                 for k, v in out["trainer"]["4L/128H, 32x64"].items()}), flush=True)
    out["parallel"]["4L/128H, 32x64, bf16, eager, dropout 0"] = parallel_cost(fast, 3 * steps)
    for shape, run in THROUGHPUT_SHAPES.items():
        out["finetune"][shape.split(",")[0]] = finetune_costs(run.replace(**best))
    return out


def interleaved(reps: int, measures: dict) -> dict:
    """Each of ``measures`` (name: a call that measures once) once per round for ``reps`` rounds,
    so that a change of load spreads over all of them, then ``summarise``d. Chapter 9."""
    rows: dict[str, list[dict]] = {name: [] for name in measures}
    for _ in range(reps):
        for name, measure in measures.items():
            rows[name].append(measure())
    return {name: summarise(r) for name, r in rows.items()}


def summarise(rows: list[dict]) -> dict:
    """Medians of repeated measurements, every repetition's CPU seconds kept. Chapter 9."""
    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
    s = {k: round(statistics.median(r[k] for r in rows), 4) for k in keys}
    s["cpu_per_step_all"] = [round(r["cpu_per_step"], 4) for r in rows]
    s["tokens_per_cpu_s"] = round(rows[0]["tokens_per_step"] / s["cpu_per_step"], 1) if "tokens_per_step" in rows[0] else None
    return s
