"""The pre-training recipes chain, cache and resume (tiny budgets on the local data mirror): a
stage's folder and cache key follow its settings, its --init's weights and its data, and identical
commands give identical weights, trained once when they run at the same time."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from command_line import cli, one_error_line
from locations import MIRROR, ROOT
from safetensors.torch import load_file
from transformers import AutoModel

from condenser_lite.modeling.condenser import Condenser
from condenser_lite.training.loop import read_log
from condenser_lite.training.pretraining import build_model, pretrain
from condenser_lite.training.pretraining_config import StageConfig
from condenser_lite.training.stage_cache import is_done, stage_key
from condenser_lite.utils.errors import CheckpointError, ConfigError, DataSourceError

pytestmark = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))


def tiny(tokenizer_dir, **kw):
    base = dict(tokenizer=tokenizer_dir, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                intermediate_size=64, max_len=64, batch_size=4, max_steps=2, corpus_limit=40, save_every=None,
                heldout_fraction=None)
    base.update(kw)
    return StageConfig().replace(**base)


def test_stages_chain_and_cache(env, tokenizer_dir):
    bert = pretrain(tiny(tokenizer_dir, method="mlm"))
    assert is_done(bert) and not (bert / "condenser_head.pt").exists()
    assert [r["step"] for r in read_log(bert)] == [1, 2]

    condenser_cfg = tiny(tokenizer_dir, method="condenser", init=str(bert))
    condenser = pretrain(condenser_cfg)
    assert (condenser / "condenser_head.pt").exists()
    assert AutoModel.from_pretrained(condenser).config.num_hidden_layers == 4  # plain BERT checkpoint
    # cached: the second call returns the same folder without training (its mtime is unchanged)
    stamp = (condenser / "pretrain_config.json").stat().st_mtime_ns
    assert pretrain(condenser_cfg) == condenser
    assert (condenser / "pretrain_config.json").stat().st_mtime_ns == stamp

    co = pretrain(tiny(tokenizer_dir, method="cocondenser", init=str(condenser), corpus="scifact", chunk_size=3))
    log = read_log(co)
    assert {"loss", "mlm_loss", "co_loss"} <= set(log[0])
    record = json.loads((co / "pretrain_config.json").read_text())
    assert record["steps"] == 2 and record["config"]["init"] == str(condenser)
    # the counts it computed on: the caller's, unchanged (one thread: the policy stays off)
    assert record["threads"] == {"start": torch.get_num_threads(), "changes": []}
    # the coCondenser stage starts from the Condenser *with its head*
    loaded = Condenser.from_pretrained(co)
    assert loaded.n_head_layers == 2 and loaded.skip_from == 2
    # the checkpoint holds no batch-size-dependent state: continue it at another batch size
    again = pretrain(tiny(tokenizer_dir, method="cocondenser", init=str(co), corpus="scifact", batch_size=6,
                          chunk_size=4, max_steps=1))
    assert json.loads((again / "pretrain_config.json").read_text())["steps"] == 1


def test_key_covers_settings_and_parent_by_content(env, tokenizer_dir, tmp_path):
    a = tiny(tokenizer_dir, method="mlm")
    assert stage_key(a) == stage_key(tiny(tokenizer_dir, method="mlm", save_every=5))  # bookkeeping only
    assert stage_key(a) != stage_key(tiny(tokenizer_dir, method="mlm", lr=2e-3))
    parent = tmp_path / "p"
    parent.mkdir()
    (parent / "config.json").write_text("{}")
    (parent / "model.safetensors").write_bytes(b"weights 1")
    child = tiny(tokenizer_dir, init=str(parent))
    k1 = stage_key(child)
    (parent / "pretrain_config.json").write_text(json.dumps({"wall_time": 3.5}))  # a record, not the weights
    assert stage_key(child) == k1
    (parent / "model.safetensors").write_bytes(b"weights 2")
    assert stage_key(child) != k1  # other weights at the same path: another stage
    copy = tmp_path / "copy"
    shutil.copytree(parent, copy)
    assert stage_key(child.replace(init=str(copy))) == stage_key(child)  # the same weights elsewhere: same stage


def test_condenser_variants_join_the_key_only_when_set(env, tokenizer_dir):
    """E3/E5's fields leave every other stage's key as it was before they existed (a stage that
    computes the same keeps its cached result) and change the key where set."""
    from condenser_lite.training.stage_cache import stage_settings

    plain = tiny(tokenizer_dir, method="condenser")
    assert not {"detach_early", "head_mlm_probability"} & set(stage_settings(plain))
    keys = {stage_key(plain), stage_key(plain.replace(detach_early=True)),
            stage_key(plain.replace(head_mlm_probability=0.5)), stage_key(plain.replace(head_mlm_probability=0.4))}
    assert len(keys) == 4
    with pytest.raises(ConfigError, match="Condenser stage"):
        tiny(tokenizer_dir, method="mlm", detach_early=True)
    with pytest.raises(ConfigError, match="above mlm_probability"):
        tiny(tokenizer_dir, method="condenser", head_mlm_probability=0.1)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="method"):
        StageConfig(method="electra")
    with pytest.raises(ValueError, match="corpus='scifact'"):
        StageConfig(method="cocondenser")
    with pytest.raises(TypeError, match="unknown StageConfig field"):
        StageConfig().replace(learning_rate=1)
    with pytest.raises(ValueError, match="head='load' needs an init"):
        build_model(StageConfig(method="condenser", head="load"), tokenizer=[0] * 10)


def test_initial_weights_follow_the_stage_seed(tokenizer_dir):
    """A model from scratch (and a fresh Condenser head) depends on the stage's seed only, not on
    what drew from the global RNG before: a cold-cache re-run must rebuild the same stage."""
    import torch

    from condenser_lite.training.stage_cache import get_tokenizer

    cfg = tiny(tokenizer_dir, method="condenser")
    tok = get_tokenizer(cfg)
    torch.manual_seed(1)
    a = build_model(cfg, tok).state_dict()
    torch.rand(100)
    b = build_model(cfg, tok).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = build_model(cfg.replace(seed=7), tok).state_dict()
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_stage_logs_heldout_gauges_and_resumes_exactly(env, tokenizer_dir, tmp_path, monkeypatch):
    """A Condenser stage evaluates on the fixed held-out blocks every eval_every steps and at the
    end; interrupted after step 2 of 4 and run again, it resumes from its checkpoint and ends with
    the same weights, log and record as an uninterrupted run."""
    import torch

    from condenser_lite.training import pretraining
    from condenser_lite.training.threads import POLICY_ENV

    # bit-identical weights need one thread count in both runs, whatever the load does meanwhile
    monkeypatch.setenv(POLICY_ENV, "off")
    cfg = tiny(tokenizer_dir, method="condenser", max_steps=4, save_every=1, heldout_fraction=0.05, eval_blocks=8,
               eval_every=2)
    whole = pretrain(cfg, output_dir=tmp_path / "whole")
    record = json.loads((whole / "pretrain_config.json").read_text())
    gauges = record["heldout"]
    assert gauges["step"] == 4
    assert {"mlm_loss", "head_loss", "cls_cosine", "cls_swap_gap", "cls_swap_noise"} <= set(gauges)
    # the pre-registered reliance gauge's parts, on the same draw-0 masks as mlm_loss
    assert {f"reliance_{k}_loss" for k in ("own", "ablated", "zero", "mean", "late")} <= set(gauges)
    assert gauges["reliance_own_loss"] > 0 and gauges["reliance_late_loss"] > 0
    assert record["heldout_set"]["n_blocks"] == 8 and 0 < record["heldout_set"]["unigram_entropy"] < 10
    log = read_log(whole)
    assert [r["step"] for r in log if "eval_mlm_loss" in r] == [2, 4]
    compute = record["compute"]
    assert compute["steps"] == 4 and compute["sequences"] == 16
    assert compute["tokens"] == sum(r["tokens"] for r in log) and 0 < compute["tokens"] <= compute["positions"]

    class Interrupting(pretraining.MLMCollator):
        calls = 0

        def __call__(self, examples):
            type(self).calls += 1
            if type(self).calls == 3:  # building step 3's batch
                raise KeyboardInterrupt
            return super().__call__(examples)

    monkeypatch.setattr(pretraining, "MLMCollator", Interrupting)  # the held-out set is cached already
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, output_dir=tmp_path / "resumed")
    assert not is_done(tmp_path / "resumed")
    monkeypatch.undo()
    monkeypatch.setenv(POLICY_ENV, "off")  # undo() dropped it with the collator
    resumed = pretrain(cfg, output_dir=tmp_path / "resumed")
    again = json.loads((resumed / "pretrain_config.json").read_text())
    assert json.loads((resumed / "train" / "train_state.json").read_text())["resumed_from"] == 2
    a, b = Condenser.from_pretrained(whole).state_dict(), Condenser.from_pretrained(resumed).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    timing = ("elapsed", "cpu")
    assert [{k: v for k, v in r.items() if k not in timing} for r in read_log(resumed)] == \
        [{k: v for k, v in r.items() if k not in timing} for r in log]
    assert again["heldout"] == gauges
    assert {k: v for k, v in again["compute"].items() if "seconds" not in k} == \
        {k: v for k, v in compute.items() if "seconds" not in k}


def test_heldout_documents_are_never_trained_on(env, tokenizer_dir):
    from condenser_lite.training.pretraining_data import general_sections

    train, held = general_sections(0.05)
    key = lambda d: set(zip(d["source"], d["doc_id"]))  # noqa: E731
    assert held is not None and len(held) > 0 and not key(train) & key(held)
    assert general_sections(None)[1] is None


def test_heldout_blocks_carry_their_documents_and_several_mask_draws(env, tokenizer_dir):
    """The held-out batches number each block's document (source, doc_id): two blocks share a
    number exactly when they come from the same document; the mask draws hold the same blocks,
    masked afresh."""
    import torch

    from condenser_lite.data.packing import mlm_eval_batches, pack_blocks
    from condenser_lite.modeling.masking import MLMCollator
    from condenser_lite.training.pretraining_data import EVAL_SEED, general_sections, heldout_set, RELIANCE_DRAWS
    from condenser_lite.training.stage_cache import get_tokenizer

    cfg = tiny(tokenizer_dir, method="condenser", heldout_fraction=0.05, eval_blocks=24)
    tok = get_tokenizer(cfg)
    held_out = heldout_set(cfg, tok)
    batches, draws = held_out["batches"], held_out["mask_draws"]
    assert len(draws) == RELIANCE_DRAWS - 1
    # recompute each block's document from the held-out sections
    _, held = general_sections(0.05)
    blocks = pack_blocks(held, tok, max_len=cfg.model.max_len, short_seq_prob=cfg.short_seq_prob, seed=EVAL_SEED)
    plain = mlm_eval_batches(blocks, MLMCollator(tok, mlm_probability=cfg.mlm_probability), n_blocks=24,
                             batch_size=64, seed=EVAL_SEED, columns=("doc_index",))
    keys = [(held[int(i)]["source"], held[int(i)]["doc_id"]) for b in plain for i in b["doc_index"]]
    ids = torch.cat([b["doc_id"] for b in batches]).tolist()
    assert len(set(keys)) > 1
    assert all((keys[i] == keys[j]) == (ids[i] == ids[j]) for i in range(len(ids)) for j in range(len(ids)))
    assert all(torch.equal(b["labels"], p["labels"]) for b, p in zip(batches, plain))  # draw 0: the old masks
    for draw in draws:
        for b, d in zip(batches, draw):
            whole = lambda x: torch.where(x["labels"] != -100, x["labels"], x["input_ids"])  # noqa: E731
            assert torch.equal(whole(b), whole(d)) and torch.equal(b["doc_id"], d["doc_id"])
            assert not torch.equal(b["labels"], d["labels"])


def test_dropout_and_attention_kernel_reach_the_model_and_fine_tuning_puts_dropout_back(tokenizer_dir, tmp_path):
    """The small budget pre-trains without dropout and with eager attention; both reach every
    layer (the head's too), and fine-tuning's ``dropout`` overrides the checkpoint's."""
    from condenser_lite.retrieval.biencoder import BiEncoder
    from condenser_lite.training.stage_cache import get_tokenizer
    from condenser_lite.training.similarity import SentenceEncoder

    cfg = tiny(tokenizer_dir, method="condenser", dropout=0.0, attn_implementation="eager")
    tok = get_tokenizer(cfg)
    model = build_model(cfg, tok)
    rates = {m.p for m in model.modules() if m.__class__.__name__ == "Dropout"}
    assert rates == {0.0}, rates
    assert model.backbone.config._attn_implementation == "eager"
    assert build_model(cfg.replace(attn_implementation="sdpa"), tok).backbone.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError, match="attn_implementation"):
        cfg.replace(attn_implementation="flash")
    with pytest.raises(ValueError, match="dropout"):
        cfg.replace(dropout=1.0)
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    assert BiEncoder.from_pretrained(tmp_path / "ckpt").config.hidden_dropout_prob == 0.0  # its own
    for loaded in (BiEncoder.from_pretrained(tmp_path / "ckpt", dropout=0.1),
                   SentenceEncoder.from_pretrained(tmp_path / "ckpt", dropout=0.1)):
        assert {m.p for m in loaded.modules() if m.__class__.__name__ == "Dropout"} == {0.1}


