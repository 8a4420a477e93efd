"""The sizing study (``python -m condenser_lite sizing``, ``condenser_lite/studies/sizing*.py``) on
the library's FLOPs, provenance, cache and model builder: the numbers it wrote and the keys it finds
its runs by (results/study.json) still come out of its settings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from condenser_lite.studies import sizing, sizing_runs, sizing_throughput

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
STUDY = json.loads((ROOT / "results" / "study.json").read_text())
RUN_PARTS = ("sweep", "long", "condenser")


def old_flops_per_token(config, max_len, head_layers=0, mlm_passes=1, mask_rate=0.15):
    """The FLOPs formula the committed estimates were made with (verbatim)."""
    H, V, F = config.hidden_size, config.vocab_size, config.intermediate_size
    per_layer = 2 * (4 * H * H + 2 * H * F) + 4 * max_len * H
    layers = config.num_hidden_layers + head_layers
    mlm = mlm_passes * mask_rate * (2 * H * H + 2 * H * V)
    return 3 * (layers * per_layer + mlm)


def old_non_embedding_params(config):
    H, L = config.hidden_size, config.num_hidden_layers
    return L * (4 * H * H + 2 * H * config.intermediate_size)


def config_of(run):
    """The model config the study builds for `run` (a tokenizer of exactly `run.vocab` pieces)."""
    return sizing_runs.bert_config(run, Tokenizer(run.vocab))


class Tokenizer:  # what bert_config reads of one
    pad_token_id = 0

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def study_runs():
    """Every shape and method the study trains: the extended sweep, the long run, the Condenser
    splits and coCondenser on them, and the throughput shapes."""
    runs = [*sizing_runs.sweep_runs(200.0, extended=True).values(), sizing_runs.RECOMMENDED,
            *sizing_throughput.THROUGHPUT_SHAPES.values()]
    for r in list(runs):
        for s, h in [(1, 1), (1, 2), (2, 1), (2, 2), (3, 2)]:
            if s < r.layers:
                runs += [r.replace(method=m, init="x", skip_from=s, n_head_layers=h) for m in ("condenser", "cocondenser")]
    return runs


def test_flops_and_params_equal_the_committed_formulas():
    checked = 0
    for run in study_runs():
        config = config_of(run)
        head = run.n_head_layers if run.method != "mlm" else 0
        old_fpt = old_flops_per_token(config, run.max_len, head_layers=head, mlm_passes=1 if run.method == "mlm" else 2)
        new_fpt = sizing_runs.flops_per_token(config, run.method, run.max_len, head_layers=run.n_head_layers)
        assert new_fpt == old_fpt, run
        tokens_per_step = (2 if run.method == "cocondenser" else 1) * run.batch * run.max_len
        for steps in (1, 20, 411, 635, 1064, 1620, 9457, 12000, 54321):
            assert float(new_fpt * steps * tokens_per_step) == float(old_fpt * steps * tokens_per_step)
        assert sizing_runs.non_embedding_params(config) == old_non_embedding_params(config)
        checked += 1
    assert checked > 50


def test_committed_runs_keep_their_numbers_and_cache_keys():
    """Every run in results/study.json: the FLOPs estimate and non-embedding parameters recomputed
    from its settings are the committed values, bit for bit, and its settings still hash to the key
    (and cache folder) it was stored under, so `--collect` finds it."""
    n = 0
    for part in RUN_PARTS:
        for name, r in STUDY[part].items():
            run = sizing_runs.Run(**r["run"])
            config = config_of(run)
            assert run.key() == r["key"], name
            assert sizing_runs.run_dir(part, run).name == f"{run.method}-{r['key']}"
            assert Path(r["checkpoint"]).parent.name == f"{run.method}-{r['key']}", name
            tokens_per_step = r["tokens"] // r["steps"]
            fpt = sizing_runs.flops_per_token(config, run.method, run.max_len, head_layers=run.n_head_layers)
            assert float(fpt * r["steps"] * tokens_per_step) == r["flops_estimate"], name
            assert sizing_runs.non_embedding_params(config) == r["non_embedding_params"], name
            n += 1
    assert n >= 10


def test_run_one_reads_a_finished_run_back(tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path))
    run = sizing_runs.BASE.replace(cpu_budget=1.0)
    done = sizing_runs.run_dir("sweep", run) / "result.json"
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps({"steps": 3, "key": run.key()}, indent=1))  # as a finished run left it
    assert sizing_runs.run_one("sweep", run) == {"steps": 3, "key": run.key()}  # no training: it would need the data


def test_provenance_keeps_the_fields_the_study_page_reads():
    import torch

    m = sizing.machine()
    assert set(m) == {"cpu_model", "cores", "platform", "matrix_flags", "memory_gb"}
    assert isinstance(m["cpu_model"], str) and m["cores"] >= 1 and isinstance(m["matrix_flags"], list)
    v = sizing.versions()
    assert list(v) == ["python", "torch", "transformers", "tokenizers", "datasets", "accelerate", "onednn"]
    assert v["torch"] == torch.__version__
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", sizing.git_commit())


def test_every_committed_run_keeps_its_cache_key():
    """The key of every run in results/study.json, recomputed from its recorded settings, is the key
    it was stored under (so its cache folder is found); a changed setting gives another key."""
    keys = [(r["run"], r["key"]) for part in RUN_PARTS for r in STUDY[part].values()]
    for settings, key in keys:
        assert sizing_runs.Run(**settings).key() == key, settings
    assert len({k for _, k in keys}) == len(keys) >= 10
    run = sizing_runs.Run(**keys[0][0])
    assert run.replace(seed=run.seed + 1).key() != keys[0][1]


def test_the_study_defines_the_committed_runs():
    """The sweep, the long run and the Condenser splits the study defines (its base run read from
    the ``tiny`` preset) are the runs results/study.json holds, key for key."""
    sweep = sizing_runs.sweep_runs(200.0)
    assert {n: r.key() for n, r in sweep.items()} == {n: r["key"] for n, r in STUDY["sweep"].items()}
    (long,) = STUDY["long"].values()
    assert sizing_runs.RECOMMENDED.replace(cpu_budget=1500.0).key() == long["key"]
    runs, control = sizing_runs.condenser_runs(long, 300.0)
    made = {**{n: r.key() for n, r in runs.items()}, "4L/128H: control, MLM continuation (same steps)": control.key()}
    held = {n: r["key"] for n, r in STUDY["condenser"].items()}
    assert {n: made[n] for n in held} == held


def test_a_run_is_the_librarys_stage():
    """A run builds through ``pretraining.build_model``: the model and config the study's FLOPs and
    baselines read agree with it."""
    from condenser_lite.modeling.condenser import BertMLM

    run = sizing_runs.BASE.replace(layers=2, hidden=32, heads=2, vocab=100, max_len=16, dropout=0.0)
    tok = Tokenizer(run.vocab)
    model = sizing_runs.build_model(run, tok)
    assert isinstance(model, BertMLM)
    names = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "max_position_embeddings", "pad_token_id", "hidden_dropout_prob", "attention_probs_dropout_prob")
    config = sizing_runs.bert_config(run, tok)
    assert {n: getattr(model.config, n) for n in names} == {n: getattr(config, n) for n in names}
    assert (config.hidden_size, config.intermediate_size, config.max_position_embeddings) == (32, 128, 16)
    stage = run.replace(method="condenser", init="x", skip_from=1, n_head_layers=1).stage()
    assert (stage.method, stage.init, stage.model.skip_from, stage.model.n_head_layers) == ("condenser", "x", 1, 1)
    assert stage.model.intermediate_size == 4 * run.hidden and stage.model.attn_implementation == "eager"



def test_a_run_starts_from_the_weights_its_key_stands_for():
    """The committed runs' keys stand for weights drawn from ``torch.manual_seed(run.seed)``; a run
    built anew must start there (the stage builder's own step-0 draw would give other weights
    under the same key)."""
    import torch

    from condenser_lite.modeling.condenser import BertMLM

    run = sizing_runs.BASE.replace(layers=2, hidden=32, heads=2, vocab=100, max_len=16, dropout=0.0, seed=5)
    tok = Tokenizer(run.vocab)
    built = sizing_runs.build_model(run, tok).state_dict()
    torch.manual_seed(run.seed)
    by_hand = BertMLM.from_config(sizing_runs.bert_config(run, tok)).state_dict()
    assert built.keys() == by_hand.keys()
    assert all(torch.equal(built[k], by_hand[k]) for k in built)

def test_the_study_is_a_command():
    run = subprocess.run([sys.executable, "-m", "condenser_lite", "sizing", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "usage: python -m condenser_lite sizing" in run.stdout, run.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-m", "condenser_lite", "sizing", "--only", "long", "--collect",
                          "--long", "{bad", "--out", "/nonexistent/x.json"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "error: --long" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr[-2000:]


def test_the_choices_table_reads_each_choice_with_its_uncertainty():
    """Chapter 9's opening table: one row per choice, every speed ratio inside the range its
    repetitions allow, and no uncertainty claimed for a comparison trained once."""
    from condenser_book import study_report

    assert study_report.ratio_range([2.0, 2.2], [1.0, 1.1]) == pytest.approx((2.0 / 1.1, 2.2))
    with pytest.raises(ValueError, match="repetition"):
        study_report.ratio_range([], [1.0])
    table = study_report.choices(STUDY)
    assert list(table.index) == ["precision", "attention kernel", "training loop", "two cores",
                                 "dropout in pre-training", "model shape", "learning rate and batch",
                                 "Condenser split"]
    for choice, row in table.iterrows():
        ranged = re.match(r"([\d.]+)x to ([\d.]+)x over 3 repetitions", row["uncertainty"])
        if ranged:  # the point estimate (a ratio of medians) lies inside its range
            point = float(re.search(r"([\d.]+)x", row["measured"]).group(1))
            assert float(ranged[1]) <= point <= float(ranged[2]), choice
    assert table.loc["dropout in pre-training", "uncertainty"] == study_report.ONE_RUN
    assert "skip_from=1, n_head_layers=1" in table.loc["Condenser split", "chosen"]
    assert "within twice its measured noise" in table.loc["Condenser split", "uncertainty"]


def test_each_throughput_row_measures_the_settings_its_name_says(monkeypatch):
    """The throughput part's rows are named by their precision, attention and dropout; each must
    time a run with those settings (the bf16 rows beside the Trainer once timed the fp32 run)."""
    seen: dict[str, tuple] = {}

    def cost(run, steps, *args, **kw):
        return {"cpu_per_step": 0.1, "run": (run.precision, run.attn, run.dropout)}

    monkeypatch.setattr(sizing_throughput, "loop_cost", cost)
    monkeypatch.setattr(sizing_throughput, "hf_trainer_cost", cost)
    monkeypatch.setattr(sizing_throughput, "parallel_cost", lambda run, steps: {"run": (run.precision, run.attn,
                                                                                        run.dropout)})
    monkeypatch.setattr(sizing_throughput, "finetune_costs", lambda run: {})
    monkeypatch.setattr(sizing_throughput, "summarise", lambda rows: rows[0])
    out = sizing_throughput.throughput(1, 1)
    for group in ("compile", "batch_shape", "trainer"):
        for section, rows in out[group].items():
            for name, row in rows.items():
                seen[f"{section} / {name}"] = row["run"]
    seen["parallel"] = out["parallel"]["4L/128H, 32x64, bf16, eager, dropout 0"]["run"]
    for name, (precision, attn, dropout) in seen.items():
        words = name.replace("Trainer bf16", "").replace("Trainer fp32", "")
        if "bf16" in words:
            assert (precision, attn, dropout) == ("bf16", "eager", 0.0), name
        if "fp32" in words:
            assert (precision, attn, dropout) == ("no", "sdpa", 0.1), name
