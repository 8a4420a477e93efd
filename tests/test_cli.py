from pathlib import Path

import pytest

from condenser_lite.arms import arm_config
from condenser_lite.cli import build_parser, main, parse_overrides, pretrain_config
from condenser_lite.errors import ConfigError
from condenser_lite.presets import get_preset
from condenser_lite.pretraining import PretrainConfig, is_done, paper_cocondenser, paper_condenser

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"


def test_overrides_convert_to_field_types():
    cfg = parse_overrides(PretrainConfig(), ["lr=1e-3", "max_steps=7", "late_mlm=false", "chunk_size=none",
                                             "corpus=scifact", "mixed-precision=bf16"])
    assert (cfg.lr, cfg.max_steps, cfg.late_mlm, cfg.chunk_size, cfg.corpus, cfg.mixed_precision) == (
        1e-3, 7, False, None, "scifact", "bf16")
    assert isinstance(cfg.max_steps, int)


@pytest.mark.parametrize("bad,msg", [(["nope=1"], "unknown setting 'nope'"), (["lr"], "key=value")])
def test_overrides_reject_unknown(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_overrides(PretrainConfig(), bad)


@pytest.mark.parametrize("method, init, arm", [("mlm", None, "bert"), ("mlm", "ckpt", "bert_cont"),
                                              ("condenser", "ckpt", "condenser"), ("cocondenser", "ckpt", "cocondenser")])
def test_pretrain_command_runs_the_books_stages(method, init, arm):
    """`pretrain --preset tiny` builds exactly the stage the chapters' arms run (the same preset)."""
    args = build_parser().parse_args(["pretrain", "--preset", "tiny", "--method", method, *(["--init", init] if init else [])])
    cfg = pretrain_config(args)
    assert cfg == arm_config(arm, get_preset("tiny"), init)
    tiny = get_preset("tiny")
    assert (cfg.lr, cfg.max_len) == (tiny.pretraining.cocondenser_lr if method == "cocondenser" else tiny.pretraining.lr,
                                     tiny.model.max_len) == (1e-3, 64)


def test_pretrain_command_paper_preset():
    for method, expected in (("condenser", paper_condenser()), ("cocondenser", paper_cocondenser())):
        args = build_parser().parse_args(["pretrain", "--preset", "paper", "--method", method])
        assert pretrain_config(args) == expected  # starts from the published checkpoint


def test_preset_overrides_are_dotted_where_ambiguous():
    preset = parse_overrides(get_preset("micro"), ["finetune.lr=2e-4", "s1_steps=5", "seeds=[0, 1, 2]", "model.tokenizer=t"])
    assert (preset.finetune.lr, preset.pretraining.s1_steps, preset.seeds, preset.model.tokenizer) == (2e-4, 5, (0, 1, 2), "t")
    with pytest.raises(ConfigError, match="ambiguous"):
        parse_overrides(get_preset("micro"), ["lr=1e-3"])


@pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror not found")
def test_pretrain_command_runs_a_stage(tmp_path, monkeypatch, capsys):
    from condenser_lite.tokenizer import train_wordpiece

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    tok = tmp_path / "tok"
    train_wordpiece(["the cat sat on the mat. a dog ran."] * 50, vocab_size=200, save_dir=tok)
    main(["pretrain", "--method", "mlm", "--data-dir", str(MIRROR), "--output-dir", str(tmp_path / "out"),
          "--set", f"tokenizer={tok}", "--set", "max_steps=1", "--set", "batch_size=2", "--set", "hidden_size=32",
          "--set", "num_attention_heads=2", "--set", "intermediate_size=64", "--set", "corpus_limit=5",
          "--set", "max_len=32"])
    assert is_done(tmp_path / "out")
    assert str(tmp_path / "out") in capsys.readouterr().out


def test_retrieval_commands_end_to_end_on_the_tiny_fixture(tmp_path, capsys):
    """finetune (two rounds) -> search -> evaluate -> encode, as a full-scale user types them."""
    import json

    import numpy as np

    from test_fullscale_path import FIXTURE
    from tiny_checkpoint import make_checkpoint

    texts = [json.loads(line)["text"] for line in (FIXTURE / "msmarco-passage" / "corpus.jsonl").open()]
    init = make_checkpoint(tmp_path / "init", texts * 3)
    common = ["--data", "msmarco", "--data-dir", str(FIXTURE)]
    main(["finetune", "--init", str(init), "--output-dir", str(tmp_path / "ft"), "--rounds", "2", "--max-steps", "2",
          "--set", "batch_size=2", "--set", "train_n_passages=2", "--set", "mixed_precision=no", *common])
    assert (tmp_path / "ft" / "round2" / "config.json").exists()
    capsys.readouterr()
    main(["search", "--model", str(tmp_path / "ft" / "round2"), "--split", "dev", "--out", str(tmp_path / "dev.trec"),
          "--k", "5", *common])
    searched = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main(["evaluate", "--run", str(tmp_path / "dev.trec"), "--split", "dev", *common])
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert searched == evaluated and set(evaluated) == {"nDCG@10", "RR@10", "R@100"}
    main(["encode", "--model", str(tmp_path / "ft" / "round2"), "--out", str(tmp_path / "e.npz"), "--split", "dev", *common])
    saved = np.load(tmp_path / "e.npz")
    assert saved["embeddings"].shape == (len(texts), 32) and len(saved["ids"]) == len(texts)