def test_continuing_a_saved_head_with_another_shape_is_refused_naming_the_fix():
    """The committed small Condenser's head reads layer 1 through 1 layer; a coCondenser stage with
    the tiny preset's 2 + 2 must not load it (the head would read a layer it never learnt on)."""
    from locations import ROOT

    saved = str(ROOT / "results" / "checkpoints" / "small" / "condenser")
    asked = StageConfig().replace(method="cocondenser", corpus="scifact", init=saved, skip_from=2, n_head_layers=2,
                                  head="load")
    with pytest.raises(ConfigError, match=r"skip_from=1, n_head_layers=1.*--set model.skip_from=1 --set model.n_head_layers=1.*"
                       r"--set stages.cocondenser.head=random"):
        build_model(asked, None)
    model = build_model(asked.replace(skip_from=1, n_head_layers=1), None)
    assert (model.skip_from, model.n_head_layers) == (1, 1)


def _fixed_tokenizer(tmp_path):
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", "the", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))


def test_general_stage_keys_stay_as_they_were(tmp_path, monkeypatch):
    """Stages on the general corpus keep the keys (and cached results) they had before a reader's
    own corpus could be pre-trained on with MLM or Condenser. Pinned on the local mirror, a fixed
    vocabulary and bf16 ("auto" resolves by machine)."""
    import dataclasses

    from condenser_lite.reproduction.configuration.presets import stage_config
    from condenser_lite.training import stage_cache

    from condenser_lite.reproduction.configuration.presets import get_preset

    monkeypatch.setattr(stage_cache, "resolve_precision", lambda precision: "bf16")
    tok = _fixed_tokenizer(tmp_path)
    small = get_preset("small")
    # the Condenser from scratch as these keys were pinned: by BERT's recipe (it now trains by its
    # own, stages.condenser, and so has another key)
    by_bert = stage_config(small.replace(stages=dataclasses.replace(small.stages, condenser=small.stages.bert)),
                           "condenser")
    keys = {"mlm": stage_key(stage_config("small", "mlm"), tok, str(MIRROR)),
            "condenser": stage_key(by_bert, tok, str(MIRROR))}
    assert keys == {"mlm": "5a6830c7c1b8", "condenser": "42d905ab2487"}
    assert stage_key(stage_config("small", "condenser"), tok, str(MIRROR)) != keys["condenser"]


