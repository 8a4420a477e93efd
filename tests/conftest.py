"""Shared pytest configuration."""

from pathlib import Path

import pytest


def pytest_configure(config):
    # tests/test_distributed.py starts 2 CPU processes; deselect with -m "not distributed".
    config.addinivalue_line("markers", "distributed: launches several processes (gloo, CPU); runs by default")


_MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A 600-piece WordPiece trained on 300 SciFact abstracts of the local mirror: small and quick,
    for the pre-training and protocol tests (their modules skip when the mirror is absent)."""
    from condenser_lite.data import load_beir
    from condenser_lite.tokenizer import train_wordpiece

    texts = [r["text"] for r in load_beir("scifact", data_dir=_MIRROR).corpus.select(range(300))]
    out = tmp_path_factory.mktemp("tok")
    train_wordpiece(texts, vocab_size=600, save_dir=out)
    return str(out)
