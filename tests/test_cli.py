import dataclasses
from pathlib import Path

import pytest

from condenser_lite.cli import main, parse_overrides
from condenser_lite.pretraining import PretrainConfig, is_done

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"


def test_overrides_convert_to_field_types():
    cfg = parse_overrides(PretrainConfig(), ["lr=1e-3", "max_steps=7", "late_mlm=false", "chunk_size=none",
                                             "corpus=scifact", "mixed-precision=bf16"])
    assert (cfg.lr, cfg.max_steps, cfg.late_mlm, cfg.chunk_size, cfg.corpus, cfg.mixed_precision) == (
        1e-3, 7, False, None, "scifact", "bf16")
    assert isinstance(cfg.max_steps, int)


@pytest.mark.parametrize("bad,msg", [(["nope=1"], "unknown setting 'nope'"), (["lr"], "key=value")])
def test_overrides_reject_unknown(bad, msg):
    with pytest.raises(SystemExit, match=msg):
        parse_overrides(PretrainConfig(), bad)


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