def test_an_mlm_stage_on_a_readers_corpus_packs_it_and_keys_it_by_content(env, tokenizer_dir, tmp_path):
    """`pretrain --method mlm|condenser --corpus FILE`: its documents (title as a first sentence)
    packed as the general corpus is; the key follows the file's content."""
    from condenser_lite.data.tokenizer import load_tokenizer
    from condenser_lite.training.pretraining_data import general_blocks

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"title": f"Bicycle {i}", "text": "A chain drives the rear wheel. " * 12})
                            + "\n" for i in range(5)))
    cfg = tiny(tokenizer_dir, method="mlm", corpus=str(docs), corpus_limit=None)
    tok = load_tokenizer(tokenizer_dir)
    blocks = general_blocks(cfg, tok)
    assert len(blocks) >= 5 and all(len(b["input_ids"]) <= 64 for b in blocks)
    first = tok.decode(blocks[0]["input_ids"])
    assert first.startswith("[CLS] bicycle 0 a chain drives")
    key = stage_key(cfg, tok)
    with docs.open("a") as f:
        f.write(json.dumps({"text": "One more document."}) + "\n")
    assert stage_key(cfg, tok) != key


def tiny_stage(tokenizer_dir: str, **changes) -> StageConfig:
    base = dict(tokenizer=tokenizer_dir, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                intermediate_size=64, max_len=64, batch_size=4, max_steps=1, corpus_limit=20, save_every=None)
    return StageConfig().replace(**{**base, **changes})


