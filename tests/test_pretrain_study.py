"""benchmarks/pretrain_study.py on the library's FLOPs, provenance and cache: the numbers it writes
and the keys it finds its runs by are the ones it had with its own versions (results/study.json)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
STUDY = json.loads((ROOT / "results" / "study.json").read_text())
RUN_PARTS = ("sweep", "long", "condenser")

with warnings.catch_warnings():  # the script silences warnings when imported; keep that to it
    spec = importlib.util.spec_from_file_location("pretrain_study", ROOT / "benchmarks" / "pretrain_study.py")
    ps = sys.modules["pretrain_study"] = importlib.util.module_from_spec(spec)  # (dataclasses look it up)
    spec.loader.exec_module(ps)


def old_flops_per_token(config, max_len, head_layers=0, mlm_passes=1, mask_rate=0.15):
    """The script's own estimate before it used `accounting.stage_flops` (verbatim)."""
    H, V, F = config.hidden_size, config.vocab_size, config.intermediate_size
    per_layer = 2 * (4 * H * H + 2 * H * F) + 4 * max_len * H
    layers = config.num_hidden_layers + head_layers
    mlm = mlm_passes * mask_rate * (2 * H * H + 2 * H * V)
    return 3 * (layers * per_layer + mlm)


def old_non_embedding_params(config):
    H, L = config.hidden_size, config.num_hidden_layers
    return L * (4 * H * H + 2 * H * config.intermediate_size)


def config_of(run):
    """The model config the script builds for `run` (a tokenizer of exactly `run.vocab` pieces)."""
    return ps.bert_config(run, Tokenizer(run.vocab))


class Tokenizer:  # what bert_config reads of one
    pad_token_id = 0

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def study_runs():
    """Every shape and method the study trains: the extended sweep, the long run, the Condenser
    splits and coCondenser on them, and the throughput shapes."""
    runs = [*ps.sweep_runs(200.0, extended=True).values(), ps.RECOMMENDED, *ps.THROUGHPUT_SHAPES.values()]
    for r in list(runs):
        for s, h in [(1, 1), (1, 2), (2, 1), (2, 2), (3, 2)]:
            if s < r.layers:
                runs += [r.replace(method=m, init="x", skip_from=s, n_head_layers=h) for m in ("condenser", "cocondenser")]
    return runs


def test_flops_and_params_equal_the_scripts_own_formulas():
    checked = 0
    for run in study_runs():
        config = config_of(run)
        head = run.n_head_layers if run.method != "mlm" else 0
        old_fpt = old_flops_per_token(config, run.max_len, head_layers=head, mlm_passes=1 if run.method == "mlm" else 2)
        new_fpt = ps.flops_per_token(config, run.method, run.max_len, head_layers=run.n_head_layers)
        assert new_fpt == old_fpt, run
        tokens_per_step = (2 if run.method == "cocondenser" else 1) * run.batch * run.max_len
        for steps in (1, 20, 411, 635, 1064, 1620, 9457, 12000, 54321):
            assert float(new_fpt * steps * tokens_per_step) == float(old_fpt * steps * tokens_per_step)
        assert ps.non_embedding_params(config) == old_non_embedding_params(config)
        checked += 1
    assert checked > 50


def test_committed_runs_keep_their_numbers_and_cache_keys():
    """Every run in results/study.json: the FLOPs estimate and non-embedding parameters recomputed
    from its settings are the committed values, bit for bit, and its settings still hash to the key
    (and cache folder) it was stored under, so `--collect` finds it."""
    n = 0
    for part in RUN_PARTS:
        for name, r in STUDY[part].items():
            run = ps.Run(**r["run"])
            config = config_of(run)
            assert run.key() == r["key"], name
            assert ps._run_dir(part, run).name == f"{run.method}-{r['key']}"
            assert Path(r["checkpoint"]).parent.name == f"{run.method}-{r['key']}", name
            tokens_per_step = r["tokens"] // r["steps"]
            fpt = ps.flops_per_token(config, run.method, run.max_len, head_layers=run.n_head_layers)
            assert float(fpt * r["steps"] * tokens_per_step) == r["flops_estimate"], name
            assert ps.non_embedding_params(config) == r["non_embedding_params"], name
            n += 1
    assert n >= 10


def test_run_one_reads_a_finished_run_back(tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path))
    run = ps.BASE.replace(cpu_budget=1.0)
    done = ps._run_dir("sweep", run) / "result.json"
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps({"steps": 3, "key": run.key()}, indent=1))  # as the script wrote it before
    assert ps.run_one("sweep", run) == {"steps": 3, "key": run.key()}  # no training: it would need the data


def test_provenance_keeps_the_fields_the_study_page_reads():
    import torch

    m = ps.machine()
    assert set(m) == {"cpu_model", "cores", "platform", "matrix_flags", "memory_gb"}
    assert isinstance(m["cpu_model"], str) and m["cores"] >= 1 and isinstance(m["matrix_flags"], list)
    v = ps.versions()
    assert list(v) == ["python", "torch", "transformers", "tokenizers", "datasets", "accelerate", "onednn"]
    assert v["torch"] == torch.__version__
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", ps.git_commit())


def test_every_committed_run_keeps_its_cache_key():
    """The key of every run in results/study.json, recomputed from its recorded settings, is the key
    it was stored under (so its cache folder is found); a changed setting gives another key."""
    keys = [(r["run"], r["key"]) for part in RUN_PARTS for r in STUDY[part].values()]
    for settings, key in keys:
        assert ps.Run(**settings).key() == key, settings
    assert len({k for _, k in keys}) == len(keys) >= 10
    run = ps.Run(**keys[0][0])
    assert run.replace(seed=run.seed + 1).key() != keys[0][1]