def test_pretrain_into_another_stages_folder_is_refused(tokenizer_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    folder = pretrain(tiny_stage(tokenizer_dir, method="condenser"), output_dir=tmp_path / "cd", data_dir=MIRROR)
    settings = ["--set", f"tokenizer={tokenizer_dir}", "--set", "hidden_size=32", "--set", "num_attention_heads=2",
                "--set", "intermediate_size=64", "--set", "stages.bert.batch_size=4", "--set", "stages.bert.max_steps=1",
                "--set", "stages.bert.corpus_limit=20", "--data-dir", MIRROR, "--output-dir", folder]
    line = one_error_line(cli(["pretrain", "--method", "mlm", *settings], capsys))
    assert "method: saved 'condenser' vs now 'mlm'" in line
    assert (folder / "condenser_head.pt").exists()  # left as it was
    (folder / "pretrain_config.json").unlink()  # now a model that no finished stage claims: not overwritten
    with pytest.raises(CheckpointError, match="no pretrain_config.json"):
        pretrain(tiny_stage(tokenizer_dir, method="condenser"), output_dir=folder, data_dir=MIRROR)


def test_stage_cache_follows_the_weights_at_init_and_the_data(tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    bert = pretrain(tiny_stage(tokenizer_dir, method="mlm"))
    init = tmp_path / "runs" / "bert"  # a user's folder (no stage record): only its files say what it is
    shutil.copytree(bert, init, ignore=shutil.ignore_patterns("train", "pretrain_config.json", ".lock"))
    cfg = tiny_stage(tokenizer_dir, method="condenser", init=str(init))
    first = pretrain(cfg)

    shutil.rmtree(init)  # replace the files at that path with other weights
    shutil.copytree(pretrain(tiny_stage(tokenizer_dir, method="mlm", seed=1)), init,
                    ignore=shutil.ignore_patterns("train", "pretrain_config.json", ".lock"))
    second = pretrain(cfg)
    assert second != first
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert not all(torch.equal(a[k], b[k]) for k in a)

    # another copy of the data: one file changed -> another stage; a mirror that is not there -> refused
    other = tmp_path / "mirror"
    shutil.copytree(MIRROR / "enwiki-sample", other / "enwiki-sample")
    (other / "wikitext-2-tokenized").symlink_to(MIRROR / "wikitext-2-tokenized")
    with (other / "enwiki-sample" / "lee_background.cor").open("a") as f:
        f.write("One more news article about the weather, added to change the corpus.\n")
    mlm = tiny_stage(tokenizer_dir, method="mlm")
    assert pretrain(mlm, data_dir=other) != bert
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DataSourceError, match="nowhere"):
        pretrain(mlm)


def run_module(args: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "condenser_lite", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def child_env(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CONDENSER_LITE_CACHE": str(tmp_path / "cache"),
            "CONDENSER_LITE_DATA": str(MIRROR), "OMP_NUM_THREADS": "1"}


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    out = dict(load_file(folder / "model.safetensors"))
    out.update({f"head/{k}": v for k, v in torch.load(folder / "condenser_head.pt", weights_only=True).items()})
    return out


def test_two_identical_pretrain_commands_give_identical_weights(tokenizer_dir, tmp_path):
    """Separate processes, so torch's per-process start-up seed would show: a Condenser from
    scratch, and a fresh Condenser head on an --init."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    init = tmp_path / "init"
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=600, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=64)).save_pretrained(init)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(init)
    def settings(stage: str) -> list[str]:  # a Condenser trains by stages.condenser, from scratch or not
        return ["pretrain", "--method", "condenser", "--set", f"tokenizer={tokenizer_dir}", "--set", "hidden_size=32",
                "--set", "num_attention_heads=2", "--set", "intermediate_size=64", "--set", f"stages.{stage}.batch_size=4",
                "--set", f"stages.{stage}.corpus_limit=20", "--set", f"stages.{stage}.max_steps=1"]
    # each process runs both commands (one start-up, two fresh initialisations), as `python -m
    # condenser_lite pretrain ...` would one after the other
    script = "import sys, json; from condenser_lite.cli import main; [main(a) for a in json.loads(sys.argv[1])]"
    procs = []
    for i in (1, 2):
        commands = [[*settings("condenser"), "--output-dir", str(tmp_path / f"scratch{i}")],
                    [*settings("condenser"), "--init", str(init), "--output-dir", str(tmp_path / f"head{i}")]]
        procs.append(subprocess.Popen([sys.executable, "-c", script, json.dumps(commands)], cwd=ROOT,
                                      env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    for name in ("scratch", "head"):
        a, b = tensors(tmp_path / f"{name}1"), tensors(tmp_path / f"{name}2")
        assert a.keys() == b.keys() and len(a) > 70
        assert [k for k in a if not torch.equal(a[k], b[k])] == []


def test_two_identical_pretrain_commands_at_once(tokenizer_dir, tmp_path):
    out = tmp_path / "stage"
    args = ["pretrain", "--method", "mlm", "--set", f"tokenizer={tokenizer_dir}", "--set", "hidden_size=32",
            "--set", "num_attention_heads=2", "--set", "intermediate_size=64", "--set", "stages.bert.batch_size=4",
            "--set", "stages.bert.corpus_limit=20", "--set", "stages.bert.max_steps=12", "--set", "stages.bert.save_every=3",
            "--output-dir", out]
    procs = [run_module(args, child_env(tmp_path)) for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    steps = [json.loads(line)["step"] for line in (out / "train" / "log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 13))  # trained once, not twice into one log
    assert sum("reusing the pre-trained stage" in e for e in errs) == 1
